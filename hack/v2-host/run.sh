#!/usr/bin/env bash
# Runs on a lent cgroup-v2 machine (the device tool: Ubuntu 24.04, kernel 6.18, pure cgroup
# v2, root with every capability, no network), in a copy of the repository, with
# bin/v2-host-pack.tar.xz carried (hack/v2-host/pack.sh). What this host cannot run:
# gVisor's shim v2 (it needs CAP_SYS_RESOURCE) and everything on the unified hierarchy.
# Installs the pack's binaries where the suite's handler table looks for them, then runs
# the integration tests named by V2_HOST_TESTS (a -test.run pattern); the log goes to
# $OUT/test.log.
set -uo pipefail
OUT=${OUT:-/tmp/v2-host}
mkdir -p "$OUT"
P=/opt/rtshimd-v2-host
rm -rf "$P" && mkdir -p "$P" && tar xJf bin/v2-host-pack.tar.xz -C "$P" || exit 1
echo "host: $(uname -r); $(. /etc/os-release && echo "$PRETTY_NAME"); pid 1: $(cat /proc/1/comm);" \
	"$(stat -fc %T /sys/fs/cgroup): $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
echo "root's bounding set: $(awk '/CapBnd/ {print $2}' /proc/self/status); AppArmor: $(cat /sys/module/apparmor/parameters/enabled 2>/dev/null || echo absent)"
cp "$P/rtshimd" "$P/rtshim-monitor" "$P/rtshim-pause" bin/
install -m 0755 "$P/runc" /usr/sbin/runc
install -m 0755 "$P/containerd-shim-runc-v2" "$P/docker-registry" /usr/bin/
install -m 0755 "$P/runsc" "$P/containerd-shim-runsc-v1" /usr/local/bin/
install -m 0755 "$P/busybox" /bin/busybox # the test image's: static
ldconfig -p | grep -q 'libseccomp.so.2 ' || { cp "$P/libseccomp.so.2" /usr/lib/x86_64-linux-gnu/ && ldconfig; }
RTSHIMD_TEST_BIN=$PWD/bin timeout "${V2_HOST_TIMEOUT:-330}" "$P/integration.test" -test.run "${V2_HOST_TESTS:-^TestShimV2Pods$}" \
	-test.v -test.count=1 >"$OUT/test.log" 2>&1
rc=$?
grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)$|^panic|cannot run on this host' "$OUT/test.log" | head -60
echo "exit $rc"
exit $rc
