#!/usr/bin/env bash
# Packs what hack/v2-host/run.sh needs on a lent cgroup-v2 machine that has no Go, no
# network and none of Debian's runtimes: the integration test binary (no failpoints, run
# with RTSHIMD_TEST_BIN), the daemon, monitor and pause, Debian's runc (and libseccomp),
# containerd's runc shim, docker-registry and static busybox, and the pinned runsc with
# gVisor's shim v2. One xz tarball, under the device tool's 64 MiB carry limit:
#
#   hack/v2-host/pack.sh            writes bin/v2-host-pack.tar.xz
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export GOFLAGS="-buildvcs=false -tags=containers_image_openpgp,exclude_graphdriver_btrfs"
P=$(mktemp -d)
trap 'rm -rf "$P"' EXIT
make --no-print-directory build >/dev/null
hack/tools.sh install-runsc >/dev/null
go test -c -tags integration,containers_image_openpgp,exclude_graphdriver_btrfs -ldflags '-s -w' -o "$P/integration.test" ./integration/
go build -trimpath -ldflags '-s -w' -o "$P/rtshimd" ./cmd/rtshimd
cp bin/rtshim-monitor bin/rtshim-pause /usr/sbin/runc /usr/bin/containerd-shim-runc-v2 /usr/bin/docker-registry \
	/bin/busybox /usr/local/bin/runsc /usr/local/bin/containerd-shim-runsc-v1 "$P/"
cp -L "$(ldconfig -p | awk '/libseccomp.so.2 .*x86-64/ {print $NF; exit}')" "$P/libseccomp.so.2"
strip "$P/containerd-shim-runsc-v1" "$P/docker-registry" "$P/containerd-shim-runc-v2" 2>/dev/null || true
tar cf - -C "$P" . | xz -6 -T0 >bin/v2-host-pack.tar.xz
ls -l bin/v2-host-pack.tar.xz
