# rtshimd. As root on Debian 12:
#   make run    install what the daemon needs, build it, and run it with the default config
#   make test   install what the tests need, then unit, integration (kubelet, crictl),
#               conformance (critest on runc and runsc) and a part of Kubernetes' node
#               conformance suite (node-e2e-short) tests
SHELL := /bin/bash
GO ?= go
BIN := bin
GOFLAGS_BUILD := -trimpath
# containers/image and containers/storage: pure-Go OpenPGP, no btrfs (no cgo headers needed).
BUILDTAGS := containers_image_openpgp,exclude_graphdriver_btrfs
export GOFLAGS := -buildvcs=false -tags=$(BUILDTAGS)
# Debian packages: the OCI runtimes the default handler table names, and what tests use.
# gcc and libc6-dev build the monitor (cmd/rtshim-monitor, in C).
RUN_PKGS := runc runsc crun iproute2 containernetworking-plugins iptables gcc libc6-dev
TEST_PKGS := $(RUN_PKGS) containerd criu busybox-static util-linux procps docker-registry skopeo mmdebstrap make bzip2 curl bind9-dnsutils
# QEMU boots the cgroup-v2 node (docs/v2-node.md); installed without its recommends, which
# add a GUI (GTK, Mesa, SDL: some 50 packages) that a serial console does not use.
QEMU_PKGS := qemu-system-x86 qemu-utils

.PHONY: all build monitor monitor-sanitized run test unit integration deps-run deps-test install clean vet bench tools host-tools fuzz fuzz-short soak

all: build

build:
	$(GO) build $(GOFLAGS_BUILD) -o $(BIN)/rtshimd ./cmd/rtshimd
	# The pause program is laid into a bare rootfs: static, without cgo.
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -ldflags '-s -w' -o $(BIN)/rtshim-pause ./cmd/rtshim-pause
	$(MAKE) monitor

# The monitor, one per container (docs/monitor-protocol.md), is C: rtshimd runs the
# rtshim-monitor beside it (docs/performance.md says why C).
MONITOR_CC ?= gcc
MONITOR_SRC := $(wildcard cmd/rtshim-monitor/*.c) $(wildcard cmd/rtshim-monitor/*.h)
MONITOR_CFLAGS := -std=c11 -O2 -Wall -Wextra -D_FORTIFY_SOURCE=2 -fstack-protector-strong
monitor: $(BIN)/rtshim-monitor
$(BIN)/rtshim-monitor: $(MONITOR_SRC)
	@mkdir -p $(BIN)
	$(MONITOR_CC) $(MONITOR_CFLAGS) -s -o $@ $(filter %.c,$(MONITOR_SRC))

# The same monitor under AddressSanitizer and UndefinedBehaviorSanitizer, for the protocol
# tests (cmd/rtshim-monitor/monitortest, internal/kind/shimv2/shim's logger tests): what they find fails
# the test that drove it.
monitor-sanitized: $(BIN)/rtshim-monitor-sanitized
$(BIN)/rtshim-monitor-sanitized: $(MONITOR_SRC)
	@mkdir -p $(BIN)
	$(MONITOR_CC) -std=c11 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wall -Wextra -o $@ $(filter %.c,$(MONITOR_SRC))

# Install missing Debian packages only (apt-get update once, when something is missing);
# $(2): more apt-get install options.
define apt_install
	@missing=""; for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) $$missing >/dev/null; fi
endef

# Besides Debian's packages: a current runsc and gVisor's shim v2 of the same version,
# pinned in hack/tools.sh, built from the Go module proxy and installed at
# /usr/local/bin/runsc and /usr/local/bin/containerd-shim-runsc-v1 (the default config's
# runsc and runsc-shim rows). The tests also get CRIU 4.1.1 at /usr/local/sbin/criu (built
# from Debian 13's source; Debian 12's fails on current kernels), which CheckpointContainer needs.
deps-run:
	$(call apt_install,$(RUN_PKGS))
	hack/tools.sh install-runsc install-runsc-shim >/dev/null

deps-test:
	$(call apt_install,$(TEST_PKGS))
	$(call apt_install,$(QEMU_PKGS),--no-install-recommends)
	hack/tools.sh install-runsc install-runsc-shim install-criu >/dev/null

run: deps-run build
	@mkdir -p /etc/rtshimd
	@[ -f /etc/rtshimd/config.toml ] || { ./$(BIN)/rtshimd config default > /etc/rtshimd/config.toml; echo "wrote /etc/rtshimd/config.toml"; }
	@mkdir -p /etc/cni/net.d
	@ls /etc/cni/net.d/*.conf* >/dev/null 2>&1 || { install -m 0644 configs/cni/10-rtshimd.conflist /etc/cni/net.d/; echo "installed /etc/cni/net.d/10-rtshimd.conflist"; }
	./$(BIN)/rtshimd --config /etc/rtshimd/config.toml

vet:
	@unformatted=$$(gofmt -l cmd internal integration hack configs 2>/dev/null); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration,$(BUILDTAGS) ./integration/...
	# golangci-lint at its pinned version (hack/tools.sh; .golangci.yml says which linters)
	$$(hack/tools.sh golangci-lint)/golangci-lint run ./...

unit: monitor $(BIN)/rtshim-monitor-sanitized
	# The monitor's protocol and logger tests run on it under ASan+UBSan here...
	RTSHIMD_TEST_MONITOR=$(CURDIR)/$(BIN)/rtshim-monitor-sanitized $(GO) test -count=1 ./...
	# ...and again as it is built for use (-O2, fortified).
	RTSHIMD_TEST_MONITOR=$(CURDIR)/$(BIN)/rtshim-monitor $(GO) test -count=1 ./cmd/rtshim-monitor/...

# Go fuzz targets: the spec builder, the config parser, the CRI log writer, the pod and
# container record decoders. The test run
# gives each 15,000 inputs; `make fuzz` longer (FUZZTIME). Inputs that failed are
# kept under the packages' testdata/fuzz and run by `make unit` from then on.
# And the monitor: its JSON reader against encoding/json, in-process under ASan (go test
# -asan builds the C with it), and its CRI log writer, as the binary runs under
# ASan+UBSan, against the format's model (a process per input: FUZZTIME_BINARY inputs).
FUZZ_TARGETS := ./internal/oci:FuzzContainerSpec ./internal/config:FuzzParse \
	./internal/container:FuzzDecodeRecord ./internal/sandbox:FuzzDecodeRecord
FUZZTIME ?= 2m
FUZZTIME_BINARY ?= $(FUZZTIME)
fuzz: $(BIN)/rtshim-monitor-sanitized
	@for t in $(FUZZ_TARGETS); do echo "fuzz $${t#*:} ($(FUZZTIME))"; $(GO) test -run XXX -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) $${t%%:*} || exit 1; done
	@echo "fuzz FuzzConfig, the monitor's JSON reader under ASan ($(FUZZTIME))"
	@CGO_ENABLED=1 $(GO) test -asan -run XXX -fuzz '^FuzzConfig$$' -fuzztime $(FUZZTIME) ./cmd/rtshim-monitor/cjson/
	@echo "fuzz FuzzLoggerLog, the monitor binary's CRI log under ASan+UBSan ($(FUZZTIME_BINARY))"
	@RTSHIMD_TEST_MONITOR=$(CURDIR)/$(BIN)/rtshim-monitor-sanitized $(GO) test -run XXX -fuzz '^FuzzLoggerLog$$' -fuzztime $(FUZZTIME_BINARY) -parallel 1 ./cmd/rtshim-monitor/monitortest/

# A count, not a duration: a duration's deadline races the fuzzing workers in Go's
# coordinator, which then fails a clean run with "context deadline exceeded" on a loaded
# machine (golang/go#75804; seen in CI here with no failing input).
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=15000x FUZZTIME_BINARY=500x

# kubelet, kube-apiserver, etcd, crictl and critest from the Go module proxy at pinned
# versions and the node roots (the cgroup-v2 node's with Debian's kernel), cached in
# /var/cache/rtshimd-tools (hack/tools.sh).
tools:
	hack/tools.sh >/dev/null

# What the integration tests need before they start; TestV2Node and TestV2NodeKernelBoots
# ask hack/tools.sh for the node's kernel and root themselves (integration/tools_test.go).
HOST_TOOLS := crictl critest kubelet kube-apiserver etcd systemd-node-rootfs busybox
host-tools:
	hack/tools.sh $(HOST_TOOLS) >/dev/null

# -timeout: TestV2Node alone took 10 minutes where QEMU has no KVM, 17 on a busy machine
# (docs/v2-node.md).
integration: build host-tools
	$(GO) test -count=1 -tags integration,$(BUILDTAGS) -timeout 60m -v ./integration/... 2>&1 | tee /tmp/rtshimd-integration.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go' ; exit $${PIPESTATUS[0]}

# The tools build in the background from the start, at nice 19, in what vet and the tests
# leave of the CPUs: first what the integration tests need, then what only the last parts use
# (TestV2Node near the end of integration, node-e2e-short). Built one after the other in the
# foreground, a cold run took about 80 minutes. hack/tools.sh locks each build, so a part
# that asks for a tool under way waits for it. A failed background build fails the run;
# `make test BG_TOOLS=` builds each tool when its part first asks for it.
BG_TOOLS ?= $(HOST_TOOLS) v2-node-root e2e-node ginkgo agnhost $(CLUSTER_TOOLS)
BG_LOG := /tmp/rtshimd-bg-tools.log
test: deps-test
	@bg=""; \
	if [ -n "$(strip $(BG_TOOLS))" ]; then \
		echo "building in the background: $(strip $(BG_TOOLS)) (log: $(BG_LOG))"; \
		setsid nice -n 19 hack/tools.sh $(BG_TOOLS) >$(BG_LOG) 2>&1 </dev/null & bg=$$!; \
		trap 'kill -- -'$$bg' 2>/dev/null; exit 130' INT TERM; \
	fi; \
	$(MAKE) --no-print-directory vet unit fuzz-short integration conformance node-e2e-short cluster; rc=$$?; \
	if [ -n "$$bg" ]; then \
		if [ $$rc -ne 0 ]; then kill -- -$$bg 2>/dev/null; wait $$bg 2>/dev/null; \
		elif ! wait $$bg; then echo "background tool build failed (hack/tools.sh $(strip $(BG_TOOLS))):"; tail -n 40 $(BG_LOG); rc=1; fi; \
	fi; \
	exit $$rc

# Soak: pod cycles on every ready handler by concurrent workers while the daemon is killed
# with -9 and restarted; fails on a lost pod or container, or on anything left on the node
# afterwards. `make integration` runs a short one (TestSoak's defaults: 24 cycles, 2 kills).
SOAK_CYCLES ?= 1000
SOAK_KILLS ?= 20
SOAK_WORKERS ?= 4
soak: deps-test build tools
	RTSHIMD_SOAK_CYCLES=$(SOAK_CYCLES) RTSHIMD_SOAK_KILLS=$(SOAK_KILLS) RTSHIMD_SOAK_WORKERS=$(SOAK_WORKERS) \
		$(GO) test -count=1 -tags integration,$(BUILDTAGS) -timeout 90m -run '^TestSoak$$' -v ./integration/ 2>&1 | tee /tmp/rtshimd-soak.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go'; exit $${PIPESTATUS[0]}

# The node kubeadm users run: systemd as PID 1 in a node container (Debian 12's systemd,
# run by runc), rtshimd installed in it by `make install` and run by its unit with the
# systemd cgroup driver, kubelet with cgroupDriver: systemd (integration/systemd_node_test.go;
# also part of `make integration`).
.PHONY: systemd-node
systemd-node: deps-test build
	hack/tools.sh kubelet crictl systemd-node-rootfs >/dev/null
	$(GO) test -count=1 -tags integration,$(BUILDTAGS) -timeout 20m -run '^TestSystemdNode$$' -v ./integration/

# A Kubernetes cluster of two rtshimd nodes, joined by kubeadm, with kube-proxy, CoreDNS and a
# pod network across the nodes, all in network namespaces of its own (TestCluster: its own
# checks of Services, cross-node traffic, DNS, logs, a rollout, a Job, a webhook, a pod of
# the RuntimeClass test-handler, here on runsc; part of `make test`, about 90 s).
CLUSTER_TOOLS := kubeadm kubectl kube-proxy kube-controller-manager kube-scheduler coredns
.PHONY: cluster
cluster: deps-test build
	hack/tools.sh $(HOST_TOOLS) $(CLUSTER_TOOLS) agnhost >/dev/null
	RTSHIMD_CLUSTER=1 RTSHIMD_CLUSTER_TEST_HANDLER=runsc $(GO) test -count=1 -tags integration,$(BUILDTAGS) -timeout 30m -run '^TestCluster$$' -v ./integration/

# Kubernetes' e2e [Conformance] suite on that cluster, checked against conformance/cluster/
# (RTSHIMD_CLUSTER_FOCUS narrows it; RTSHIMD_CLUSTER_TEST_HANDLER=runsc puts the
# RuntimeClass specs' test-handler on runsc).
.PHONY: cluster-conformance
cluster-conformance: deps-test build
	hack/tools.sh $(HOST_TOOLS) $(CLUSTER_TOOLS) agnhost e2e ginkgo sample-apiserver >/dev/null
	RTSHIMD_CLUSTER_CONFORMANCE=1 $(GO) test -count=1 -tags integration,$(BUILDTAGS) -timeout 7h -run '^TestClusterConformance$$' -v ./integration/

# The cgroup-v2 node (issues 39 and 57, docs/v2-node.md): QEMU booting Debian 12's stock
# kernel and the node's Debian root with systemd on the unified hierarchy (hack/tools.sh
# v2-node-root makes all three, no kernel build); TestV2Node (part of `make integration`)
# runs hack/v2-node/inside.sh in it. v2-node-smoke boots it once for what it stands on
# (hack/v2-node/smoke.sh). V2_NODE_ACCEL=tcg forces QEMU's emulation where KVM works.
.PHONY: v2-node v2-node-full v2-node-smoke
v2-node: deps-test build
	hack/tools.sh v2-node-root >/dev/null
	$(GO) test -count=1 -tags integration,$(BUILDTAGS) -timeout 45m -run '^TestV2Node$$' -v ./integration/
# The whole of it: critest in the node on runc and the runc shim too.
v2-node-full: deps-test build
	hack/tools.sh v2-node-root >/dev/null
	RTSHIMD_V2_NODE_CRITEST="runc crun runc-shim" $(GO) test -count=1 -tags integration,$(BUILDTAGS) -timeout 150m -run '^TestV2Node$$' -v ./integration/
v2-node-smoke: deps-test
	hack/tools.sh v2-node-root >/dev/null
	$(GO) test -count=1 -tags integration,$(BUILDTAGS) -timeout 15m -run '^TestV2NodeKernelBoots$$' -v ./integration/

install: build
	install -m 0755 $(BIN)/rtshimd $(BIN)/rtshim-monitor $(BIN)/rtshim-pause /usr/local/bin/
	# Earlier releases installed the C monitor as rtshim-monitor-c: a config naming it
	# runs the one monitor now.
	@[ ! -e /usr/local/bin/rtshim-monitor-c ] || ln -sf rtshim-monitor /usr/local/bin/rtshim-monitor-c
	install -D -m 0644 contrib/systemd/rtshimd.service /etc/systemd/system/rtshimd.service
	@mkdir -p /etc/rtshimd
	@[ -f /etc/rtshimd/config.toml ] || /usr/local/bin/rtshimd config default > /etc/rtshimd/config.toml
	@mkdir -p /etc/cni/net.d
	@ls /etc/cni/net.d/*.conf* >/dev/null 2>&1 || install -m 0644 configs/cni/10-rtshimd.conflist /etc/cni/net.d/

clean:
	rm -rf $(BIN)

# Benchmarks: figures are ratios against a floor measured in the same run (docs/performance.md).
# BenchmarkScale runs RTSHIMD_BENCH_PODS pods (default 1000; 100 for a quick look) and
# reports each figure at 1,000 against 100 and 0 pods; RTSHIMD_BENCH_PROFILE=DIR adds the
# daemon's CPU and allocation profiles under the List and stats loops and a CPU profile of pod
# starts; RTSHIMD_BENCH_LOG_LEVEL=debug logs each start's steps, RTSHIMD_BENCH_HOLD=5m keeps the pods.
bench: deps-test build
	$(GO) test -count=1 -tags integration,$(BUILDTAGS) -run '^$$' -bench . -benchtime 1x -timeout 30m ./integration/ 2>&1 | tee /tmp/rtshimd-bench.log | grep -E '^(Benchmark|ok|FAIL|PASS|scale:)|_test.go'; exit $${PIPESTATUS[0]}

# CRI conformance: critest against the built daemon on runc and runsc, offline (images built
# and served locally), checked against conformance/expected/ (hack/conformance/run.sh).
.PHONY: conformance
conformance: build
	hack/conformance/run.sh

# Kubernetes' node conformance suite (test/e2e_node, [NodeConformance]) against the built
# daemon through a real kubelet, offline, on runc, on runsc and with kubelet taking its
# stats from the CRI, checked against conformance/node-e2e/ (hack/node-e2e/run.sh). The
# test command runs node-e2e-short: the specs of conformance/node-e2e/subset.txt, one or
# more of every area, on the same three passes.
.PHONY: node-e2e node-e2e-short
node-e2e: build
	hack/node-e2e/run.sh
node-e2e-short: build
	NODE_E2E_SUBSET=1 hack/node-e2e/run.sh
