#!/usr/bin/env bash
# Runs inside the cgroup-v2 node (hack/v2-node/run.sh boots it; TestV2Node runs both), in
# the repository, as root. What the node checks, each part's output in $V2_NODE_OUT:
#   1. TestInV2Node: the integration test binary $V2_NODE_OUT/integration.test (built
#      outside: the node has no Go toolchain), with make build's binaries from bin/:
#      rtshimd by make install and its unit, the systemd driver, runc, crun and the runc
#      shim on cgroup v2 (inside-test.log)
#   2. critest on runc, crun and the runc shim (hack/conformance/run.sh with the helpers
#      built outside in $V2_NODE_OUT/conformance-bin), checked against
#      conformance/expected-v2/ (conformance.log, reports in conformance/);
#      V2_NODE_CRITEST_HANDLERS=... picks others, "none" skips it;
#      V2_NODE_CRITEST_SUBSET=1 runs only conformance/expected-v2/subset.txt
#   3. the unit tests that need cgroup v2: each test binary in $V2_NODE_OUT/unit/ (built
#      outside by go test -c; unit-tests.log)
# Exits non-zero when any part failed.
set -uo pipefail
out=${V2_NODE_OUT:?run by hack/v2-node/run.sh}
rc=0
echo "v2-node: $(uname -r), cgroup controllers: $(cat /sys/fs/cgroup/cgroup.controllers), $(systemctl is-system-running)"
systemctl --failed --no-legend --no-pager
# kubelet's cAdvisor wants a clock speed ("could not detect clock speed"). QEMU's CPUs
# name one; a kernel whose /proc/cpuinfo does not (UML's did not) gets, lxcfs-style, a copy
# with one bound over it for this boot.
if ! grep -q '^cpu MHz' /proc/cpuinfo; then
	{ sed '/^$/d' /proc/cpuinfo; printf 'cpu MHz\t\t: 1000.000\n\n'; } >/run/cpuinfo
	mount --bind /run/cpuinfo /proc/cpuinfo
fi

if [ "${V2_NODE_SKIP_TEST:-}" != 1 ]; then
echo "v2-node: TestInV2Node"
RTSHIMD_IN_V2_NODE=1 RTSHIMD_V2_HANDLERS=${RTSHIMD_V2_HANDLERS:-} RTSHIMD_TEST_BIN=$PWD/bin "$out/integration.test" \
	-test.run '^TestInV2Node$' -test.v -test.count=1 -test.timeout=30m >"$out/inside-test.log" 2>&1 || rc=1
grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/inside-test.log"
fi

handlers=${V2_NODE_CRITEST_HANDLERS:-runc crun runc-shim}
if [ "$handlers" != none ]; then
	echo "v2-node: critest on $handlers"
	subset=""
	[ "${V2_NODE_CRITEST_SUBSET:-}" = 1 ] && subset=conformance/expected-v2/subset.txt
	CONFORMANCE_PREBUILT=$out/conformance-bin CONFORMANCE_EXPECTED=conformance/expected-v2 \
		CONFORMANCE_OUT=$out/conformance CONFORMANCE_HANDLERS=$handlers CONFORMANCE_SUBSET=$subset \
		hack/conformance/run.sh >"$out/conformance.log" 2>&1 || rc=1
	grep -E '^\[conformance\]|^(PASS|FAIL|ok|newly|unexpected)' "$out/conformance.log" | tail -n 30
fi

echo "v2-node: unit tests on cgroup v2"
for bin in "$out"/unit/*.test; do
	[ -x "$bin" ] || continue
	echo "== $(basename "$bin")"
	"$bin" -test.v -test.count=1 -test.timeout=10m || rc=1
done >"$out/unit-tests.log" 2>&1
grep -E '^(==|--- (PASS|FAIL|SKIP)|ok|FAIL|PASS)' "$out/unit-tests.log"
exit "$rc"
