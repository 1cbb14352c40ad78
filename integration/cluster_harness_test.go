//go:build integration

package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// cluster is a Kubernetes cluster of rtshimd nodes, as kind makes one: node containers
// whose PID 1 is systemd (systemdNode), rtshimd installed in each by `make install` and run
// by its unit, kubelet run by systemd as kubeadm sets it up, the nodes joined by kubeadm.
// Its network lives in a network namespace of the test's own: a bridge with the registry's
// address on it and one veth per node. Nothing is routed off the machine and the host's own
// routes and iptables are not touched; everything is removed by the test's cleanup.
type cluster struct {
	t     *testing.T
	ns    string // the network namespace of the bridge (ip netns)
	nodes []*clusterNode
	// registry is the test's registry (here, 127.0.0.1): the nodes reach it as
	// clusterRegistryIP, images of registry.k8s.io under registry.k8s.io/.
	registry string
}

// clusterNode is one node of the cluster.
type clusterNode struct {
	*systemdNode
	Name    string
	IP      string
	PodCIDR string
	// Config is the node's /etc/rtshimd/config.toml (WriteConfig writes it again).
	Config *config.Config
}

// WriteConfig writes the node's config file, which the daemon reloads.
func (n *clusterNode) WriteConfig() {
	n.WriteFile("/etc/rtshimd/config.toml", configTOML(n.t, n.Config))
}

// The cluster's addresses: private to the test's namespaces, and apart from rtshimd's
// default 10.88.0.0/16, node e2e's 10.232.0.0/24 and this host's.
const (
	clusterBridgeIP   = "172.30.0.1"
	clusterPrefix     = "172.30.0."
	clusterPodSubnet  = "10.244.0.0/16"
	clusterSvcSubnet  = "10.96.0.0/16"
	clusterToken      = "rtshim.0123456789abcdef"
	clusterRegistryIP = clusterBridgeIP + ":5000"
	kubeVersion       = "v1.37.2"
)

// startCluster brings up a cluster of n nodes; node 0 is the control plane, untainted, so
// that every node is schedulable.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Dir(filepath.Dir(file))
	// The binaries `make install` installs: built here, as the nodes have no Go toolchain.
	if out, err := exec.Command("make", "-C", repo, "--no-print-directory", "build").CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	reg := startRegistry(t, nil)
	pushClusterImages(t, reg)

	c := &cluster{t: t, ns: fmt.Sprintf("rtshimd-cluster-%d", time.Now().UnixNano()%1e9), registry: reg.Addr}
	c.ip("netns", "add", c.ns)
	t.Cleanup(func() { c.ip("netns", "del", c.ns) }) // last: after every node is gone
	c.ip("-n", c.ns, "link", "set", "lo", "up")
	c.ip("-n", c.ns, "link", "add", "br0", "type", "bridge")
	c.ip("-n", c.ns, "addr", "add", clusterBridgeIP+"/24", "dev", "br0")
	c.ip("-n", c.ns, "link", "set", "br0", "up")
	c.forward(clusterRegistryIP, reg.Addr)

	for i := 0; i < n; i++ {
		node := &clusterNode{systemdNode: startSystemdNode(t, repo), Name: fmt.Sprintf("rtshimd-cluster-%d", i),
			IP: fmt.Sprintf("%s%d", clusterPrefix, i+2)}
		c.nodes = append(c.nodes, node)
		t.Cleanup(func() { c.drain(node) }) // before the node halts
		c.attach(i, node)
		c.install(node)
	}
	c.initControlPlane()
	for _, node := range c.nodes[1:] {
		c.join(node)
	}
	for _, node := range c.nodes {
		c.startKubeProxy(node)
	}
	c.podNetwork()
	c.dnsOffline()
	c.waitReady()
	return c
}

// ip runs ip(8) here and fails the test on an error.
func (c *cluster) ip(args ...string) {
	c.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		c.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// forward serves addr in the cluster's namespace by forwarding each connection to target
// here: the test's registry on 127.0.0.1, for every node at the bridge's address.
func (c *cluster) forward(addr, target string) {
	c.t.Helper()
	var l net.Listener
	err := inNetnsPath("/run/netns/"+c.ns, func() (err error) { l, err = net.Listen("tcp", addr); return err })
	if err != nil {
		c.t.Fatalf("listen on %s in %s: %v", addr, c.ns, err)
	}
	serveForward(c.t, l, target)
}

// attach gives node i its eth0: a veth whose other end is on the bridge.
func (c *cluster) attach(i int, node *clusterNode) {
	c.t.Helper()
	host := fmt.Sprintf("vc%d", i)
	c.ip("-n", c.ns, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", fmt.Sprint(node.Pid))
	c.ip("-n", c.ns, "link", "set", host, "master", "br0", "up")
	node.MustExec("ip", "addr", "add", node.IP+"/24", "dev", "eth0")
	node.MustExec("ip", "link", "set", "eth0", "up")
	// Host-network processes route service addresses before kube-proxy's DNAT.
	node.MustExec("ip", "route", "add", "default", "via", clusterBridgeIP)
	node.MustExec("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	node.MustExec("hostname", node.Name)
}

// install puts rtshimd on the node (make install, its unit), with the registries of the
// cluster's images mapped onto the test's registry, and kubelet's unit as kubeadm wants it.
func (c *cluster) install(node *clusterNode) {
	c.t.Helper()
	hosts := "127.0.0.1 localhost\n"
	for _, n := range c.nodeAddrs() {
		hosts += n
	}
	node.WriteFile("/etc/hosts", hosts)
	// Nothing listens there: a lookup of an outside name fails at once, on this machine.
	node.WriteFile("/etc/resolv.conf", "nameserver "+clusterBridgeIP+"\n")
	node.MustExec("make", "-C", "/src", "--no-print-directory", "-o", "build", "install")
	cfg := config.Default()
	cfg.CgroupDriver = config.SystemdDriver
	runc, runsc := *cfg.Handlers["runc"], *cfg.Handlers["runsc"]
	runsc.RuntimePath = toolPath(c.t, "runsc")
	// test-handler: the RuntimeClass specs' handler, a second runc row as containerd and
	// CRI-O configure it for the suite, or with RTSHIMD_CLUSTER_TEST_HANDLER=runsc the pinned
	// runsc (another kind of isolation behind the same RuntimeClass).
	testHandler := runc
	if os.Getenv("RTSHIMD_CLUSTER_TEST_HANDLER") == "runsc" {
		testHandler = runsc
	}
	cfg.Handlers = map[string]*config.Handler{"runc": &runc, "test-handler": &testHandler}
	// The nodes differ as a heterogeneous cluster's do: only the first has a runsc row.
	if node == c.nodes[0] {
		cfg.Handlers["runsc"] = &runsc
	}
	// The node labels itself with kubelet's credentials, which kubeadm writes only after
	// the runtime is up (the daemon waits for them).
	cfg.Node = config.Node{Kubeconfig: "/etc/kubernetes/kubelet.conf", Name: node.Name}
	cfg.DefaultHandler = "runc"
	for _, prefix := range []string{"registry.k8s.io", "docker.io", "gcr.io", "quay.io"} {
		cfg.Image.Registries = append(cfg.Image.Registries, config.Registry{
			Prefix: prefix, Location: clusterRegistryIP + "/" + prefix, Insecure: true,
		})
	}
	node.Config = cfg
	node.WriteConfig()
	// The pod network is written per node once its pod CIDR is known (podNetwork).
	node.MustExec("sh", "-c", "rm -f /etc/cni/net.d/*")
	node.MustExec("systemctl", "enable", "--now", "rtshimd")
	node.WriteFile("/etc/systemd/system/kubelet.service", fmt.Sprintf(`[Unit]
Description=kubelet
After=rtshimd.service
Wants=rtshimd.service

[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
ExecStart=%s $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
`, toolPath(c.t, "kubelet")))
	node.MustExec("systemctl", "daemon-reload")
	node.MustExec("systemctl", "enable", "kubelet")
}

// drain stops kubelet and kube-proxy on the node, removes every pod through the CRI and
// stops rtshimd, as a node being shut down would, so that the node halts with nothing of
// the runtime's left running.
func (c *cluster) drain(n *clusterNode) {
	for _, unit := range []string{"kubelet", "kube-proxy"} {
		_, _ = n.Exec(time.Minute, "systemctl", "stop", unit)
	}
	crictl := toolPath(c.t, "crictl")
	if out, err := n.Exec(3*time.Minute, crictl, "--runtime-endpoint", "unix:///run/rtshimd/rtshimd.sock", "rmp", "--all", "--force"); err != nil {
		c.t.Errorf("%s: crictl rmp: %v\n%s", n.Name, err, out)
	}
	if out, err := n.Exec(time.Minute, "systemctl", "stop", "rtshimd"); err != nil {
		c.t.Errorf("%s: stop rtshimd: %v\n%s", n.Name, err, out)
	}
	// With every pod removed, no container's monitor or runtime process is left (a monitor
	// takes up to about two seconds to end after its container's exit is handed over).
	var left string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		out, err := n.Exec(time.Minute, "sh", "-c", "ps -eo pid,args | grep -E 'rtshim-monitor|runc|rtshim-pause' | grep -v grep")
		if left = out; err != nil {
			return
		}
	}
	c.t.Errorf("%s: left 15 s after every pod was removed:\n%s", n.Name, left)
}

// nodeAddrs is /etc/hosts lines for every node started so far.
func (c *cluster) nodeAddrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.IP+" "+n.Name+"\n")
	}
	return out
}

// kubeletConfig is kubeadm's KubeletConfiguration for every node: cgroup v1 allowed (this
// host), and, as kind, no eviction or image GC from the disk every node shares.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
failCgroupV1: false
failSwapOn: false
imageGCHighThresholdPercent: 100
evictionHard:
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
`

// initControlPlane runs kubeadm init on node 0. Preflight is skipped, as kind does: its
// system validators refuse cgroup v1 for this kubelet, and the images are the test's.
// kube-proxy runs as a unit of each node (startKubeProxy), with the node's iptables.
func (c *cluster) initControlPlane() {
	c.t.Helper()
	n := c.nodes[0]
	n.WriteFile("/etc/kubernetes/kubeadm.yaml", fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %[1]s
localAPIEndpoint:
  advertiseAddress: %[2]s
  bindPort: 6443
nodeRegistration:
  name: %[3]s
  criSocket: unix:///run/rtshimd/rtshimd.sock
  taints: []
  kubeletExtraArgs:
  - name: node-ip
    value: %[2]s
skipPhases:
- preflight
- addon/kube-proxy
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %[4]s
controlPlaneEndpoint: %[2]s:6443
networking:
  podSubnet: %[5]s
  serviceSubnet: %[6]s
  dnsDomain: cluster.local
controllerManager:
  extraArgs:
  - name: leader-elect
    value: "false"
scheduler:
  extraArgs:
  - name: leader-elect
    value: "false"
---
%[7]s`, clusterToken, n.IP, n.Name, kubeVersion, clusterPodSubnet, clusterSvcSubnet, kubeletConfig))
	if out, err := n.Exec(10*time.Minute, toolPath(c.t, "kubeadm"), "init", "--config", "/etc/kubernetes/kubeadm.yaml", "--v=1"); err != nil {
		logs, _ := n.Exec(time.Minute, "journalctl", "--no-pager", "-n", "80", "-u", "kubelet", "-u", "rtshimd")
		c.t.Fatalf("kubeadm init: %v\n%s\n%s", err, lastLines(out, 60), logs)
	}
}

// join runs kubeadm join on a worker.
func (c *cluster) join(n *clusterNode) {
	c.t.Helper()
	n.WriteFile("/etc/kubernetes/kubeadm.yaml", fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: %[1]s:6443
    token: %[2]s
    unsafeSkipCAVerification: true
nodeRegistration:
  name: %[3]s
  criSocket: unix:///run/rtshimd/rtshimd.sock
  kubeletExtraArgs:
  - name: node-ip
    value: %[4]s
skipPhases:
- preflight
`, c.nodes[0].IP, clusterToken, n.Name, n.IP))
	if out, err := n.Exec(10*time.Minute, toolPath(c.t, "kubeadm"), "join", "--config", "/etc/kubernetes/kubeadm.yaml", "--v=1"); err != nil {
		c.t.Fatalf("kubeadm join %s: %v\n%s", n.Name, err, lastLines(out, 60))
	}
}

// startKubeProxy runs kube-proxy (iptables mode) as a unit of the node, with the cluster
// admin's credentials (a test cluster's shortcut: kubeadm's DaemonSet has a token of its own).
func (c *cluster) startKubeProxy(n *clusterNode) {
	c.t.Helper()
	admin, err := os.ReadFile(c.nodes[0].Path("/etc/kubernetes/admin.conf"))
	if err != nil {
		c.t.Fatal(err)
	}
	n.WriteFile("/etc/kubernetes/kube-proxy.conf", string(admin))
	n.WriteFile("/etc/kubernetes/kube-proxy.yaml", fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/kube-proxy.conf
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
conntrack:
  maxPerCore: 0
iptables:
  minSyncPeriod: 1s
`, clusterPodSubnet, n.Name))
	n.WriteFile("/etc/systemd/system/kube-proxy.service", fmt.Sprintf(`[Unit]
Description=kube-proxy
After=kubelet.service

[Service]
ExecStart=%s --config=/etc/kubernetes/kube-proxy.yaml
Restart=always
RestartSec=1
`, toolPath(c.t, "kube-proxy")))
	n.MustExec("systemctl", "daemon-reload")
	n.MustExec("systemctl", "start", "kube-proxy")
}

// kubectl runs kubectl on the control plane node as the cluster's admin.
func (c *cluster) kubectl(args ...string) (string, error) {
	return c.nodes[0].Exec(5*time.Minute, append([]string{toolPath(c.t, "kubectl"), "--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
}

// mustKubectl is kubectl that fails the test on an error.
func (c *cluster) mustKubectl(args ...string) string {
	c.t.Helper()
	out, err := c.kubectl(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// podNetwork gives each node the pod network kindnet would: a bridge CNI config on the
// node's pod CIDR (kube-controller-manager allocates one per node), without masquerading
// (pods reach each other by their own addresses), and a route to every other node's pods.
func (c *cluster) podNetwork() {
	c.t.Helper()
	for _, n := range c.nodes {
		waitFor(c.t, 3*time.Minute, n.Name+"'s pod CIDR", func() (bool, string) {
			out, err := c.kubectl("get", "node", n.Name, "-o", "jsonpath={.spec.podCIDR}")
			n.PodCIDR = strings.TrimSpace(out)
			return err == nil && n.PodCIDR != "", fmt.Sprint(out, err)
		})
	}
	for _, n := range c.nodes {
		n.WriteFile("/etc/cni/net.d/10-cluster.conflist", fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "cluster",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.PodCIDR))
		for _, other := range c.nodes {
			if other != n {
				n.MustExec("ip", "route", "add", other.PodCIDR, "via", other.IP)
			}
		}
	}
}

// dnsOffline drops CoreDNS's forward to the node's resolver and its loop check, as kind
// does for IPv6: the cluster answers its own names and nothing else, on this machine.
func (c *cluster) dnsOffline() {
	c.t.Helper()
	waitFor(c.t, 3*time.Minute, "CoreDNS's ConfigMap", func() (bool, string) {
		out, err := c.kubectl("-n", "kube-system", "get", "configmap", "coredns")
		return err == nil, out
	})
	corefile := c.mustKubectl("-n", "kube-system", "get", "configmap", "coredns", "-o", "jsonpath={.data.Corefile}")
	var kept []string
	skip := 0
	for _, line := range strings.Split(corefile, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case skip > 0:
			skip += strings.Count(line, "{") - strings.Count(line, "}")
			continue
		case strings.HasPrefix(trimmed, "forward "):
			skip = strings.Count(line, "{") - strings.Count(line, "}")
			continue
		case trimmed == "loop":
			continue
		}
		kept = append(kept, line)
	}
	c.nodes[0].WriteFile("/etc/kubernetes/Corefile", strings.Join(kept, "\n"))
	if out, err := c.nodes[0].Exec(time.Minute, "sh", "-c", toolPath(c.t, "kubectl")+
		" --kubeconfig /etc/kubernetes/admin.conf -n kube-system create configmap coredns --from-file=Corefile=/etc/kubernetes/Corefile"+
		" --dry-run=client -o yaml | "+toolPath(c.t, "kubectl")+" --kubeconfig /etc/kubernetes/admin.conf apply -f -"); err != nil {
		c.t.Fatalf("CoreDNS's Corefile: %v\n%s", err, out)
	}
	c.mustKubectl("-n", "kube-system", "rollout", "restart", "deployment/coredns")
}

// waitReady waits until every node is Ready and every kube-system pod runs, as e2e.test's
// suite setup will.
func (c *cluster) waitReady() {
	c.t.Helper()
	waitFor(c.t, 5*time.Minute, "every node Ready", func() (bool, string) {
		out, err := c.kubectl("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		return err == nil && strings.Count(out, "=True") == len(c.nodes), out
	})
	waitFor(c.t, 5*time.Minute, "every kube-system pod Ready", func() (bool, string) {
		out, err := c.kubectl("-n", "kube-system", "get", "pods", "--no-headers")
		if err != nil {
			return false, out
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[2] != "Running" || strings.Split(f[1], "/")[0] != strings.Split(f[1], "/")[1] {
				return false, out
			}
		}
		return true, out
	})
}

// pushClusterImages pushes the images kubeadm's control plane and CoreDNS run, and the
// checks' agnhost (two tags, two images): each the pinned binary alone (all static), under the names kubeadm
// v1.37.2 gives them (`kubeadm config images list`).
func pushClusterImages(t *testing.T, reg *Registry) {
	t.Helper()
	binary := func(tool, dest string) Layer {
		b, err := os.ReadFile(toolPath(t, tool))
		if err != nil {
			t.Fatal(err)
		}
		files := []File{}
		for d := filepath.Dir(dest); d != "/"; d = filepath.Dir(d) {
			files = append([]File{{Path: d, Dir: true}}, files...)
		}
		files = append(files, File{Path: "/tmp", Dir: true, Mode: 0o1777}, File{Path: dest, Content: string(b), Mode: 0o755})
		return Layer{Files: files}
	}
	path := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	for _, img := range []struct{ repo, tag, tool, dest string }{
		{"registry.k8s.io/kube-apiserver", kubeVersion, "kube-apiserver", "/usr/local/bin/kube-apiserver"},
		{"registry.k8s.io/kube-controller-manager", kubeVersion, "kube-controller-manager", "/usr/local/bin/kube-controller-manager"},
		{"registry.k8s.io/kube-scheduler", kubeVersion, "kube-scheduler", "/usr/local/bin/kube-scheduler"},
		// etcd v3.6.16 under kubeadm's 3.7.0-0 tag: it takes the flags kubeadm gives.
		{"registry.k8s.io/etcd", "3.7.0-0", "etcd", "/usr/local/bin/etcd"},
		{"registry.k8s.io/coredns/coredns", "v1.14.6", "coredns", "/coredns"},
		{"registry.k8s.io/e2e-test-images/agnhost", "2.66.1", "agnhost", "/agnhost"},
		{"registry.k8s.io/e2e-test-images/agnhost", "2.55", "agnhost", "/agnhost"},
	} {
		cfg := ocispec.ImageConfig{Env: path}
		if img.dest == "/coredns" || img.dest == "/agnhost" {
			cfg.Entrypoint = []string{img.dest}
		}
		layers := []Layer{binary(img.tool, img.dest)}
		if img.tag == "2.55" { // an image of its own for a rollout to change to
			layers = append(layers, Layer{Files: []File{{Path: "/agnhost-prev", Content: "2.55\n", Mode: 0o644}}})
		}
		reg.Push(t, img.repo, img.tag, ImageSpec{Layers: layers, Config: cfg}, nil)
	}
}
