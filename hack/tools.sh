#!/usr/bin/env bash
# Builds the real clients the test suites drive, from the Go module proxy, at pinned versions,
# into a cache outside the checkout (kept between runs; a version bump builds anew):
#   kubelet, kube-apiserver   k8s.io/kubernetes (static, version-stamped); also a cluster's
#   kube-controller-manager,  control plane, kube-proxy and clients (kubeadm compares its
#   kube-scheduler, kube-proxy, own version with the cluster's, and `kubectl version` is
#   kubectl, kubeadm          a conformance spec: both need the stamp)
#   e2e-node, ginkgo, agnhost the node e2e suite (e2e_node.test), the ginkgo CLI of its
#                             go.mod and agnhost, from the same k8s.io/kubernetes module
#   e2e, sample-apiserver     the cluster e2e suite (e2e.test) and its aggregator spec's API
#                             server (k8s.io/sample-apiserver), from the same module
#   etcd                      go.etcd.io/etcd/server/v3 (for kube-apiserver)
#   coredns                   github.com/coredns/coredns with only the plugins kubeadm's
#                             Corefile names (a cluster's DNS; the full build pulls in the
#                             AWS, Azure, Google and DataDog SDKs its go.mod requires)
#   crictl, critest           sigs.k8s.io/cri-tools
#   runsc                     gvisor.dev/gvisor/runsc (gVisor's Go-buildable tree; version-stamped)
#   containerd-shim-runsc-v1  gvisor.dev/gvisor/shim, gVisor's own shim v2 at the same version
#   golangci-lint             github.com/golangci/golangci-lint/v2 (make vet; not in the default set)
#   busybox                   upstream BusyBox from Debian's source tarball (the tests' images)
#   criu                      CRIU 4.1.1 from Debian 13's source tarball (install-criu puts it at
#                             /usr/local/sbin/criu, where runc finds it before Debian 12's 3.17,
#                             which fails `criu check` on kernel 6.18: "Unexpected rt vDSO area")
#   systemd-node-rootfs.tar   a Debian 12 root with systemd, made by mmdebstrap from Debian's
#                             packages: the node container of TestSystemdNode (make systemd-node)
#   v2-node-root.img          the cgroup-v2 node's root: Debian 12 with systemd, runc, crun,
#                             the runc shim and docker-registry, an ext4 image; beside it
#   v2-node-vmlinuz,          Debian 12's stock kernel and the initramfs initramfs-tools made
#   v2-node-initrd.img        for it in that root, which QEMU boots (hack/v2-node/run.sh)
#
#   hack/tools.sh [TOOL...]   build what is missing (all by default); prints the bin dir
#
# k8s.io/kubernetes replaces its staging modules (k8s.io/api, ...) with ./staging paths that
# the proxy's module zip lacks, so it cannot be `go install`ed; a scratch module requires it
# and replaces each staging module with its published v0.X.Y instead. etcd's server module
# has local replaces too, so it gets a scratch module of its own.
set -euo pipefail

KUBE_VERSION=v1.37.2          # kubelet, kube-apiserver, ... (staging modules: v0.37.2)
# The commands built from the scratch module (kube_module): their packages' go.sum lines.
KUBE_CMDS="kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kubeadm"
ETCD_VERSION=v3.6.16          # the etcd line kube-apiserver 1.37 is tested with
COREDNS_VERSION=v1.14.6       # kubeadm v1.37's CoreDNSVersion
CRI_TOOLS_VERSION=v1.37.0     # cri-api v0.37, as the daemon's
# gVisor: the proxy's latest pseudo-version of gVisor's Go branch. The one place its version
# is kept (the default config names the installed path, /usr/local/bin/runsc).
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
GOLANGCI_LINT_VERSION=v2.15.0 # make vet's linter (.golangci.yml)
# busybox of the tests' images: upstream BusyBox from Debian 12's own source tarball, built
# without Debian's patches (one reverts ash passing environment names that are not shell
# identifiers, such as data-1, to its children, which the suites' env specs print).
BUSYBOX_VERSION=1.35.0
BUSYBOX_SHA256=faeeb244c35a348a334f4a59e44626ee870fb07b6884d68c10ae8bc19f83a694
# CRIU for CheckpointContainer (runc runs the `criu` it finds in PATH), and what building it
# needs from Debian 12.
CRIU_VERSION=4.1.1
CRIU_SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
CRIU_BUILD_PKGS="gcc make pkg-config libbsd-dev libcap-dev libgnutls28-dev libnet1-dev libnftables-dev libnl-3-dev libprotobuf-c-dev libprotobuf-dev protobuf-c-compiler protobuf-compiler uuid-dev"

TOOLS=${RTSHIMD_TOOLS:-/var/cache/rtshimd-tools}
BIN=$TOOLS/bin
mkdir -p "$BIN" "$TOOLS/src"
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0
log() { echo "[tools] $*" >&2; }

# have NAME VERSION: the versioned binary exists; link it as bin/NAME.
have() {
	[ -x "$BIN/$1-$2" ] || return 1
	[ "$(readlink "$BIN/$1")" = "$1-$2" ] || ln -sfn "$1-$2" "$BIN/$1"
}

# kube_module [e2e]: a scratch module requiring k8s.io/kubernetes. The test suite's programs
# (built with -mod=mod, which may rewrite go.mod) get a module of their own, so that they can
# build while kubelet builds from the other one.
kube_module() {
	local dir=$TOOLS/src/kubernetes${1:+-$1}-$KUBE_VERSION staging=v0${KUBE_VERSION#v1} lock
	exec {lock}>"$dir.lock"
	flock "$lock"
	if [ ! -f "$dir/go.sum.done" ] || [ "$(cat "$dir/go.sum.done")" != "$KUBE_CMDS" ]; then
		log "resolving k8s.io/kubernetes@$KUBE_VERSION (staging modules at $staging)"
		rm -rf "$dir" && mkdir -p "$dir"
		local mod gomod
		gomod=$(cd "$TOOLS/src" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
		mod=$(cat "$gomod")
		{
			echo "module rtshimd.local/kubetools"
			echo "go $(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')"
			echo "require k8s.io/kubernetes $KUBE_VERSION"
			sed -n 's#^\s*\(k8s.io/[a-z-]*\) => ./staging/.*#replace \1 => \1 '"$staging"'#p' <<<"$mod"
		} >"$dir/go.mod"
		local c pkgs=()
		for c in $KUBE_CMDS; do pkgs+=("k8s.io/kubernetes/cmd/$c@$KUBE_VERSION"); done
		(cd "$dir" && go get "${pkgs[@]}") >&2
		echo "$KUBE_CMDS" >"$dir/go.sum.done"
	fi
	exec {lock}>&-
	echo "$dir"
}

build_kube() { # one of KUBE_CMDS
	local name=$1
	have "$name" "$KUBE_VERSION" && return
	local dir minor=${KUBE_VERSION#v1.}
	dir=$(kube_module)
	minor=${minor%%.*}
	local v=k8s.io/component-base/version
	log "building $name $KUBE_VERSION (several minutes on 2 cores)"
	(cd "$dir" && go build -trimpath -ldflags "-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION" \
		-o "$BIN/$name-$KUBE_VERSION.tmp" "k8s.io/kubernetes/cmd/$name")
	mv "$BIN/$name-$KUBE_VERSION.tmp" "$BIN/$name-$KUBE_VERSION"
	have "$name" "$KUBE_VERSION"
}

# e2e-node | e2e: test/e2e_node or test/e2e as a test binary, e2e_node.test or e2e.test
# (their test-only dependencies add only go.sum lines to the scratch module, hence
# -mod=mod), version-stamped as kubelet is.
build_e2e() { # name package
	local name=$1 pkg=$2
	have "$name" "$KUBE_VERSION" && return
	local dir minor=${KUBE_VERSION#v1.}
	dir=$(kube_module e2e)
	minor=${minor%%.*}
	local v=k8s.io/component-base/version
	log "building $name $KUBE_VERSION (ten minutes or more on 2 cores)"
	(cd "$dir" && GOFLAGS="$GOFLAGS -mod=mod" go test -c -trimpath -ldflags "-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION" \
		-o "$BIN/$name-$KUBE_VERSION.tmp" "$pkg")
	mv "$BIN/$name-$KUBE_VERSION.tmp" "$BIN/$name-$KUBE_VERSION"
	have "$name" "$KUBE_VERSION"
}

# ginkgo | agnhost: a main package of the k8s.io/kubernetes module's build graph.
build_kube_cmd() { # name package
	local name=$1 pkg=$2 dir
	have "$name" "$KUBE_VERSION" && return
	dir=$(kube_module e2e)
	log "building $name ($pkg, from k8s.io/kubernetes $KUBE_VERSION's go.mod)"
	(cd "$dir" && GOFLAGS="$GOFLAGS -mod=mod" go build -trimpath -ldflags '-s -w' -o "$BIN/$name-$KUBE_VERSION.tmp" "$pkg")
	mv "$BIN/$name-$KUBE_VERSION.tmp" "$BIN/$name-$KUBE_VERSION"
	have "$name" "$KUBE_VERSION"
}

build_etcd() {
	have etcd "$ETCD_VERSION" && return
	local dir=$TOOLS/src/etcd-$ETCD_VERSION
	log "building etcd $ETCD_VERSION"
	rm -rf "$dir" && mkdir -p "$dir"
	printf 'module rtshimd.local/etcdtools\ngo %s\nrequire go.etcd.io/etcd/server/v3 %s\n' \
		"$(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')" "$ETCD_VERSION" >"$dir/go.mod"
	(cd "$dir" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2 &&
		go build -trimpath -ldflags '-s -w' -o "$BIN/etcd-$ETCD_VERSION.tmp" go.etcd.io/etcd/server/v3)
	mv "$BIN/etcd-$ETCD_VERSION.tmp" "$BIN/etcd-$ETCD_VERSION"
	have etcd "$ETCD_VERSION"
}

# coredns: a main of our own with the plugins of kubeadm's Corefile (errors, health, ready,
# kubernetes, prometheus, forward, cache, loop, reload, loadbalance) and log; CoreDNS's own
# main imports every plugin.
build_coredns() {
	have coredns "$COREDNS_VERSION" && return
	local dir=$TOOLS/src/coredns-$COREDNS_VERSION p
	log "building coredns $COREDNS_VERSION (kubeadm's plugins only)"
	rm -rf "$dir" && mkdir -p "$dir"
	printf 'module rtshimd.local/corednstools\ngo %s\nrequire github.com/coredns/coredns %s\n' \
		"$(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')" "$COREDNS_VERSION" >"$dir/go.mod"
	{
		echo 'package main'
		echo 'import ('
		echo '	"github.com/coredns/coredns/coremain"'
		for p in cache errors forward health kubernetes loadbalance log loop metrics ready reload; do
			echo "	_ \"github.com/coredns/coredns/plugin/$p\""
		done
		echo ')'
		echo 'func main() { coremain.Run() }'
	} >"$dir/main.go"
	(cd "$dir" && GOFLAGS="$GOFLAGS -mod=mod" go build -trimpath -ldflags '-s -w' -o "$BIN/coredns-$COREDNS_VERSION.tmp" .)
	mv "$BIN/coredns-$COREDNS_VERSION.tmp" "$BIN/coredns-$COREDNS_VERSION"
	have coredns "$COREDNS_VERSION"
}

# debian_orig TARBALL POOLDIR SHAVAR: TARBALL (a path in $TOOLS/src named as in Debian's
# pool) as the pool under POOLDIR (b/busybox) serves it, unless already there; checked
# against the SHA-256 in the variable named SHAVAR, and not kept if it differs.
debian_orig() {
	local tarball=$1 sum=${!3} url
	echo "$sum  $tarball" | sha256sum -c --quiet >/dev/null 2>&1 && return
	url="http://deb.debian.org/debian/pool/main/$2/$(basename "$tarball")"
	curl -fsSL -o "$tarball.tmp" "$url" || { log "download of $url failed"; rm -f "$tarball.tmp"; exit 1; }
	if ! echo "$sum  $tarball.tmp" | sha256sum -c --quiet >/dev/null 2>&1; then
		log "$url does not match $3 in hack/tools.sh (got $(sha256sum <"$tarball.tmp" | cut -d' ' -f1)); not used"
		rm -f "$tarball.tmp"
		exit 1
	fi
	mv "$tarball.tmp" "$tarball"
}

# busybox: upstream's defconfig, dynamic against glibc as Debian's own build (NSS for
# `hostname -f`; its shell execs applets, which critest's MaskedPaths spec needs), from the
# orig tarball in Debian's archive (checked against its SHA-256).
build_busybox() {
	have busybox "$BUSYBOX_VERSION" && return
	local dir=$TOOLS/src/busybox-$BUSYBOX_VERSION tarball=$TOOLS/src/busybox_$BUSYBOX_VERSION.orig.tar.bz2
	log "building busybox $BUSYBOX_VERSION (upstream, from Debian's source tarball; about two minutes)"
	debian_orig "$tarball" b/busybox BUSYBOX_SHA256
	rm -rf "$dir" && tar -xjf "$tarball" -C "$TOOLS/src"
	(cd "$dir" && make -s defconfig >/dev/null && make -s -j"$(nproc)" busybox >/dev/null 2>&1) ||
		{ log "busybox build failed (rerun in $dir: make busybox)"; exit 1; }
	cp "$dir/busybox" "$BIN/busybox-$BUSYBOX_VERSION.tmp"
	mv "$BIN/busybox-$BUSYBOX_VERSION.tmp" "$BIN/busybox-$BUSYBOX_VERSION"
	rm -rf "$dir"
	have busybox "$BUSYBOX_VERSION"
}

# apt_missing PKGS...: installs those not installed (the lock timeout: `make test` may run this
# beside another apt-get).
apt_missing() {
	local p missing=""
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
	done
	[ -z "$missing" ] && return
	log "installing:$missing"
	# shellcheck disable=SC2086 # a list of package names
	{ apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $missing; } >&2
}

# criu: upstream CRIU from Debian 13's orig tarball (checked against its SHA-256), built with
# Debian 12's libraries: Debian 13's binary package needs glibc 2.38.
build_criu() {
	have criu "$CRIU_VERSION" && return
	local dir=$TOOLS/src/criu-$CRIU_VERSION tarball=$TOOLS/src/criu_$CRIU_VERSION.orig.tar.xz
	log "building criu $CRIU_VERSION (upstream, from Debian's source tarball; about a minute)"
	# shellcheck disable=SC2086 # a list of package names
	apt_missing $CRIU_BUILD_PKGS
	debian_orig "$tarball" c/criu CRIU_SHA256
	rm -rf "$dir" && tar -xJf "$tarball" -C "$TOOLS/src"
	(cd "$dir" && make -s -j"$(nproc)" criu >/dev/null 2>&1) ||
		{ log "criu build failed (rerun in $dir: make criu)"; exit 1; }
	cp "$dir/criu/criu" "$BIN/criu-$CRIU_VERSION.tmp"
	mv "$BIN/criu-$CRIU_VERSION.tmp" "$BIN/criu-$CRIU_VERSION"
	rm -rf "$dir"
	have criu "$CRIU_VERSION"
}

# install-criu: the built CRIU at /usr/local/sbin/criu, ahead of Debian's /usr/sbin/criu in
# PATH, replaced only when it differs.
install_criu() {
	build_criu
	if ! cmp -s "$BIN/criu-$CRIU_VERSION" /usr/local/sbin/criu; then
		install -m 0755 "$BIN/criu-$CRIU_VERSION" /usr/local/sbin/criu.new
		mv /usr/local/sbin/criu.new /usr/local/sbin/criu
		log "installed criu $CRIU_VERSION at /usr/local/sbin/criu"
	fi
}

cri_tools_src() {
	local dir=$TOOLS/src/cri-tools-$CRI_TOOLS_VERSION
	if [ ! -f "$dir/go.mod" ]; then
		log "fetching sigs.k8s.io/cri-tools@$CRI_TOOLS_VERSION"
		local zipdir
		zipdir=$(cd "$TOOLS/src" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/cri-tools@$CRI_TOOLS_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
		rm -rf "$dir" && cp -r "$zipdir" "$dir" && chmod -R u+w "$dir"
	fi
	echo "$dir"
}

# golangci-lint: `go install` at the pinned version (its module has no replaces).
build_golangci_lint() {
	have golangci-lint "$GOLANGCI_LINT_VERSION" && return
	log "building golangci-lint $GOLANGCI_LINT_VERSION (a few minutes on 2 cores)"
	GOBIN=$TOOLS/src/golangci-lint-$GOLANGCI_LINT_VERSION go install \
		"github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
	mv "$TOOLS/src/golangci-lint-$GOLANGCI_LINT_VERSION/golangci-lint" "$BIN/golangci-lint-$GOLANGCI_LINT_VERSION"
	have golangci-lint "$GOLANGCI_LINT_VERSION"
}

build_crictl() {
	have crictl "$CRI_TOOLS_VERSION" && return
	local dir
	dir=$(cri_tools_src)
	log "building crictl $CRI_TOOLS_VERSION"
	(cd "$dir" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" \
		-o "$BIN/crictl-$CRI_TOOLS_VERSION" ./cmd/crictl)
	have crictl "$CRI_TOOLS_VERSION"
}

build_critest() {
	have critest "$CRI_TOOLS_VERSION" && return
	local dir
	dir=$(cri_tools_src)
	log "building critest $CRI_TOOLS_VERSION"
	(cd "$dir" && go test -c -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" \
		-o "$BIN/critest-$CRI_TOOLS_VERSION" ./cmd/critest)
	have critest "$CRI_TOOLS_VERSION"
}

# runsc reports the version stamped here (a bare `go install` says VERSION_MISSING): the
# gVisor release naming, from the pseudo-version's date, and the commit.
build_runsc() {
	have runsc "$GVISOR_VERSION" && return
	local stamp date commit
	date=$(sed -E 's/^v0\.0\.0-([0-9]{8}).*/\1/' <<<"$GVISOR_VERSION")
	commit=${GVISOR_VERSION##*-}
	stamp="release-$date.0-$commit"
	log "building runsc $GVISOR_VERSION ($stamp; a minute or two)"
	GOBIN=$TOOLS/src/runsc-$GVISOR_VERSION go install -trimpath \
		-ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$stamp" "gvisor.dev/gvisor/runsc@$GVISOR_VERSION" >&2
	mv "$TOOLS/src/runsc-$GVISOR_VERSION/runsc" "$BIN/runsc-$GVISOR_VERSION"
	have runsc "$GVISOR_VERSION"
}

# install-runsc: the pinned runsc at /usr/local/bin/runsc, where the default config's runsc
# row points (Debian's stays at /usr/bin/runsc). Replaced only when it differs: running
# sandboxes keep the binary they started with either way.
install_runsc() {
	build_runsc
	install_local runsc
}

# install_local NAME: the cached NAME-$GVISOR_VERSION at /usr/local/bin/NAME, replaced only
# when it differs, through a rename (a running sandbox or shim keeps its binary).
install_local() {
	if ! cmp -s "$BIN/$1-$GVISOR_VERSION" "/usr/local/bin/$1"; then
		install -m 0755 "$BIN/$1-$GVISOR_VERSION" "/usr/local/bin/$1.new"
		mv "/usr/local/bin/$1.new" "/usr/local/bin/$1"
		log "installed $1 $GVISOR_VERSION at /usr/local/bin/$1"
	fi
}

# The gVisor shim (containerd-shim-runsc-v1) of the same tree: a sandboxing shim v2 runtime,
# one shim per pod with the pod's containers in one sandbox, as Kata's is (the runsc-shim
# row). It runs the runsc it finds in PATH, so /usr/local/bin/runsc.
build_runsc_shim() {
	have containerd-shim-runsc-v1 "$GVISOR_VERSION" && return
	log "building containerd-shim-runsc-v1 $GVISOR_VERSION (a minute or two)"
	GOBIN=$TOOLS/src/runsc-shim-$GVISOR_VERSION go install -trimpath -ldflags "-s -w" "gvisor.dev/gvisor/shim@$GVISOR_VERSION" >&2
	mv "$TOOLS/src/runsc-shim-$GVISOR_VERSION/shim" "$BIN/containerd-shim-runsc-v1-$GVISOR_VERSION"
	have containerd-shim-runsc-v1 "$GVISOR_VERSION"
}

install_runsc_shim() {
	build_runsc_shim
	install_local containerd-shim-runsc-v1
}

# The systemd node's root (TestSystemdNode, make systemd-node): Debian 12 with systemd as
# init, dbus (runc's and kubelet's systemd cgroup driver talk to systemd over it), runc, the
# CNI plugins, iptables and make (the node runs `make install`). Made anew when the list
# changes; kept as a tar, unpacked per run.
NODE_SUITE=bookworm
NODE_PKGS=systemd,systemd-sysv,dbus,runc,containernetworking-plugins,iptables,iproute2,make,procps,mount
build_systemd_node_rootfs() {
	local key
	key=$(echo "$NODE_SUITE $NODE_PKGS" | sha256sum | cut -c1-12)
	if [ ! -f "$BIN/systemd-node-rootfs-$key.tar" ]; then
		log "making the systemd node's root ($NODE_SUITE: $NODE_PKGS; about a minute)"
		# A failed run's partial tar is not kept (nor taken for the root next time).
		rm -f "$BIN/systemd-node-rootfs-$key.new.tar"
		mmdebstrap --quiet --variant=minbase --include="$NODE_PKGS" "$NODE_SUITE" \
			"$BIN/systemd-node-rootfs-$key.new.tar" http://deb.debian.org/debian >&2 ||
			{ rm -f "$BIN/systemd-node-rootfs-$key.new.tar"; exit 1; }
		mv "$BIN/systemd-node-rootfs-$key.new.tar" "$BIN/systemd-node-rootfs-$key.tar"
	fi
	ln -sfn "systemd-node-rootfs-$key.tar" "$BIN/systemd-node-rootfs.tar"
}

# The cgroup-v2 node's root (hack/v2-node/run.sh): Debian 12 as the systemd node's, plus what
# runs inside a node with no network: crun, containerd's runc shim v2 (Debian's containerd),
# busybox-static (the tests' images), Debian's docker-registry (the tests' registry on the
# node's loopback) and jq; and Debian 12's stock kernel (linux-image-amd64), whose package
# makes an initramfs in the root (initramfs-tools, MODULES=most: virtio_pci, virtio_blk and
# ext4 among them, as the boot needs them before the root is mounted). The kernel and that
# initramfs are taken out of the root into the cache beside it (QEMU boots them with
# -kernel/-initrd: no boot loader); the kernel's modules stay in the root. hack/v2-node/image/
# is baked in (the boot script and its unit), and the root becomes an ext4 disk image
# (mkfs.ext4 -d: no loop device or mount here). A run boots it through a copy-on-write
# overlay of its own, so the image is never written. Made anew when the list or the baked
# files change; the kernel is whatever linux-image-amd64 was then.
V2_NODE_PKGS=$NODE_PKGS,crun,containerd,docker-registry,jq,util-linux,busybox-static,linux-image-amd64
V2_NODE_IMAGE_SIZE=8G
build_v2_node_root() {
	local here key dir tar vmlinuz initrd
	here=$(cd "$(dirname "$0")" && pwd)
	key=$({ echo "$NODE_SUITE $V2_NODE_PKGS $V2_NODE_IMAGE_SIZE"; cat "$here"/v2-node/image/*; } | sha256sum | cut -c1-12)
	if [ ! -f "$BIN/v2-node-root-$key.img" ] || [ ! -f "$BIN/v2-node-vmlinuz-$key" ] || [ ! -f "$BIN/v2-node-initrd-$key.img" ]; then
		tar=$TOOLS/src/v2-node-root-$key.tar
		if [ ! -f "$tar" ]; then
			log "making the cgroup-v2 node's root ($NODE_SUITE: $V2_NODE_PKGS; a few minutes)"
			rm -f "${tar%.tar}.new.tar"
			mmdebstrap --quiet --variant=minbase --include="$V2_NODE_PKGS" "$NODE_SUITE" \
				"${tar%.tar}.new.tar" http://deb.debian.org/debian >&2 || { rm -f "${tar%.tar}.new.tar"; exit 1; }
			mv "${tar%.tar}.new.tar" "$tar"
		fi
		dir=$(mktemp -d "$TOOLS/src/v2-node-root.XXXXXX")
		tar -C "$dir" --numeric-owner -xf "$tar"
		# Exactly one kernel and its initramfs (linux-image-amd64 depends on one image).
		vmlinuz=$(find "$dir/boot" -maxdepth 1 -name 'vmlinuz-*')
		initrd=$(find "$dir/boot" -maxdepth 1 -name 'initrd.img-*')
		if [ "$(wc -w <<<"$vmlinuz")" != 1 ] || [ "$(wc -w <<<"$initrd")" != 1 ]; then
			log "the node's root holds no single kernel and initramfs in /boot: $(ls "$dir/boot" | tr '\n' ' ')"
			rm -rf "$dir"
			exit 1
		fi
		install -m 0755 "$here/v2-node/image/v2-node-boot" "$dir/usr/local/sbin/v2-node-boot"
		install -m 0644 "$here/v2-node/image/v2-node-boot.service" "$dir/etc/systemd/system/"
		ln -sf /etc/systemd/system/v2-node-boot.service "$dir/etc/systemd/system/multi-user.target.wants/"
		echo "/dev/vda / ext4 defaults 0 1" >"$dir/etc/fstab"
		echo "v2-node" >"$dir/etc/hostname"
		cp "$vmlinuz" "$BIN/v2-node-vmlinuz-$key.new"
		cp "$initrd" "$BIN/v2-node-initrd-$key.img.new"
		rm -f "$vmlinuz" "$initrd"
		rm -f "$BIN/v2-node-root-$key.img.new"
		mkfs.ext4 -q -F -L v2-node -d "$dir" "$BIN/v2-node-root-$key.img.new" "$V2_NODE_IMAGE_SIZE" >&2 ||
			{ rm -rf "$dir" "$BIN/v2-node-root-$key.img.new" "$BIN/v2-node-vmlinuz-$key.new" "$BIN/v2-node-initrd-$key.img.new"; exit 1; }
		rm -rf "$dir"
		mv "$BIN/v2-node-vmlinuz-$key.new" "$BIN/v2-node-vmlinuz-$key"
		mv "$BIN/v2-node-initrd-$key.img.new" "$BIN/v2-node-initrd-$key.img"
		mv "$BIN/v2-node-root-$key.img.new" "$BIN/v2-node-root-$key.img"
		rm -f "$tar"
	fi
	ln -sfn "v2-node-vmlinuz-$key" "$BIN/v2-node-vmlinuz"
	ln -sfn "v2-node-initrd-$key.img" "$BIN/v2-node-initrd.img"
	ln -sfn "v2-node-root-$key.img" "$BIN/v2-node-root.img"
}

[ $# -gt 0 ] || set -- crictl critest kubelet kube-apiserver etcd install-runsc install-runsc-shim systemd-node-rootfs v2-node-root
# tool_lock TOOL: the lock a build of TOOL holds. `make test` builds the tools its last parts
# need in the background while its foreground asks for them too (and two runs may share the
# cache): a second caller waits for the build under way and then finds the tool made. Tools
# built from one source tree or one scratch module share a lock.
tool_lock() {
	case $1 in
	crictl | critest) echo cri-tools ;;
	runsc | install-runsc) echo runsc ;;
	criu | install-criu) echo criu ;;
	runsc-shim | install-runsc-shim) echo runsc-shim ;;
	e2e-node | e2e | ginkgo | agnhost | sample-apiserver) echo kubernetes-e2e ;;
	*) echo "$1" ;;
	esac
}

for t in "$@"; do
	# A read-only cache (the cgroup-v2 node mounts the host's, hack/v2-node/run.sh) takes no
	# lock, and no build could go into it: what is there is used as it is.
	lockfd= lock=$TOOLS/src/$(tool_lock "$t").build.lock
	if [ -w "$TOOLS/src" ] || [ ! -e "$lock" ]; then
		exec {lockfd}>"$lock"
		flock "$lockfd"
	fi
	case $t in
	kubelet | kube-apiserver | kube-controller-manager | kube-scheduler | kube-proxy | kubectl | kubeadm) build_kube "$t" ;;
	etcd) build_etcd ;;
	coredns) build_coredns ;;
	e2e-node) build_e2e e2e_node.test k8s.io/kubernetes/test/e2e_node ;;
	e2e) build_e2e e2e.test k8s.io/kubernetes/test/e2e ;;
	ginkgo) build_kube_cmd ginkgo github.com/onsi/ginkgo/v2/ginkgo ;;
	agnhost) build_kube_cmd agnhost k8s.io/kubernetes/test/images/agnhost ;;
	# The aggregator spec's API server: the staging module at the release's version (upstream's
	# image is older code serving the same wardle API).
	sample-apiserver) build_kube_cmd sample-apiserver k8s.io/sample-apiserver ;;
	crictl) build_crictl ;;
	critest) build_critest ;;
	golangci-lint) build_golangci_lint ;;
	busybox) build_busybox ;;
	criu) build_criu ;;
	install-criu) install_criu ;;
	runsc) build_runsc ;;
	install-runsc) install_runsc ;;
	runsc-shim) build_runsc_shim ;;
	install-runsc-shim) install_runsc_shim ;;
	systemd-node-rootfs) build_systemd_node_rootfs ;;
	v2-node-root) build_v2_node_root ;;
	*) log "unknown tool $t"; exit 2 ;;
	esac
	[ -z "$lockfd" ] || exec {lockfd}>&-
done
echo "$BIN"
