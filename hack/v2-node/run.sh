#!/usr/bin/env bash
# Boots the cgroup-v2 node: the User-Mode Linux kernel (hack/tools.sh uml-kernel) with the
# node's Debian root (hack/tools.sh v2-node-root) as its disk, systemd as PID 1 on the
# unified hierarchy, 1 GiB of swap, and runs one command in it as root once the node is up;
# then powers the node off. The command runs in the repository, which the node sees at
# the same path as here (read-only), as it sees the tools cache; $V2_NODE_OUT (read-write,
# the same path here and there) is for what the command leaves for the caller.
#
#   hack/v2-node/run.sh 'COMMAND'       (root) e.g. 'hack/v2-node/inside.sh'
#   V2_NODE_OUT=DIR ...                 where the command's output goes (default: a new
#                                       directory under /tmp, printed); console.log and rc
#                                       (the command's exit status) are written there too
#   V2_NODE_TIMEOUT=1800 ...            seconds before the kernel is killed
#   V2_NODE_MEM=3G ...                  the node's memory
#
# Exits with the command's status, or 124 when the node was killed on timeout, or 125
# when it powered off without one. The node has no network device: what it needs from
# outside comes through the shared directories, and its servers (the registry) listen on
# its own loopback. Nothing is left here: the kernel's processes are killed on exit
# whatever happens, the copy-on-write file, the swap disk and the memory file are removed;
# no mount, loop device or tap is made here.
set -euo pipefail

[ "$(id -u)" = 0 ] || { echo "v2-node/run.sh: run as root" >&2; exit 2; }
[ $# = 1 ] || { echo "usage: $0 'COMMAND'" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TOOLS=$(readlink -f "${RTSHIMD_TOOLS:-/var/cache/rtshimd-tools}")
kernel=$(readlink -f "$TOOLS/bin/linux-uml")
image=$(readlink -f "$TOOLS/bin/v2-node-root.img")
[ -x "$kernel" ] || { echo "v2-node/run.sh: no kernel: run hack/tools.sh uml-kernel" >&2; exit 2; }
[ -f "$image" ] || { echo "v2-node/run.sh: no root image: run hack/tools.sh v2-node-root" >&2; exit 2; }
timeout=${V2_NODE_TIMEOUT:-1800}
out=${V2_NODE_OUT:-$(mktemp -d /tmp/v2-node-out.XXXXXX)}
mkdir -p "$out"
out=$(readlink -f "$out")
rm -f "$out/rc" "$out/console.log"
# The node mounts the tools cache at the same path; its tests and scripts find it through
# RTSHIMD_TOOLS, as here (a cache away from the default path was not found there).
printf "export RTSHIMD_TOOLS='%s'\n%s\n" "$TOOLS" "$1" >"$out/cmd"

work=$(mktemp -d /tmp/v2-node.XXXXXX)
chmod 0755 "$work"
cleanup() {
	local pid left=""
	# The kernel's processes all name $work on their command line (uml_dir=).
	for pid in $(pgrep -f -- "uml_dir=$work" || true); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	for _ in $(seq 1 20); do
		left=$(pgrep -f -- "uml_dir=$work" || true)
		[ -z "$left" ] && break
		sleep 0.5
	done
	[ -z "$left" ] || echo "v2-node/run.sh: UML processes left: $left" >&2
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

truncate -s 1G "$work/swap.img"
mkswap -q "$work/swap.img" >/dev/null
echo "v2-node: booting $(basename "$kernel") with $(basename "$image"); output in $out" >&2
start=$(date +%s)
rc=0
# ubd0=COW,BACKING: the node writes into its own copy-on-write file; the cached image stays
# as built. timeout(1) runs the kernel in a process group of its own and signals the whole
# group; TMPDIR is where UML keeps its memory file.
TMPDIR=$work timeout --kill-after=10 "$timeout" "$kernel" mem="${V2_NODE_MEM:-3G}" \
	ubd0="$work/root.cow,$image" ubd1="$work/swap.img" root=/dev/ubda rw \
	systemd.unified_cgroup_hierarchy=1 \
	v2node.src="$ROOT" v2node.tools="$TOOLS" v2node.out="$out" \
	umid=v2node uml_dir="$work" con=null con0=fd:0,fd:1 </dev/null >"$out/console.log" 2>&1 &
# In the background, so that a signal to this script ends it (and the trap the kernel) at
# once rather than when the kernel ends.
wait $! || rc=$?
echo "v2-node: powered off after $(($(date +%s) - start)) s (kernel exit $rc)" >&2
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
	echo "v2-node: killed after ${timeout} s" >&2
	exit 124
fi
[ -f "$out/rc" ] || { echo "v2-node: the node powered off without running the command; console:" >&2; tail -n 40 "$out/console.log" | tr -d '\r' >&2; exit 125; }
exit "$(cat "$out/rc")"
