//go:build integration

package integration

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// testNet is a CNI bridge network of one test: its own bridge, subnet and IPAM dir.
type testNet struct {
	bridge, subnet, gateway, ipamDir string
}

var netSeq byte

// writeNetwork puts a bridge + host-local + portmap conflist into the daemon's CNI dir.
func writeNetwork(t *testing.T, e *containerEnv) testNet {
	t.Helper()
	var b [2]byte
	_, _ = rand.Read(b[:])
	netSeq++
	n := testNet{
		bridge:  "rtsh" + hex.EncodeToString(b[:]),
		subnet:  fmt.Sprintf("10.213.%d.0/24", int(b[0])%200+int(netSeq)),
		ipamDir: filepath.Join(e.d.Dir, "ipam"),
	}
	n.gateway = strings.TrimSuffix(n.subnet, "0/24") + "1"
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "rtshimd-test",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`, n.bridge, n.ipamDir, n.subnet)
	if err := os.WriteFile(filepath.Join(e.d.Dir, "cni", "10-test.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "delete", n.bridge).Run() })
	waitNetworkReady(t, e.d, true)
	return n
}

func waitNetworkReady(t testing.TB, d *Daemon, want bool) *runtimeapi.RuntimeCondition {
	t.Helper()
	var cond *runtimeapi.RuntimeCondition
	waitFor(t, 15*time.Second, fmt.Sprintf("NetworkReady=%v", want), func() (bool, string) {
		st, err := d.RS.Status(ctxT(t), false)
		if err != nil {
			return false, err.Error()
		}
		for _, c := range st.Status.Conditions {
			if c.Type == runtimeapi.NetworkReady {
				cond = c
			}
		}
		return cond != nil && cond.Status == want, fmt.Sprint(cond)
	})
	return cond
}

// allocations lists the IPs host-local has handed out in the test's IPAM dir.
func (n testNet) allocations() []string {
	entries, _ := os.ReadDir(filepath.Join(n.ipamDir, "rtshimd-test"))
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}

// veths counts the interfaces attached to the test bridge.
func (n testNet) veths() int {
	out, _ := exec.Command("ip", "-o", "link", "show", "master", n.bridge).Output()
	return strings.Count(string(out), "\n")
}

func podIP(t *testing.T, d *Daemon, id string) string {
	t.Helper()
	resp, err := d.RS.PodSandboxStatus(ctxT(t), id, false)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status.GetNetwork().GetIp()
}

// Pods on the bridge get addresses from CNI and reach each other by pod IP, on runc and
// runsc alike; hostPort mappings reach a pod from the node; stopping a pod releases its
// address and its veth.
func TestPodNetwork(t *testing.T) {
	e := newContainerEnv(t)
	cond := waitNetworkReady(t, e.d, false)
	if cond.Reason == "" || !strings.Contains(cond.Message, "no network config") {
		t.Errorf("NetworkReady false without a config: reason %q message %q", cond.Reason, cond.Message)
	}
	n := writeNetwork(t, e)

	serverPod, serverCfg := e.pod("net-server", "runc")
	e.run(serverPod, serverCfg, e.ctrConfig("server", "sh", "-c", "while true; do echo hello-over-cni | nc -l -p 8080; done"))
	ip := podIP(t, e.d, serverPod)
	if !strings.HasPrefix(ip, strings.TrimSuffix(n.subnet, "0/24")) {
		t.Fatalf("pod IP %q not from the CNI subnet %s", ip, n.subnet)
	}
	var clientIPs []string
	for _, handler := range append(slices.Clone(suiteHandlers), "runsc-debian") {
		clientPod, clientCfg := e.pod("net-client-"+handler, handler)
		client := e.run(clientPod, clientCfg, e.ctrConfig("client", "sleep", "1000"))
		cip := podIP(t, e.d, clientPod)
		if cip == "" || cip == ip {
			t.Errorf("%s client pod IP %q", handler, cip)
		}
		clientIPs = append(clientIPs, cip)
		// Whose network stack answers for the pod's address: gVisor's own (the current
		// runsc takes the address off the host kernel's interface), or the host kernel's
		// in the pod's namespace (runc, and Debian's runsc run with --network=host).
		st, err := e.d.RS.PodSandboxStatus(ctxT(t), clientPod, true)
		if err != nil {
			t.Fatal(err)
		}
		addrs, _ := exec.Command("nsenter", "--net="+decodeInfo(t, st.Info).Metadata.NetNS, "ip", "-o", "addr", "show", "eth0").Output()
		if hostStack := strings.Contains(string(addrs), "inet "+cip+"/"); hostStack == (handler == "runsc") {
			t.Errorf("%s: the host kernel's eth0 in the pod's namespace has the pod address: %v, want %v (%s)", handler, hostStack, handler != "runsc", addrs)
		}
		var out string
		waitFor(t, 20*time.Second, handler+" pod to reach the server pod by IP", func() (bool, string) {
			stdout, _, err := e.d.RS.ExecSync(ctxT(t), client, []string{"nc", ip, "8080"}, 5*time.Second)
			out = strings.TrimSpace(string(stdout))
			return err == nil && out == "hello-over-cni", fmt.Sprintf("%q %v", out, err)
		})
		if err := e.d.RS.StopPodSandbox(ctxT(t), clientPod); err != nil {
			t.Fatal(err)
		}
		if got := podIP(t, e.d, clientPod); got != "" {
			t.Errorf("stopped pod still reports IP %q", got)
		}
		if err := e.d.RS.RemovePodSandbox(ctxT(t), clientPod); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.allocations(); len(got) != 1 || got[0] != ip {
		t.Errorf("IP allocations after the clients left: %v, want only the server's %s", got, ip)
	}
	// CNI DEL undid everything, the bridge's masquerade rules of gVisor's pods included.
	rules, _ := exec.Command("iptables-save", "-t", "nat").Output()
	for _, cip := range clientIPs {
		if strings.Contains(string(rules), cip+"/") {
			t.Errorf("iptables rules of the removed pod %s left", cip)
		}
	}

	// hostPort: a pod's port reachable on the node through portmap.
	hostPort := int32(18000 + int(netSeq))
	cfg := podConfig("net-hostport2", runtimeapi.NamespaceMode_CONTAINER)
	cfg.LogDirectory = filepath.Join(e.logs, "net-hostport2")
	cfg.PortMappings = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: hostPort}}
	hp, err := e.d.RS.RunPodSandbox(ctxT(t), cfg, "runc")
	if err != nil {
		t.Fatal(err)
	}
	e.run(hp, cfg, e.ctrConfig("hp-server", "sh", "-c", "while true; do echo hello-via-hostport | nc -l -p 8080; done"))
	waitFor(t, 20*time.Second, "the hostPort to answer on the node", func() (bool, string) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", n.gateway, hostPort), 2*time.Second)
		if err != nil {
			return false, err.Error()
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		k, _ := c.Read(buf)
		return strings.TrimSpace(string(buf[:k])) == "hello-via-hostport", string(buf[:k])
	})

	for _, p := range []string{serverPod, hp} {
		if err := e.d.RS.RemovePodSandbox(ctxT(t), p); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.allocations(); len(got) != 0 {
		t.Errorf("IP allocations left: %v", got)
	}
	if v := n.veths(); v != 0 {
		t.Errorf("%d veths left on bridge %s", v, n.bridge)
	}
	out, _ := exec.Command("iptables-save").Output()
	if strings.Contains(string(out), fmt.Sprintf("--dport %d", hostPort)) {
		t.Errorf("hostPort %d rules left in iptables", hostPort)
	}
}

// A host-network pod skips CNI and sees the node's interfaces.
func TestHostNetworkPodSkipsCNI(t *testing.T) {
	e := newContainerEnv(t)
	n := writeNetwork(t, e)
	cfg := podConfig("hostnet", runtimeapi.NamespaceMode_CONTAINER)
	cfg.LogDirectory = filepath.Join(e.logs, "hostnet")
	cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	id, err := e.d.RS.RunPodSandbox(ctxT(t), cfg, "runc")
	if err != nil {
		t.Fatal(err)
	}
	if ip := podIP(t, e.d, id); ip != "" || len(n.allocations()) != 0 {
		t.Errorf("host-network pod got CNI address %q (%v)", ip, n.allocations())
	}
	ctr := e.run(id, cfg, e.ctrConfig("look", "sleep", "1000"))
	out, _ := e.exec(ctr, "cat", "/proc/net/dev")
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Name != "lo" && !strings.Contains(out, i.Name+":") {
			t.Errorf("host-network container does not see the node's interface %s:\n%s", i.Name, out)
		}
	}
}

// CNI DEL works after a daemon restart (kill -9), with the config removed meanwhile.
func TestCNIDelAfterRestart(t *testing.T) {
	e := newContainerEnv(t)
	n := writeNetwork(t, e)
	id, _ := e.pod("net-restart", "runc")
	if ip := podIP(t, e.d, id); ip == "" {
		t.Fatal("no pod IP")
	}
	e.d.Kill()
	if err := os.Remove(filepath.Join(e.d.Dir, "cni", "10-test.conflist")); err != nil {
		t.Fatal(err)
	}
	e.d.Start()
	if err := e.d.RS.StopPodSandbox(ctxT(t), id); err != nil {
		t.Fatalf("stop after restart without the config: %v", err)
	}
	if got := n.allocations(); len(got) != 0 {
		t.Errorf("IP not released by DEL after restart: %v", got)
	}
	if v := n.veths(); v != 0 {
		t.Errorf("%d veths left", v)
	}
	if err := e.d.RS.StopPodSandbox(ctxT(t), id); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// A broken config keeps NetworkReady false and says why; a plugin that fails at ADD fails
// RunPodSandbox with its message and leaves no netns, allocation or half-made sandbox.
func TestCNIFailures(t *testing.T) {
	e := newContainerEnv(t)
	dir := filepath.Join(e.d.Dir, "cni")
	if err := os.WriteFile(filepath.Join(dir, "05-broken.conflist"), []byte(`{"cniVersion": "1.0.0", "name": "broken", "plugins": [{"type": "no-such-plugin"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cond := waitNetworkReady(t, e.d, false)
	waitFor(t, 10*time.Second, "the broken config to be reported", func() (bool, string) {
		cond = waitNetworkReady(t, e.d, false)
		return strings.Contains(cond.Message, "05-broken.conflist") && strings.Contains(cond.Message, "no-such-plugin"), cond.Message
	})
	_ = os.Remove(filepath.Join(dir, "05-broken.conflist"))

	// Valid to load, fails at ADD: a bridge name longer than the kernel allows.
	ipam := filepath.Join(e.d.Dir, "ipam")
	conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "rtshimd-test", "plugins": [
  {"type": "bridge", "bridge": "a-bridge-name-far-too-long", "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.214.9.0/24"}]]}}]}`, ipam)
	if err := os.WriteFile(filepath.Join(dir, "10-failing.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	waitNetworkReady(t, e.d, true)
	cfg := podConfig("net-fail", runtimeapi.NamespaceMode_CONTAINER)
	_, err := e.d.RS.RunPodSandbox(ctxT(t), cfg, "runc")
	if err == nil || !strings.Contains(err.Error(), "rtshimd-test") || !strings.Contains(err.Error(), "ADD") {
		t.Fatalf("RunPodSandbox with a failing plugin: %v; want the network, the step and the plugin's message", err)
	}
	t.Logf("plugin failure as the user sees it: %s", status.Convert(err).Message())
	if status.Code(err) == codes.OK {
		t.Error("no error code")
	}
	assertNoSandboxes(t, e.d)
	entries, _ := os.ReadDir(filepath.Join(ipam, "rtshimd-test"))
	for _, en := range entries {
		if net.ParseIP(en.Name()) != nil {
			t.Errorf("IP %s left allocated by the failed ADD", en.Name())
		}
	}
}

// A handler can name its own CNI network: its pods get addresses from that network, the
// others from the default one.
func TestHandlerOwnNetwork(t *testing.T) {
	d := newDaemon(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Handlers["runc-isolated"] = &config.Handler{RuntimePath: "/usr/sbin/runc", CNINetwork: "rtshimd-isolated"}
	}))
	ipam := filepath.Join(d.Dir, "ipam")
	write := func(file, name, bridge, subnet string) {
		conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]]}}]}`, name, bridge, ipam, subnet)
		if err := os.WriteFile(filepath.Join(d.Dir, "cni", file), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "link", "delete", bridge).Run() })
	}
	var b [2]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	write("10-default.conflist", "rtshimd-default", "rtdf"+suffix, "10.215.1.0/24")
	write("20-isolated.conflist", "rtshimd-isolated", "rtis"+suffix, "10.215.2.0/24")
	waitNetworkReady(t, d, true)
	for _, tc := range []struct{ handler, prefix string }{{"runc", "10.215.1."}, {"runc-isolated", "10.215.2."}} {
		id, err := d.RS.RunPodSandbox(ctxT(t), podConfig("own-net-"+tc.handler, runtimeapi.NamespaceMode_CONTAINER), tc.handler)
		if err != nil {
			t.Fatalf("%s: %v", tc.handler, err)
		}
		if ip := podIP(t, d, id); !strings.HasPrefix(ip, tc.prefix) {
			t.Errorf("%s pod IP %q, want one from %s0/24", tc.handler, ip, tc.prefix)
		}
		if err := d.RS.RemovePodSandbox(ctxT(t), id); err != nil {
			t.Fatal(err)
		}
	}
	removeTestCgroups(t)
}
