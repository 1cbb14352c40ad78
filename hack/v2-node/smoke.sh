#!/usr/bin/env bash
# Boots the cgroup-v2 node once (hack/v2-node/run.sh: QEMU, Debian's kernel, the node's root
# with systemd) and reports from inside what the node stands on, one "SMOKE key=value" line
# each:
#   accel          the accelerator run.sh chose (kvm or tcg), and the node's own view
#                  (systemd-detect-virt: kvm, or qemu under TCG)
#   uname          uname -r
#   uptime_s       the node's uptime when the command started: the boot to the command
#   nproc          CPUs online
#   controllers    /sys/fs/cgroup/cgroup.controllers
#   psi            whether /proc/pressure/cpu exists (and its first line)
#   capeff         the command's CapEff, and sys_resource=yes|no (CAP_SYS_RESOURCE, which
#                  gVisor's shim needs)
#   runc_*         Debian's runc: a busybox bundle with a 64 MiB memory limit and cpus "1",
#                  run with `runc run`; runc_memory_max and runc_cpuset_cpus are read inside
#   runsc_*        the pinned runsc (the tools cache's): --version, then `runsc run` of the
#                  same bundle, which prints a line from inside the sandbox (runsc_said)
# then the node powers off. Exits 0 when the node ran the command to its end and each of
# these held: the controllers cpuset cpu io memory hugetlb pids, PSI, 2 CPUs,
# CAP_SYS_RESOURCE, runc's memory.max and cpuset.cpus, and runsc's container.
#
#   hack/v2-node/smoke.sh                 (root) the node hack/tools.sh v2-node-root made
#   SMOKE_TIMEOUT=600 ...                 seconds before QEMU is killed
#   SMOKE_OUT=DIR ...                     keep the node's output there (smoke.out,
#                                         console.log); by default a scratch directory
#   V2_NODE_ACCEL=kvm|tcg ...             as for run.sh
#
# Nothing is left on this machine: run.sh kills QEMU and removes its scratch files whatever
# happens; the scratch output directory is removed on exit.
set -euo pipefail

if [ "${1:-}" = --inside ]; then
	# In the node, run by v2-node-boot through run.sh, in the repository, as root.
	exec >"$V2_NODE_OUT/smoke.out" 2>&1
	say() { echo "SMOKE $*"; }
	set +e
	say "accel_node=$(systemd-detect-virt)"
	say "uptime_s=$(cut -d' ' -f1 /proc/uptime)"
	say "uname=$(uname -r)"
	say "nproc=$(nproc)"
	say "controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
	if [ -e /proc/pressure/cpu ]; then say "psi=yes $(head -n1 /proc/pressure/cpu)"; else say "psi=no"; fi
	capeff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
	sysres=no
	(((0x$capeff >> 24) & 1)) && sysres=yes # CAP_SYS_RESOURCE is capability 24
	say "capeff=$capeff sys_resource=$sysres"

	# A busybox bundle (the node's busybox-static) with memory.max 64 MiB and CPU 1 only,
	# which reads both back from inside.
	# On the root disk: runsc's gofer remounts the bundle's root read-only, which /run (tmpfs)
	# refused it ("operation not permitted").
	scratch=$(mktemp -d /var/tmp/smoke.XXXXXX)
	mkdir -p "$scratch/bundle/rootfs/bin"
	cp /bin/busybox "$scratch/bundle/rootfs/bin/busybox"
	cd "$scratch/bundle"
	if runc spec; then
		sed -i -e 's/"terminal": true/"terminal": false/' \
			-e 's|^\(\s*\)"sh"$|\1"/bin/busybox", "sh", "-c", "cat /sys/fs/cgroup/memory.max; cat /sys/fs/cgroup/cpuset.cpus"|' \
			-e 's/"resources": {/"resources": {"memory": {"limit": 67108864}, "cpu": {"cpus": "1"},/' config.json
		start=$(date +%s%N)
		out=$(timeout 120 runc --root "$scratch/runc" run smoke </dev/null 2>&1)
		rc=$?
		say "runc_rc=$rc runc_ms=$((($(date +%s%N) - start) / 1000000))"
		say "runc_memory_max=$(echo "$out" | sed -n 1p)"
		say "runc_cpuset_cpus=$(echo "$out" | sed -n 2p)"
		[ "$rc" = 0 ] || echo "$out" | sed 's/^/runc: /'

		# The pinned runsc runs the same bundle, saying where it runs.
		runsc=$RTSHIMD_TOOLS/bin/runsc
		say "runsc_version=$("$runsc" --version 2>&1 | head -n1)"
		sed -i 's|"/bin/busybox", "sh", "-c", "[^"]*"|"/bin/busybox", "sh", "-c", "echo in-gvisor $(/bin/busybox uname -r)"|' config.json
		start=$(date +%s%N)
		mkdir -p "$scratch/runsc-log"
		out=$(timeout 120 "$runsc" --root "$scratch/runsc" --debug --debug-log="$scratch/runsc-log/" \
			--network=none run smoke-runsc </dev/null 2>&1)
		rc=$?
		say "runsc_rc=$rc runsc_ms=$((($(date +%s%N) - start) / 1000000))"
		say "runsc_said=$(echo "$out" | grep -m1 '^in-gvisor')"
		if [ "$rc" != 0 ]; then
			echo "$out" | tail -n 20 | sed 's/^/runsc: /'
			# What the sandbox and gofer said before they ended.
			for f in "$scratch"/runsc-log/*; do
				grep -E -i 'panic|fatal|error|fail|W[0-9]{4}' "$f" | tail -n 15 | sed "s|^|runsc $(basename "$f"): |"
			done
		fi
	else
		say "runc_rc=spec-failed"
	fi
	cd /
	rm -rf "$scratch"
	say "done"
	exit 0
fi

[ "$(id -u)" = 0 ] || { echo "smoke.sh: run as root" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
accel=$("$here/run.sh" --accel)
out=${SMOKE_OUT:-}
if [ -z "$out" ]; then
	out=$(mktemp -d /tmp/v2-node-smoke.XXXXXX)
	trap 'rm -rf "$out"' EXIT
fi
start=$(date +%s)
rc=0
V2_NODE_OUT=$out V2_NODE_TIMEOUT=${SMOKE_TIMEOUT:-600} V2_NODE_MEM=2G V2_NODE_ACCEL=$accel \
	"$here/run.sh" 'hack/v2-node/smoke.sh --inside' || rc=$?
echo "SMOKE accel=$accel boot_to_poweroff_s=$(($(date +%s) - start)) run_rc=$rc"
touch "$out/smoke.out"
cat "$out/smoke.out"

s=$out/smoke.out
fail=""
[ "$rc" = 0 ] || fail="$fail run.sh-exit-$rc"
grep -q '^SMOKE done$' "$s" || fail="$fail command-did-not-finish"
for c in cpuset cpu io memory hugetlb pids; do
	grep -E -q "^SMOKE controllers=(.* )?$c( |$)" "$s" || fail="$fail no-$c-controller"
done
grep -q '^SMOKE psi=yes' "$s" || fail="$fail no-psi"
grep -q '^SMOKE nproc=2$' "$s" || fail="$fail not-2-cpus"
grep -q '^SMOKE capeff=.* sys_resource=yes$' "$s" || fail="$fail no-cap-sys-resource"
grep -q '^SMOKE runc_memory_max=67108864$' "$s" || fail="$fail runc-memory-max"
grep -q '^SMOKE runc_cpuset_cpus=1$' "$s" || fail="$fail runc-cpuset-cpus"
grep -q '^SMOKE runsc_rc=0 ' "$s" || fail="$fail runsc-rc"
grep -q '^SMOKE runsc_said=in-gvisor ' "$s" || fail="$fail runsc-container-output"
if [ -n "$fail" ]; then
	echo "SMOKE FAIL:$fail" >&2
	tail -n 40 "$out/console.log" 2>/dev/null | tr -d '\r' >&2 || true
	exit 1
fi
echo "SMOKE PASS"
