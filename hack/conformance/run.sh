#!/usr/bin/env bash
# make conformance: the CRI conformance suite (critest, sigs.k8s.io/cri-tools) against the
# built daemon, on runc (the default handler), on runsc and on containerd's runc shim v2
# (runc-shim, the shim-v2 kind), offline, and the results checked
# against the lists in conformance/expected/ (README there).
#
#   hack/conformance/run.sh              everything, every handler (needs root)
#   CONFORMANCE_HANDLERS=runc ...        one handler
#   CONFORMANCE_FOCUS='regex' ...        only specs matching (debugging; the check then
#                                        ignores listed specs that did not run)
#   CONFORMANCE_UPDATE=1 ...             rewrite conformance/expected/<handler>.txt with
#                                        the specs that passed in this run
#   CONFORMANCE_VERBOSE=1 ...            list the specs skipped or failing as expected, too
#   CONFORMANCE_HOLD=1 ...               start registry and daemon, then wait (debugging);
#                                        SIGTERM to the script cleans up
#   CONFORMANCE_SUBSET=FILE ...          only the specs FILE names (full texts, one a line);
#                                        every one of them must run (the check's -selected)
#   CONFORMANCE_EXPECTED=DIR ...         the expected lists (default conformance/expected;
#                                        the cgroup-v2 node's: conformance/expected-v2)
#   CONFORMANCE_PREBUILD=DIR ...         only build what a machine without Go needs into
#                                        DIR (critest, crictl, ginkgo, the stand-ins, the
#                                        image builder, the checker), then exit
#   CONFORMANCE_PREBUILT=DIR ...         run with DIR's binaries: no Go, no apt, no network
#                                        (the cgroup-v2 node, hack/v2-node/inside.sh)
#
# What it does, all of it undone on exit whatever happens (trap):
#   1. critest (hack/tools.sh) and a ginkgo CLI for parallel runs (same source and version)
#   2. every Linux image critest pulls, built by hack/conformance/images from Debian's
#      dynamic busybox and the stand-ins in hack/conformance/standins, pushed to Debian's
#      docker-registry on 127.0.0.1:<free port>
#   3. bin/rtshimd with a config of its own in a temp dir (socket, state, run root, CNI
#      bridge and subnet, registries mapped onto the local registry)
#   4. critest per handler with a ginkgo JSON report, checked by hack/conformance/check
#   5. cleanup: pods removed through the daemon, daemon and registry stopped, then checks
#      that no process, mount, cgroup, bridge or iptables rule of this run is left (any left
#      is removed and reported as a leak, which fails the run)
#
# Reports and logs are kept in $CONFORMANCE_OUT (default /tmp/rtshimd-conformance).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${CONFORMANCE_OUT:-/tmp/rtshimd-conformance}
HANDLERS=${CONFORMANCE_HANDLERS:-runc runsc runsc-debian runc-shim}
# Specs run in this many ginkgo processes (Serial specs, the image ones, run alone at the
# end). Measured on 2 cores: see conformance/expected/README.md.
PARALLEL=${CONFORMANCE_PARALLEL:-4}
FOCUS=${CONFORMANCE_FOCUS:-}
SUBSET=${CONFORMANCE_SUBSET:-}
UPDATE=${CONFORMANCE_UPDATE:-}
EXPECTED=${CONFORMANCE_EXPECTED:-conformance/expected}
PREBUILD=${CONFORMANCE_PREBUILD:-}
PREBUILT=${CONFORMANCE_PREBUILT:-}
TOOLS=${RTSHIMD_TOOLS:-/var/cache/rtshimd-tools}
NET_NAME=rtshimd-conformance
BRIDGE=rtshimcf0
SUBNET=10.231.0.0/24
SUBNET_RE='10\.231\.0\.'
export GOFLAGS="-buildvcs=false -tags=containers_image_openpgp,exclude_graphdriver_btrfs"

T0=$(date +%s)
LOG_TAG=conformance
. hack/lib/harness.sh

# build_helpers DIR: critest, crictl, the ginkgo CLI of critest's go.mod (critest --parallel
# runs the ginkgo in PATH), the stand-ins, the image builder and the checker, into DIR.
build_helpers() {
	local dir=$1 toolbin src gv s
	mkdir -p "$dir"
	toolbin=$(hack/tools.sh critest crictl)
	cp -L "$toolbin/critest" "$toolbin/crictl" "$dir/"
	src=$(ls -d "$TOOLS"/src/cri-tools-"$(readlink "$toolbin/critest" | sed 's/^critest-//')")
	gv=$(awk '$1 == "github.com/onsi/ginkgo/v2" {print $2}' "$src/go.mod")
	if [ ! -x "$toolbin/ginkgo-$gv" ]; then
		log "building ginkgo $gv"
		(cd "$src" && GOFLAGS=-buildvcs=false CGO_ENABLED=0 go build -trimpath -o "$toolbin/ginkgo-$gv.tmp" github.com/onsi/ginkgo/v2/ginkgo)
		mv "$toolbin/ginkgo-$gv.tmp" "$toolbin/ginkgo-$gv"
	fi
	cp "$toolbin/ginkgo-$gv" "$dir/ginkgo"
	for s in nginx labutils nnp; do
		CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$dir/$s" "./hack/conformance/standins/$s"
	done
	CGO_ENABLED=0 go build -o "$dir/conformance-images" ./hack/conformance/images
	CGO_ENABLED=0 go build -o "$dir/conformance-check" ./hack/conformance/check
}
if [ -n "$PREBUILD" ]; then
	build_helpers "$PREBUILD"
	hack/tools.sh busybox >/dev/null
	exit 0
fi

[ "$(id -u)" = 0 ] || die "needs root (namespaces, mounts, cgroups, CNI)"
[ -x bin/rtshimd ] && [ -x bin/rtshim-monitor ] && [ -x bin/rtshim-pause ] || die "run make build first (make conformance does)"

# --- 0. Debian packages --------------------------------------------------------------------
if [ -z "$PREBUILT" ]; then
	pkgs="docker-registry runc runsc containerd containernetworking-plugins iptables iproute2 jq"
	# The current runsc the runsc row names (pinned in hack/tools.sh).
	hack/tools.sh install-runsc >/dev/null || die "building the pinned runsc failed"
	apt_need $pkgs
fi

live=$(reclaim_dead_runs rtshimd-conformance)
[ "$live" = 0 ] || die "another conformance run is under way here ($live in /tmp/rtshimd-conformance.*): they would share $BRIDGE"
W=$(mktemp -d /tmp/rtshimd-conformance.XXXXXX)
chmod 0711 "$W"
claim_run
mkdir -p "$OUT" "$W/bin" "$W/registry" "$W/state" "$W/run" "$W/cni/net.d" "$W/cni/ipam" "$W/cni/cache"
rm -f "$OUT"/*.json "$OUT"/*.log "$OUT"/*.txt
SOCK=$W/rtshimd.sock
REG_PID="" REG="" DAEMON_PID="" EVENTS_PID="" HOLD_PID="" LEAKS=0

# --- cleanup (trap) ------------------------------------------------------------------------
cleanup() {
	local rc=$? pids ids m
	trap - EXIT INT TERM
	set +e
	log "cleaning up"
	[ -n "$HOLD_PID" ] && kill "$HOLD_PID" 2>/dev/null
	if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		log "cleanup: removing pods"
		crictl_ rmp -fa >/dev/null 2>"$W/rmp.err" || { log "crictl rmp -fa failed:"; cat "$W/rmp.err" >&2; }
		crictl_ rm -fa >/dev/null 2>&1
		left=$(crictl_ pods -q 2>/dev/null; crictl_ ps -aq 2>/dev/null)
		[ -z "$left" ] || leak "pods/containers still listed after rmp -fa: $left"
		log "cleanup: stopping the daemon"
		# Our events stream has recorded every ID the leak check needs; end it first.
		[ -n "$EVENTS_PID" ] && { kill "$EVENTS_PID" 2>/dev/null; wait "$EVENTS_PID" 2>/dev/null; EVENTS_PID=""; }
		kill -TERM "$DAEMON_PID"
		for _ in $(seq 1 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$DAEMON_PID" 2>/dev/null && { leak "daemon ignored SIGTERM for 10s"; kill -KILL "$DAEMON_PID"; }
		wait "$DAEMON_PID" 2>/dev/null
	fi
	[ -n "$EVENTS_PID" ] && { kill "$EVENTS_PID" 2>/dev/null; wait "$EVENTS_PID" 2>/dev/null; }
	if [ -n "$REG_PID" ]; then kill "$REG_PID" 2>/dev/null; wait "$REG_PID" 2>/dev/null; fi
	[ -f "$W/daemon.log" ] && cp "$W/daemon.log" "$OUT/daemon.log"
	[ -f "$W/events.json" ] && cp "$W/events.json" "$OUT/events.json"

	# Whatever the daemon left behind: processes (monitors, runtimes, sandboxes, container
	# processes run from our rootfs or bundles), runtime state, mounts, cgroups, network.
	log "cleanup: checking for leaks"
	kill_run_pids
	for h in runc runsc runsc-debian crun; do
		[ -d "$W/run/$h" ] || continue
		bin=/usr/sbin/runc
		[ $h = crun ] && bin=/usr/bin/crun
		[ $h = runsc ] && bin=/usr/local/bin/runsc
		[ $h = runsc-debian ] && bin="/usr/bin/runsc --network=host"
		ids=$($bin --root "$W/run/$h" list -q 2>/dev/null)
		if [ -n "$ids" ]; then
			leak "$h still knows containers: $(echo $ids)"
			for id in $ids; do $bin --root "$W/run/$h" delete -force "$id" >/dev/null 2>&1; done
		fi
	done
	# The runc shim keeps runc's state under containerd's root, by namespace.
	ids=$(runc --root /run/containerd/runc/rtshimd list 2>/dev/null | awk -v w="$W" 'index($4, w) == 1 {print $1}')
	if [ -n "$ids" ]; then
		leak "runc-shim's runc still knows containers: $(echo $ids)"
		for id in $ids; do runc --root /run/containerd/runc/rtshimd delete -force "$id" >/dev/null 2>&1; done
	fi
	m=$(umount_under "$W" -v)
	[ "$m" = 0 ] || leak "$m mount(s) were left under $W"
	ids=""
	[ -f "$W/events.json" ] && ids=$(grep -oE '"(containerId|id)": *"[0-9a-f]{64}"' "$W/events.json" | grep -oE '[0-9a-f]{64}' | sort -u)
	if [ -n "$ids" ]; then
		m=$(find /sys/fs/cgroup -mindepth 2 -type d 2>/dev/null | grep -F "$(echo "$ids")" | sort -r)
		if [ -n "$m" ]; then
			leak "cgroups left: $(echo "$m" | wc -l) (first: $(echo "$m" | tail -1))"
			for c in $m; do rmdir "$c" 2>/dev/null; done
		fi
	fi
	finish_run "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. critest, crictl, ginkgo, the stand-ins, the image builder, the checker --------------
if [ -n "$PREBUILT" ]; then
	cp "$PREBUILT"/* "$W/bin/"
else
	log "building the stand-ins, the image builder and the checker"
	build_helpers "$W/bin"
fi
CRITEST=$W/bin/critest
CRICTL=$W/bin/crictl
export PATH=$W/bin:$PATH
cat >"$W/crictl.yaml" <<EOF
runtime-endpoint: unix://$SOCK
image-endpoint: unix://$SOCK
timeout: 60
EOF
crictl_() { "$CRICTL" --config "$W/crictl.yaml" "$@"; }

# --- 2. images ------------------------------------------------------------------------------
BUSYBOX=$(hack/tools.sh busybox)/busybox
cp bin/rtshim-pause "$W/bin/pause"

start_registry "$W/registry"
"$W/bin/conformance-images" -registry "$REG" -busybox "$BUSYBOX" -bin "$W/bin" -out "$OUT/images.txt"

# --- 3. the daemon --------------------------------------------------------------------------
cat >"$W/cni/net.d/10-conformance.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$NET_NAME",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$W/cni/ipam", "ranges": [[{"subnet": "$SUBNET"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
: >"$W/registries.conf"
{
	cat <<EOF
socket = "$SOCK"
state_root = "$W/state"
run_root = "$W/run"
log_level = "info"
default_handler = "runc"

[handlers.runc]
runtime_path = "/usr/sbin/runc"

[handlers.runsc]
runtime_path = "/usr/local/bin/runsc"
runtime_args = ["--oci-seccomp", "--allow-suid"]
runtime_type = "oci-sandbox"

[handlers.runsc-debian]
runtime_path = "/usr/bin/runsc"
runtime_type = "oci-sandbox"

[handlers.crun]
runtime_path = "/usr/bin/crun"

[handlers.runc-shim]
runtime_type = "shim-v2"
runtime_path = "/usr/bin/containerd-shim-runc-v2"
[handlers.runc-shim.features]
host_pid = true
host_ipc = true
recursive_read_only_mounts = true
user_namespaces = true

# critest's NRI sync specs hold a late plugin's Synchronize open for 2 s, which is the
# default request timeout (rtshimd's, containerd's and CRI-O's): at 2 s the plugin is
# dropped, its stub never hears of later containers and critest skips the spec as "lost".
[nri]
plugin_request_timeout = "10s"
socket_path = "$W/nri.sock"
plugin_path = "$W/nri-plugins"
plugin_config_path = "$W/nri-conf"

[network]
cni_conf_dir = "$W/cni/net.d"
cni_bin_dirs = ["/usr/lib/cni"]
cni_cache_dir = "$W/cni/cache"

[image]
registries_conf = "$W/registries.conf"
EOF
	for r in registry.k8s.io k8s.gcr.io gcr.io public.ecr.aws; do
		printf '[[image.registries]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n' "$r" "$REG"
	done
	# docker.io/library/busybox -> <registry>/docker/library/busybox, where the
	# public.ecr.aws/docker/library images are.
	printf '[[image.registries]]\nprefix = "docker.io"\nlocation = "%s/docker"\ninsecure = true\n' "$REG"
} >"$W/config.toml"
bin/rtshimd config check --config "$W/config.toml" >/dev/null || die "config check failed ($W/config.toml)"

bin/rtshimd --config "$W/config.toml" >"$W/daemon.log" 2>&1 &
DAEMON_PID=$!
cond() { crictl_ info 2>/dev/null | jq -r ".status.conditions[] | select(.type == \"$1\") | .status"; }
for _ in $(seq 1 300); do
	[ -S "$SOCK" ] && [ "$(cond RuntimeReady)" = true ] && [ "$(cond NetworkReady)" = true ] && break
	kill -0 $DAEMON_PID 2>/dev/null || { tail -20 "$W/daemon.log" >&2; die "daemon exited"; }
	sleep 0.1
done
[ "$(cond NetworkReady)" = true ] || die "daemon not ready: $(crictl_ info 2>&1 | jq -c .status)"
crictl_ info >"$OUT/info.json"
for h in $HANDLERS; do
	jq -e ".runtimeHandlers[] | select(.name == \"$h\")" "$OUT/info.json" >/dev/null ||
		die "handler $h not ready: $(bin/rtshimd handlers --config "$W/config.toml" 2>&1 | grep "^$h")"
done
# Every sandbox and container ID of the run, for the cgroup check at cleanup.
"$CRICTL" --config "$W/crictl.yaml" events -o json >"$W/events.json" 2>/dev/null &
EVENTS_PID=$!
log "daemon up (pid $DAEMON_PID, socket $SOCK)"
if [ -n "${CONFORMANCE_HOLD:-}" ]; then
	log "holding for debugging: $CRICTL --config $W/crictl.yaml ...; kill -TERM $$ cleans up"
	sleep infinity &
	HOLD_PID=$!
	wait $HOLD_PID || true
fi

# --- 4. critest per handler -----------------------------------------------------------------
status=0
for h in $HANDLERS; do
	skip=$("$W/bin/conformance-check" -skip-regex -handler "$h" -dir "$EXPECTED")
	args=(-config "$W/crictl.yaml" -runtime-endpoint "unix://$SOCK" -image-endpoint "unix://$SOCK"
		-ginkgo.no-color -ginkgo.json-report "$OUT/$h.json" -ginkgo.timeout 40m
		-ginkgo.poll-progress-after 120s -ginkgo.poll-progress-interval 60s)
	[ "$h" = runc ] || args+=(-runtime-handler "$h")
	# critest's NRI specs (v1.37, [Serial]: they run after the rest) plug into the daemon's
	# NRI socket and check its hooks' order, failures and cleanup.
	args+=(-nri-socket "$W/nri.sock")
	[ -n "$skip" ] && args+=(-ginkgo.skip "$skip")
	# A subset: its full spec texts, quoted into one regular expression.
	[ -n "$SUBSET" ] && [ -z "$FOCUS" ] && args+=(-ginkgo.focus "$(grep -v -e '^#' -e '^$' "$SUBSET" | sed 's/[][\\.*^$()+?{}|]/\\&/g' | paste -sd'|')")
	[ -n "$FOCUS" ] && args+=(-ginkgo.focus "$FOCUS")
	[ "$PARALLEL" -gt 1 ] && args+=(-parallel "$PARALLEL")
	log "critest on $h (log: $OUT/$h.log)"
	t=$(date +%s)
	crc=0
	(cd "$W" && "$CRITEST" "${args[@]}") >"$OUT/$h.log" 2>&1 || crc=$?
	log "critest on $h: exit $crc in $(($(date +%s) - t))s"
	[ -s "$OUT/$h.json" ] || { tail -30 "$OUT/$h.log" >&2; die "critest wrote no report for $h"; }
	cargs=(-handler "$h" -dir "$EXPECTED" -report "$OUT/$h.json" -results "$OUT/$h-results.txt" -exit-code "$crc")
	[ -n "${CONFORMANCE_VERBOSE:-}" ] && cargs+=(-v)
	[ -n "$FOCUS$SUBSET" ] && cargs+=(-partial)
	[ -n "$SUBSET" ] && [ -z "$FOCUS" ] && cargs+=(-selected "$SUBSET")
	[ -n "$UPDATE" ] && cargs+=(-update)
	"$W/bin/conformance-check" "${cargs[@]}" | tee "$OUT/$h-check.txt" || status=1
	# Nothing of one handler's run may leak into the next.
	crictl_ rmp -fa >/dev/null 2>&1 || true
done
[ $status = 0 ] || die "conformance check failed (reports in $OUT)"
log "conformance check passed (reports in $OUT)"
