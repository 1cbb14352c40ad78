#!/usr/bin/env bash
# make node-e2e: Kubernetes' node conformance suite (k8s.io/kubernetes/test/e2e_node, focus
# [NodeConformance], skip [Flaky]|[Slow]|[Serial]) against the built daemon, offline, in
# passes, each checked against its list in conformance/node-e2e/ (README there).
#
#   hack/node-e2e/run.sh                  every pass: runc, runsc, runc-stats
#   NODE_E2E_PASSES="runc" ...            some passes
#   NODE_E2E_SUBSET=1 ...                 the part the test command runs (docs/testing.md: which)
#   NODE_E2E_FOCUS='regex' ...            only specs matching (debugging; the check then
#                                         ignores listed specs that did not run)
#   NODE_E2E_UPDATE=1 ...                 rewrite conformance/node-e2e/<pass>.txt with this
#                                         run's passes
#   NODE_E2E_PARALLEL=N ...               ginkgo processes (default 6)
#   NODE_E2E_HOLD=1 ...                   registry + daemon up, then wait (debugging)
#
# A pass names the handler `test-handler` (the RuntimeClass handler the suite's
# RuntimeClass specs use) and the daemon's default handler point at:
#   runc         runc (the default handler of a node)
#   runsc        the pinned current gVisor: every pod runs on it
#   runc-stats   runc, with kubelet's PodAndContainerStatsFromCRI feature gate on (the pass
#                containerd's CI runs): kubelet takes every stat from the CRI, not cAdvisor
#
# What it does, all of it undone on exit whatever happens (trap):
#   1. kubelet, e2e_node.test, the ginkgo CLI and agnhost at the pinned Kubernetes version
#      (hack/tools.sh)
#   2. the images the suite pulls, built by hack/conformance/images -set node-e2e (agnhost
#      is the real binary, with Debian's curl, nc and bash; busybox, nginx, nonewprivs, nonroot, pause are stand-ins), pushed
#      to Debian's docker-registry on 127.0.0.1:<free port>
#   3. per pass: bin/rtshimd with a config of its own in a temp dir (registries mapped onto
#      the local one, a CNI bridge of its own), then e2e_node.test (kubelet is the one beside it), which runs etcd, the API
#      server and a namespace controller in its own process and starts kubelet beside it:
#      cgroupfs driver, cgroup root /, kubelet's --kubelet-cgroups, --system-cgroups and
#      --runtime-cgroups blank (so it moves no other process of the machine), and no
#      systemd-run on its PATH (systemd is installed here but is not PID 1: the suite would
#      start kubelet as a transient unit)
#   4. the ginkgo JSON report checked by hack/conformance/check against the pass's list
#   5. cleanup: pods removed, kubelet and daemon stopped, then what kubelet made (mounts,
#      /var/lib/kubelet, /var/log/pods, /var/log/containers, the kubepods cgroups, its
#      iptables chains) removed and everything of the run checked for leaks, which fail it
#
# Reports and logs are kept in $NODE_E2E_OUT (default /tmp/rtshimd-node-e2e).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${NODE_E2E_OUT:-/tmp/rtshimd-node-e2e}
PASSES=${NODE_E2E_PASSES:-runc runsc runc-stats}
PARALLEL=${NODE_E2E_PARALLEL:-6}
FOCUS=${NODE_E2E_FOCUS:-}
UPDATE=${NODE_E2E_UPDATE:-}
SUBSET=${NODE_E2E_SUBSET:-}
TOOLS=${RTSHIMD_TOOLS:-/var/cache/rtshimd-tools}
EXPECTED=conformance/node-e2e
NET_NAME=rtshimd-node-e2e
BRIDGE=rtshimne0
SUBNET=10.232.0.0/24
SUBNET_RE='10\.232\.0\.'
NODE_NAME=rtshimd-node-e2e
export GOFLAGS="-buildvcs=false -tags=containers_image_openpgp,exclude_graphdriver_btrfs"

T0=$(date +%s)
LOG_TAG=node-e2e
. hack/lib/harness.sh

[ "$(id -u)" = 0 ] || die "needs root (namespaces, mounts, cgroups, CNI, kubelet)"
[ -x bin/rtshimd ] && [ -x bin/rtshim-monitor ] && [ -x bin/rtshim-pause ] || die "run make build first (make node-e2e does)"
for p in $PASSES; do
	case $p in runc | runsc | runc-stats) ;; *) die "unknown pass $p (runc, runsc, runc-stats)" ;; esac
done
# kubelet's paths are fixed: two runs at once would share them. What a run killed before its
# cleanup left there (and in /tmp) is removed; a live kubelet or run is refused.
pgrep -x kubelet >/dev/null && die "a kubelet runs here (pid $(pgrep -x kubelet | head -1)): kubelet's paths are fixed, stop it first"
live=$(reclaim_dead_runs rtshimd-node-e2e)
[ "$live" = 0 ] || die "another node-e2e run is under way here ($live in /tmp/rtshimd-node-e2e.*)"
if [ -n "$(find /var/lib/kubelet/pods /var/log/pods -mindepth 1 -maxdepth 1 2>/dev/null | head -1)" ]; then
	log "removing a dead kubelet's pods: $(umount_under /var/lib/kubelet) mount(s), $(ls -A /var/lib/kubelet/pods 2>/dev/null | wc -l) pod dir(s)"
	rm -rf /var/lib/kubelet/pods/* /var/log/pods/* /var/log/containers/*
fi
for c in $(find /sys/fs/cgroup -mindepth 2 -maxdepth 6 -type d -path '*/kubepods*' 2>/dev/null | sort -r); do
	[ -s "$c/cgroup.procs" ] && xargs -r kill -KILL <"$c/cgroup.procs" 2>/dev/null
	rmdir "$c" 2>/dev/null || true
done

# --- 0. Debian packages and tools ----------------------------------------------------------
hack/tools.sh install-runsc >/dev/null || die "building the pinned runsc failed"
apt_need docker-registry runc containernetworking-plugins iptables iproute2 jq curl netcat-openbsd
TOOLBIN=$(hack/tools.sh kubelet e2e-node ginkgo agnhost crictl busybox)

W=$(mktemp -d /tmp/rtshimd-node-e2e.XXXXXX)
chmod 0711 "$W"
claim_run
mkdir -p "$OUT" "$W/bin" "$W/path" "$W/state" "$W/run" "$W/cni/net.d" "$W/cni/ipam" "$W/cni/cache"
rm -rf "$OUT"/*.json "$OUT"/*.log "$OUT"/*.txt "$OUT"/reports
SOCK=$W/rtshimd.sock
REG_PID="" REG="" DAEMON_PID="" SUITE_PID="" EVENTS_PID="" LEAKS=0
# What kubelet makes outside $W that was not there before the run; removed at the end.
KUBELET_DIRS=""
for d in /var/lib/kubelet /var/log/pods /var/log/containers; do [ -e "$d" ] || KUBELET_DIRS="$KUBELET_DIRS $d"; done
CGROUP_DIRS=""
for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
	[ -f "$h/cgroup.procs" ] || continue
	[ -e "$h/kubepods" ] || CGROUP_DIRS="$CGROUP_DIRS ${h%/}/kubepods"
done
IPT_BEFORE=$(for t in filter nat mangle; do iptables-save -t $t 2>/dev/null | { grep -E '^:KUBE-' || true; } | sed "s/^:\([^ ]*\).*/$t \1/"; done)

cat >"$W/crictl.yaml" <<EOF
runtime-endpoint: unix://$SOCK
image-endpoint: unix://$SOCK
timeout: 60
EOF
crictl_() { "$TOOLBIN/crictl" --config "$W/crictl.yaml" "$@"; }

# --- cleanup (trap) ------------------------------------------------------------------------
stop_daemon() {
	[ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null || { DAEMON_PID=""; return 0; }
	crictl_ rmp -fa >/dev/null 2>"$W/rmp.err" || { log "crictl rmp -fa failed:"; cat "$W/rmp.err" >&2; }
	left=$(crictl_ pods -q 2>/dev/null; crictl_ ps -aq 2>/dev/null)
	[ -z "$left" ] || leak "pods/containers still listed after rmp -fa: $left"
	[ -n "$EVENTS_PID" ] && { kill "$EVENTS_PID" 2>/dev/null; wait "$EVENTS_PID" 2>/dev/null || true; EVENTS_PID=""; }
	kill -TERM "$DAEMON_PID"
	for _ in $(seq 1 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$DAEMON_PID" 2>/dev/null && { leak "daemon ignored SIGTERM for 10s"; kill -KILL "$DAEMON_PID"; }
	wait "$DAEMON_PID" 2>/dev/null || true # its status is not the run's
	DAEMON_PID=""
	return 0
}

# stop_suite: the suite's process group (e2e_node.test, the services, kubelet).
stop_suite() {
	[ -n "$SUITE_PID" ] || return 0
	kill -TERM -- "-$SUITE_PID" 2>/dev/null
	for _ in $(seq 1 150); do kill -0 "$SUITE_PID" 2>/dev/null || break; sleep 0.2; done
	kill -KILL -- "-$SUITE_PID" 2>/dev/null
	wait "$SUITE_PID" 2>/dev/null
	SUITE_PID=""
}

# kubelet_leftovers: what kubelet made for the pass's pods, removed once kubelet is stopped
# (a pass's leftovers would fail the next one). Pod directories, volume mounts and pod log
# directories are kubelet's to remove (its housekeeping and container GC, which a stopped
# suite cuts short), so they are only counted; a kubepods cgroup that still holds a process
# is the runtime's leak.
kubelet_leftovers() {
	local n c d
	pkill -KILL -x kubelet 2>/dev/null && leak "a kubelet outlived its suite"
	n=$(umount_under /var/lib/kubelet)
	d=$(ls -A /var/lib/kubelet/pods 2>/dev/null | wc -l || true)
	c=$(ls -A /var/log/pods 2>/dev/null | wc -l || true)
	log "kubelet's leftovers: $n mount(s) under /var/lib/kubelet, $d pod dir(s), $c pod log dir(s); removed"
	rm -rf /var/lib/kubelet/pods/* /var/log/pods/* /var/log/containers/* 2>/dev/null || true
	for c in $(find /sys/fs/cgroup -mindepth 2 -maxdepth 6 -type d -path '*/kubepods*' 2>/dev/null | sort -r); do
		if [ -s "$c/cgroup.procs" ]; then leak "cgroup $c still has processes: $(head -3 "$c/cgroup.procs" | tr '\n' ' ')"; fi
		rmdir "$c" 2>/dev/null || true # a parent of one still in use
	done
	return 0
}

cleanup() {
	local rc=$? ids m t c
	trap - EXIT INT TERM
	set +e
	log "cleaning up"
	stop_suite
	stop_daemon
	[ -n "$REG_PID" ] && { kill "$REG_PID" 2>/dev/null; wait "$REG_PID" 2>/dev/null; }
	kubelet_leftovers
	kill_run_pids
	for h in runc runsc; do
		[ -d "$W/run/$h" ] || continue
		bin=/usr/sbin/runc
		[ $h = runsc ] && bin=/usr/local/bin/runsc
		ids=$($bin --root "$W/run/$h" list -q 2>/dev/null)
		if [ -n "$ids" ]; then
			leak "$h still knows containers: $(echo $ids)"
			for id in $ids; do $bin --root "$W/run/$h" delete -force "$id" >/dev/null 2>&1; done
		fi
	done
	m=$(umount_under "$W" -v)
	[ "$m" = 0 ] || leak "$m mount(s) were left under $W"
	# kubelet's directories and cgroups that were not there before the run.
	for d in $KUBELET_DIRS; do
		umount_under "$d" >/dev/null
		rm -rf "$d"
	done
	for c in $CGROUP_DIRS; do
		[ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
		[ -d "$c" ] && leak "cgroup $c could not be removed"
	done
	# kubelet's iptables chains (KUBE-KUBELET-CANARY, KUBE-FIREWALL, ...) that were not there.
	for t in filter nat mangle; do
		for c in $(iptables-save -t $t 2>/dev/null | grep -E '^:KUBE-' | sed 's/^:\([^ ]*\).*/\1/'); do
			grep -qx "$t $c" <<<"$IPT_BEFORE" && continue
			iptables-save -t $t | grep -E -- "-j $c( |\$)" | sed 's/^-A/-D/' | while read -r r; do eval "iptables -t $t $r"; done
			iptables -t $t -F "$c" 2>/dev/null
			iptables -t $t -X "$c" 2>/dev/null
		done
	done
	finish_run "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. PATH without systemd-run ------------------------------------------------------------
# e2e_node starts kubelet with systemd-run when it finds it on PATH; here PID 1 is not
# systemd. A PATH of links to everything else.
for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
	for f in "$d"/*; do
		b=${f##*/}
		case $b in systemd-run | systemctl) continue ;; esac
		[ -e "$W/path/$b" ] || ln -s "$f" "$W/path/$b"
	done
done
ln -sfn "$TOOLBIN/ginkgo" "$W/bin/ginkgo"
# ginkgo runs a compiled suite in the suite's directory and, without --output-dir, writes
# each process's report below it (it left a tmp/ tree in the tools cache): the suite runs
# from here, its reports go to $OUT.
ln -sfn "$TOOLBIN/e2e_node.test" "$W/bin/e2e_node.test"
# The suite starts the kubelet it finds beside itself (test/e2e_node/builder: the directory
# of its argv[0]).
ln -sfn "$TOOLBIN/kubelet" "$W/bin/kubelet"

# --- 2. images ------------------------------------------------------------------------------
log "building the stand-ins and the image builder"
for s in nginx labutils nnp; do
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$W/bin/$s" "./hack/conformance/standins/$s"
done
cp bin/rtshim-pause "$W/bin/pause"
cp "$TOOLBIN/agnhost" "$W/bin/agnhost"
# agnhost's TLS pair (its image has them at /localhost.crt and /localhost.key), from the
# k8s.io/kubernetes module the tools were built from.
ksrc=$(cd "$TOOLS/src/kubernetes-$(readlink "$TOOLBIN/e2e_node.test" | sed 's/^e2e_node.test-//')" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
cp "$ksrc/test/images/agnhost/porter/localhost.crt" "$ksrc/test/images/agnhost/porter/localhost.key" "$W/bin/"
go build -o "$W/bin/conformance-images" ./hack/conformance/images
go build -o "$W/bin/conformance-check" ./hack/conformance/check
start_registry "$W/registry"
"$W/bin/conformance-images" -set node-e2e -registry "$REG" -busybox "$TOOLBIN/busybox" -bin "$W/bin" -out "$OUT/images.txt"

# --- 3. the daemon and the suite, per pass ----------------------------------------------------
cat >"$W/cni/net.d/10-node-e2e.conflist" <<EOF
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

# daemon_config HANDLER: the daemon's config, default_handler and test-handler = HANDLER.
daemon_config() {
	local h=$1 path args="" type=oci
	case $h in
	runc) path=/usr/sbin/runc ;;
	# The shipped config's overhead: gVisor's sandbox (the Sentry, its ~30 MiB of runsc pages)
	# lives in the pod cgroup, so a pod whose limits leave it no room (the lifecycle specs'
	# 35Mi) is OOM-killed as a whole at its first exec without it.
	runsc) path=/usr/local/bin/runsc args='runtime_args = ["--oci-seccomp", "--allow-suid"]
overhead = { memory = "64Mi", cpu = "100m" }' type=oci-sandbox ;;
	esac
	cat <<EOF
socket = "$SOCK"
state_root = "$W/state"
run_root = "$W/run"
log_level = "info"
default_handler = "$h"

[handlers.$h]
runtime_type = "$type"
runtime_path = "$path"
runtime_root = "$W/run/$h"
$args

[handlers.test-handler]
runtime_type = "$type"
runtime_path = "$path"
runtime_root = "$W/run/$h"
$args

[nri]
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
	for r in registry.k8s.io k8s.gcr.io gcr.io docker.io quay.io; do
		printf '[[image.registries]]\nprefix = "%s"\nlocation = "%s/%s"\ninsecure = true\n' "$r" "$REG" "$r"
	done
}

start_daemon() {
	daemon_config "$1" >"$W/config.toml"
	: >"$W/registries.conf"
	bin/rtshimd config check --config "$W/config.toml" >/dev/null || die "config check failed ($W/config.toml)"
	bin/rtshimd --config "$W/config.toml" >>"$OUT/daemon-$2.log" 2>&1 &
	DAEMON_PID=$!
	echo "$DAEMON_PID" >"$W/rtshimd.pid"
	local cond
	for _ in $(seq 1 300); do
		cond=$(crictl_ info 2>/dev/null | jq -r '[.status.conditions[] | select(.status == true)] | length' 2>/dev/null || true)
		[ "$cond" = 2 ] && break
		kill -0 $DAEMON_PID 2>/dev/null || { tail -20 "$OUT/daemon-$2.log" >&2; die "daemon exited"; }
		sleep 0.1
	done
	[ "$cond" = 2 ] || die "daemon not ready: $(crictl_ info 2>&1 | jq -c .status)"
	crictl_ info | jq -e '.runtimeHandlers[] | select(.name == "test-handler")' >/dev/null ||
		die "test-handler not ready: $(bin/rtshimd handlers --config "$W/config.toml" 2>&1)"
	"$TOOLBIN/crictl" --config "$W/crictl.yaml" events -o json >"$W/events-$2.json" 2>/dev/null &
	EVENTS_PID=$!
	log "daemon up for $2 (handler $1, pid $DAEMON_PID)"
}

# The base kubelet configuration e2e_node.test starts from (it sets its own auth, ports,
# static pod path and, blanked below by flags, kubelet's own cgroups).
cat >"$W/kubelet-base.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /
failCgroupV1: false
failSwapOn: false
podCIDR: $SUBNET
volumeStatsAggPeriod: 10s
serializeImagePulls: false
fileCheckFrequency: 10s
evictionPressureTransitionPeriod: 30s
evictionHard: {memory.available: "250Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
evictionMinimumReclaim: {}
resolvConf: /etc/resolv.conf
EOF

status=0
for pass in $PASSES; do
	handler=${pass%-stats}
	start_daemon "$handler" "$pass"
	if [ -n "${NODE_E2E_HOLD:-}" ]; then
		log "holding: $TOOLBIN/crictl --config $W/crictl.yaml ...; kill -TERM $$ cleans up"
		sleep infinity
	fi
	skip='\[Flaky\]|\[Slow\]|\[Serial\]'
	extra=$("$W/bin/conformance-check" -skip-regex -handler "$pass" -dir "$EXPECTED")
	[ -n "$extra" ] && skip="$skip|$extra"
	focus='\[NodeConformance\]'
	# The subset: full spec texts, quoted into one regular expression.
	[ -n "$SUBSET" ] && focus=$(grep -v -e '^#' -e '^$' "$EXPECTED/subset.txt" | sed 's/[][\\.*^$()+?{}|]/\\&/g' | paste -sd'|')
	[ -n "$FOCUS" ] && focus=$FOCUS
	gates=""
	[ "$pass" = runc-stats ] && gates="--feature-gates=PodAndContainerStatsFromCRI=true"
	mkdir -p "$W/suite-$pass" "$OUT/reports/$pass"
	log "e2e_node on $pass ($PARALLEL processes; log: $OUT/$pass.log)"
	t=$(date +%s)
	# Its own process group, so that cleanup ends kubelet and the services with it.
	(
		cd "$W/suite-$pass"
		exec setsid env PATH="$W/bin:$W/path" "$W/bin/ginkgo" --procs="$PARALLEL" --no-color \
			--focus="$focus" --skip="$skip" --timeout=2h --poll-progress-after=300s \
			--output-dir="$OUT" --json-report="$pass.json" \
			"$W/bin/e2e_node.test" -- \
			--container-runtime-endpoint="unix://$SOCK" \
			--container-runtime-process-name=rtshimd --container-runtime-pid-file="$W/rtshimd.pid" \
			--prepull-images=false --node-name="$NODE_NAME" --report-dir="$OUT/reports/$pass" \
			--kubelet-config-file="$W/kubelet-base.yaml" $gates \
			--kubelet-flags="--runtime-cgroups= --kubelet-cgroups= --system-cgroups= --cert-dir=$W/suite-$pass/pki"
	) >"$OUT/$pass.log" 2>&1 &
	SUITE_PID=$!
	src=0
	wait "$SUITE_PID" || src=$?
	SUITE_PID=""
	log "e2e_node on $pass: exit $src in $(($(date +%s) - t))s"
	[ -s "$OUT/$pass.json" ] || { tail -40 "$OUT/$pass.log" >&2; die "e2e_node wrote no report for $pass"; }
	cargs=(-suite node-e2e -handler "$pass" -dir "$EXPECTED" -report "$OUT/$pass.json" -results "$OUT/$pass-results.txt" -exit-code "$src")
	[ -n "$FOCUS$SUBSET" ] && cargs+=(-partial)
	# The subset's specs must all have run (a renamed spec, a dead ginkgo process).
	[ -n "$SUBSET" ] && [ -z "$FOCUS" ] && cargs+=(-selected "$EXPECTED/subset.txt")
	[ -n "$UPDATE" ] && cargs+=(-update)
	"$W/bin/conformance-check" "${cargs[@]}" | tee "$OUT/$pass-check.txt" || status=1
	stop_daemon
	kubelet_leftovers
done
[ $status = 0 ] || die "node conformance check failed (reports in $OUT)"
log "node conformance check passed (reports in $OUT)"
