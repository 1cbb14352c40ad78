#!/usr/bin/env bash
# Boots the cgroup-v2 node's User-Mode Linux kernel (hack/tools.sh uml-kernel) once, as an
# ordinary process with this machine's root as its read-only root (hostfs) and an init
# script of its own, and reports from inside, one "SMOKE key=value" line each:
#   uname          uname -r
#   controllers    /sys/fs/cgroup/cgroup.controllers of a cgroup2 mount
#   psi            whether /proc/pressure/cpu exists (and its first line)
#   capbnd         init's CapBnd
#   stack          init's stack mapping (how high the user address space reaches)
#   runc_*         Debian's runc: a busybox bundle (busybox-static) with a 64 MiB memory
#                  limit (and cpus "0" where there is a cpuset controller), run with `runc
#                  run`; runc_memory_max and runc_cpuset_cpus are read inside it
#   runsc_*        the pinned runsc (/usr/local/bin/runsc): --version, then `runsc do true`
#                  on systrap, then on ptrace with --ignore-cgroups; each run's exit status
#                  and the panic or error it printed
# then powers off (poweroff -f). Exits 0 when the kernel booted, init ran to its end and
# the controllers cpuset cpu io memory pids, PSI, and runc's memory.max and cpuset.cpus
# were there; runsc's result is reported, not required.
#
#   hack/v2-node/smoke.sh                 (root) the kernel hack/tools.sh uml-kernel built
#   UML_KERNEL=/path/to/linux ...         another kernel
#   SMOKE_TIMEOUT=300 ...                 seconds before the kernel is killed
#   SMOKE_LOG=/path ...                   keep the whole console log there
#
# Nothing is left on this machine: the kernel and its processes run in a process group of
# their own that is killed on timeout, and on exit (trap) every process still naming the
# smoke's scratch directory is killed and the directory removed. No mount, loop device or
# tap is made on this machine (the node's mounts are inside UML).
set -euo pipefail

[ "$(id -u)" = 0 ] || { echo "smoke.sh: run as root" >&2; exit 2; }
# The kernel is built beforehand (minutes: not on a smoke's account).
kernel=$(readlink -f "${UML_KERNEL:-${RTSHIMD_TOOLS:-/var/cache/rtshimd-tools}/bin/linux-uml}")
[ -x "$kernel" ] || { echo "smoke.sh: no kernel at $kernel: run hack/tools.sh uml-kernel" >&2; exit 2; }
timeout=${SMOKE_TIMEOUT:-300}

work=$(mktemp -d /tmp/v2-node-smoke.XXXXXX)
chmod 0755 "$work"
cleanup() {
	local pid left
	# The kernel's processes all name $work on their command line (uml_dir=).
	for pid in $(pgrep -f -- "uml_dir=$work" || true); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		left=$(pgrep -f -- "uml_dir=$work" || true)
		[ -z "$left" ] && break
		sleep 0.5
	done
	[ -z "$left" ] || echo "smoke.sh: UML processes left: $left" >&2
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The busybox container's root, copied into the node's tmpfs by init.
mkdir -p "$work/bundle/rootfs/bin"
cp /bin/busybox "$work/bundle/rootfs/bin/busybox"

cat >"$work/init.sh" <<'INIT'
#!/bin/sh
# PID 1 of the smoke's UML kernel; $work is its directory, read-only like all of /.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
work=$(dirname "$0")
say() { echo "SMOKE $*"; }
mount -t proc proc /proc
mount -t sysfs sys /sys
grep -q ' /dev devtmpfs ' /proc/mounts || mount -t devtmpfs dev /dev
mount -t tmpfs run /run
mount -t cgroup2 none /sys/fs/cgroup
say "uname=$(uname -r)"
say "controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
if [ -e /proc/pressure/cpu ]; then say "psi=yes $(head -n1 /proc/pressure/cpu)"; else say "psi=no"; fi
say "capbnd=$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status)"
say "stack=$(grep '\[stack\]' /proc/self/maps | cut -d' ' -f1)"

# runc: Debian's, a busybox bundle with memory.max 64 MiB, reading it back from inside.
mkdir -p /run/bundle /run/runc
cp -a "$work/bundle/rootfs" /run/bundle/
cd /run/bundle
if runc spec; then
	# With a cpuset controller, the container is pinned to CPU 0 too.
	cpus=""
	grep -qw cpuset /sys/fs/cgroup/cgroup.controllers && cpus='"cpu": {"cpus": "0"},'
	sed -i -e 's/"terminal": true/"terminal": false/' \
		-e 's|^\(\s*\)"sh"$|\1"/bin/busybox", "sh", "-c", "cat /sys/fs/cgroup/memory.max; cat /sys/fs/cgroup/cpuset.cpus"|' \
		-e "s/\"resources\": {/\"resources\": {\"memory\": {\"limit\": 67108864}, $cpus/" config.json
	start=$(date +%s%N)
	out=$(timeout 120 runc --root /run/runc run smoke </dev/null 2>&1)
	rc=$?
	say "runc_rc=$rc runc_ms=$((($(date +%s%N) - start) / 1000000))"
	say "runc_memory_max=$(echo "$out" | sed -n 1p)"
	say "runc_cpuset_cpus=$(echo "$out" | sed -n 2p)"
	[ "$rc" = 0 ] || echo "$out" | sed 's/^/runc: /'
else
	say "runc_rc=spec-failed"
fi
cd /

# runsc: the pinned gVisor; does it get the address space it needs here?
say "runsc_version=$(/usr/local/bin/runsc --version 2>&1 | head -n1)"
runsc_try() { # name, runsc flags...
	name=$1
	shift
	mkdir -p "/run/runsc-$name/log"
	out=$(timeout 120 /usr/local/bin/runsc --root "/run/runsc-$name" --debug --debug-log="/run/runsc-$name/log/" \
		--rootless=false --network=none "$@" do true </dev/null 2>&1)
	rc=$?
	say "runsc_${name}_rc=$rc"
	# A panic in package init comes before any log: look in its output too.
	err=$({ echo "$out"; cat "/run/runsc-$name"/log/* 2>/dev/null; } |
		grep -E 'panic:|None of the address|mandatory cgroup|FATAL|fatal error|^[a-z ]*: ' | head -n3 | tr '\n' ' ')
	say "runsc_${name}_error=$err"
	echo "$out" | tail -n5 | sed "s/^/runsc $name: /"
}
runsc_try systrap
runsc_try ptrace --platform=ptrace --ignore-cgroups
say "done"
poweroff -f || busybox poweroff -f || echo o >/proc/sysrq-trigger
INIT
chmod 0755 "$work/init.sh"

log=${SMOKE_LOG:-$work/console.log}
start=$(date +%s)
# timeout(1) runs the kernel in a process group of its own and signals the whole group.
rc=0
TMPDIR=$work timeout --kill-after=10 "$timeout" "$kernel" mem=1024M \
	root=/dev/root rootfstype=hostfs rootflags=/ ro init="$work/init.sh" \
	umid=smoke uml_dir="$work" con=null con0=fd:0,fd:1 </dev/null >"$log" 2>&1 &
# In the background, so that a signal to this script ends it (and the trap's cleanup the
# kernel) at once rather than when the kernel ends.
wait $! || rc=$?
echo "SMOKE kernel=$kernel boot_to_poweroff_s=$(($(date +%s) - start)) kernel_rc=$rc"
# The console ends its lines with CR LF.
tr -d '\r' <"$log" | grep -a -E '^(SMOKE|runc:|runsc )' >"$work/smoke.out" || true
cat "$work/smoke.out"

fail=""
grep -q '^SMOKE done$' "$work/smoke.out" || fail="$fail init-did-not-finish"
for c in cpuset cpu io memory pids; do
	grep -E -q "^SMOKE controllers=(.* )?$c( |$)" "$work/smoke.out" || fail="$fail no-$c-controller"
done
grep -q '^SMOKE psi=yes' "$work/smoke.out" || fail="$fail no-psi"
grep -q '^SMOKE runc_memory_max=67108864$' "$work/smoke.out" || fail="$fail runc-memory-max"
grep -q '^SMOKE runc_cpuset_cpus=0$' "$work/smoke.out" || fail="$fail runc-cpuset-cpus"
if [ -n "$fail" ]; then
	echo "SMOKE FAIL:$fail" >&2
	[ -n "${SMOKE_LOG:-}" ] || tail -n 40 "$log" | tr -d '\r' >&2
	exit 1
fi
echo "SMOKE PASS"
