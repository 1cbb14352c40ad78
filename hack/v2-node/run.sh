#!/usr/bin/env bash
# Boots the cgroup-v2 node: QEMU with Debian 12's stock kernel and initramfs and the node's
# Debian root (all three from hack/tools.sh v2-node-root) as its disk, systemd as PID 1 on
# the unified hierarchy, 2 CPUs, 1 GiB of swap, and runs one command in it as root once the
# node is up; then powers the node off. The command runs in the repository, which the node
# sees at the same path as here (read-only, 9p), as it sees the tools cache; $V2_NODE_OUT
# (read-write, the same path here and there) is for what the command leaves for the caller.
#
#   hack/v2-node/run.sh 'COMMAND'       (root) e.g. 'hack/v2-node/inside.sh'
#   hack/v2-node/run.sh --accel         prints the accelerator a run would use (kvm or tcg)
#   V2_NODE_OUT=DIR ...                 where the command's output goes (default: a new
#                                       directory under /tmp, printed); console.log and rc
#                                       (the command's exit status) are written there too
#   V2_NODE_TIMEOUT=1800 ...            seconds before QEMU is killed
#   V2_NODE_MEM=3G ...                  the node's memory
#   V2_NODE_ACCEL=kvm|tcg ...           the accelerator; by default KVM where it can run
#                                       a stock kernel here, else QEMU's emulation (TCG)
#
# Exits with the command's status, or 124 when the node was killed on timeout, or 125
# when it powered off without one. The node has no network device: what it needs from
# outside comes through the shared directories, and its servers (the registry) listen on
# its own loopback. Nothing is left here: QEMU is killed on exit whatever happens, and the
# copy-on-write overlay and the swap disk are removed with the scratch directory; no
# mount, loop device or tap is made here.
set -euo pipefail

# kvm_works: KVM here can run Debian's stock kernel. That takes the hardware's
# virtualisation (kvm_intel or kvm_amd) and a /dev/kvm QEMU can open. /dev/kvm alone is not
# enough: this project's machines run a paravirtual KVM (kvm_pvm) that starts QEMU's
# machine and its BIOS, but a stock kernel hangs there at its first instructions in 64-bit
# mode, printing nothing.
kvm_works() {
	[ -r /dev/kvm ] && [ -w /dev/kvm ] || return 1
	[ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ] || return 1
	echo quit | timeout 20 qemu-system-x86_64 -machine none -accel kvm -nodefaults -display none \
		-monitor stdio >/dev/null 2>&1
}

# accel: what V2_NODE_ACCEL asks for, or kvm where it works, else tcg.
accel() {
	case ${V2_NODE_ACCEL:-} in
	kvm)
		kvm_works || { echo "v2-node/run.sh: V2_NODE_ACCEL=kvm, but KVM cannot run a stock kernel here (it needs /dev/kvm and kvm_intel or kvm_amd)" >&2; return 2; }
		echo kvm ;;
	tcg) echo tcg ;;
	"") if kvm_works; then echo kvm; else echo tcg; fi ;;
	*) echo "v2-node/run.sh: V2_NODE_ACCEL=$V2_NODE_ACCEL: kvm or tcg" >&2; return 2 ;;
	esac
}

command -v qemu-system-x86_64 >/dev/null && command -v qemu-img >/dev/null ||
	{ echo "v2-node/run.sh: no qemu-system-x86_64 or qemu-img: apt-get install qemu-system-x86 qemu-utils (make deps-test)" >&2; exit 2; }
if [ "${1:-}" = --accel ]; then
	accel
	exit
fi
[ "$(id -u)" = 0 ] || { echo "v2-node/run.sh: run as root" >&2; exit 2; }
[ $# = 1 ] || { echo "usage: $0 'COMMAND'" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TOOLS=$(readlink -f "${RTSHIMD_TOOLS:-/var/cache/rtshimd-tools}")
kernel=$(readlink -f "$TOOLS/bin/v2-node-vmlinuz")
initrd=$(readlink -f "$TOOLS/bin/v2-node-initrd.img")
image=$(readlink -f "$TOOLS/bin/v2-node-root.img")
for f in "$kernel" "$initrd" "$image"; do
	[ -f "$f" ] || { echo "v2-node/run.sh: no $f: run hack/tools.sh v2-node-root" >&2; exit 2; }
done
acc=$(accel)
# Under KVM the host's CPU; under TCG every feature QEMU emulates (multi-threaded: a host
# thread per CPU).
accel_opts=(-accel kvm -cpu host)
[ "$acc" = kvm ] || accel_opts=(-accel tcg,thread=multi -cpu max)
timeout=${V2_NODE_TIMEOUT:-1800}
out=${V2_NODE_OUT:-$(mktemp -d /tmp/v2-node-out.XXXXXX)}
mkdir -p "$out"
out=$(readlink -f "$out")
rm -f "$out/rc" "$out/console.log"
# The node mounts the tools cache at the same path; its tests and scripts find it through
# RTSHIMD_TOOLS, as here (a cache away from the default path was not found there).
printf "export RTSHIMD_TOOLS='%s'\n%s\n" "$TOOLS" "$1" >"$out/cmd"

work=$(mktemp -d /tmp/v2-node.XXXXXX)
cleanup() {
	local pid left=""
	# QEMU names $work on its command line (its disks).
	for pid in $(pgrep -f -- "$work/" || true); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	for _ in $(seq 1 20); do
		left=$(pgrep -f -- "$work/" || true)
		[ -z "$left" ] && break
		sleep 0.5
	done
	[ -z "$left" ] || echo "v2-node/run.sh: QEMU processes left: $left" >&2
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The node writes into an overlay of its own; the cached image stays as built.
qemu-img create -q -f qcow2 -F raw -b "$image" "$work/root.qcow2"
truncate -s 1G "$work/swap.img"
mkswap -q "$work/swap.img" >/dev/null
echo "v2-node: booting $(basename "$kernel") ($acc) with $(basename "$image"); output in $out" >&2
start=$(date +%s)
rc=0
# The disks are scratch, dropped after the run: cache=unsafe lets QEMU ignore the guest's
# flushes. panic=-1 with -no-reboot: a kernel panic ends QEMU too, as power-off does.
# apparmor=0: the node has no AppArmor, as under UML (its root has no apparmor_parser, so
# rtshimd would refuse profiles that critest's AppArmor specs, seeing the module, ask for).
# -nodefaults: no VGA, parallel port or default NIC (each costs the guest's boot time
# under TCG); the serial port is the console.
# timeout(1) runs QEMU in a process group of its own and signals the whole group.
timeout --kill-after=10 "$timeout" qemu-system-x86_64 -name v2-node \
	-machine q35 "${accel_opts[@]}" -smp 2 -m "${V2_NODE_MEM:-3G}" \
	-nodefaults -nographic -serial stdio -no-reboot -nic none -device virtio-rng-pci \
	-kernel "$kernel" -initrd "$initrd" \
	-append "root=/dev/vda rw console=ttyS0 panic=-1 apparmor=0 systemd.unified_cgroup_hierarchy=1 v2node.src=$ROOT v2node.tools=$TOOLS v2node.out=$out" \
	-drive "file=$work/root.qcow2,format=qcow2,if=virtio,cache=unsafe" \
	-drive "file=$work/swap.img,format=raw,if=virtio,cache=unsafe" \
	-virtfs "local,path=$ROOT,mount_tag=v2src,security_model=passthrough,readonly=on,multidevs=remap" \
	-virtfs "local,path=$TOOLS,mount_tag=v2tools,security_model=passthrough,readonly=on,multidevs=remap" \
	-virtfs "local,path=$out,mount_tag=v2out,security_model=passthrough,multidevs=remap" \
	</dev/null >"$out/console.log" 2>&1 &
# In the background, so that a signal to this script ends it (and the trap QEMU) at once
# rather than when QEMU ends.
wait $! || rc=$?
echo "v2-node: powered off after $(($(date +%s) - start)) s (qemu exit $rc)" >&2
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
	echo "v2-node: killed after ${timeout} s" >&2
	exit 124
fi
[ -f "$out/rc" ] || { echo "v2-node: the node powered off without running the command; console:" >&2; tail -n 40 "$out/console.log" | tr -d '\r' >&2; exit 125; }
exit "$(cat "$out/rc")"
