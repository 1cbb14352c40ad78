//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/vishvananda/netns"

	"github.com/rtshimd/rtshimd/internal/oci"
)

// systemdNode is a Kubernetes node as kind makes one: a container whose PID 1 is systemd,
// run here by runc from a Debian 12 root made of Debian's packages (hack/tools.sh
// systemd-node-rootfs). It has its own PID, mount, network, IPC, UTS and cgroup namespaces,
// all the capabilities this host's root has and every device cgroup permission, as a
// privileged kind node does. The repository is at /src (read-only), hack/tools.sh's
// binaries at the same path as here.
type systemdNode struct {
	t        *testing.T
	ID       string
	Dir      string // the bundle: config.json, rootfs/, runc's state, the console log
	Rootfs   string
	runcRoot string
	Pid      int    // systemd, as seen from here
	Cgroup   string // the node's cgroup, below every hierarchy's root
}

// nodeEnv is PATH for commands run in the node.
const nodePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// startSystemdNode unpacks the node's root, starts it and waits until systemd reports the
// system running. Its cleanup halts systemd, deletes the container and fails the test on
// anything of the node left here (mounts, cgroups, processes).
func startSystemdNode(t *testing.T, repo string) *systemdNode {
	t.Helper()
	dir := t.TempDir()
	id := fmt.Sprintf("rtshimd-node-%d", time.Now().UnixNano()%1e9)
	n := &systemdNode{t: t, ID: id, Dir: dir, Rootfs: filepath.Join(dir, "rootfs"),
		runcRoot: filepath.Join(dir, "runc"), Cgroup: "/" + id}
	if err := os.MkdirAll(n.Rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	tar := toolFile(t, "systemd-node-rootfs.tar")
	if out, err := exec.Command("tar", "-C", n.Rootfs, "--numeric-owner", "-xf", tar).CombinedOutput(); err != nil {
		t.Fatalf("unpack the node's root %s: %v\n%s", tar, err, out)
	}
	spec := n.spec(repo)
	b, err := json.MarshalIndent(spec, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	console, err := os.Create(filepath.Join(dir, "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	cmd := exec.Command("runc", "--root", n.runcRoot, "run", "--detach", "--pid-file", filepath.Join(dir, "pid"), id)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, console, console
	t.Cleanup(func() { removeCgroupTree(n.Cgroup) }) // after stop; also if runc failed half-way
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(console.Name())
		t.Fatalf("runc run the node: %v\n%s", err, out)
	}
	t.Cleanup(n.stop)
	pid, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(string(pid), &n.Pid); err != nil {
		t.Fatalf("node pid %q: %v", pid, err)
	}
	// "running": every unit started; "degraded": some failed, which the test must see.
	// Until systemd has made its socket, systemctl cannot reach it.
	var state string
	waitFor(t, 2*time.Minute, "the node's systemd to answer", func() (bool, string) {
		state, _ = n.Exec(2*time.Minute, "systemctl", "is-system-running", "--wait")
		return !strings.Contains(state, "Failed to connect to bus"), state
	})
	if strings.TrimSpace(state) != "running" {
		failed, _ := n.Exec(time.Minute, "systemctl", "--failed", "--no-pager")
		t.Fatalf("the node's systemd is %q, not running:\n%s", strings.TrimSpace(state), failed)
	}
	return n
}

func (n *systemdNode) spec(repo string) *specs.Spec {
	caps := oci.GrantableCapabilities() // all root has here (not CAP_SYS_RESOURCE)
	mode := func(m os.FileMode) *os.FileMode { return &m }
	zero := uint32(0)
	return &specs.Spec{
		Version:  specs.Version,
		Hostname: "rtshimd-node",
		Process: &specs.Process{
			Args: []string{"/sbin/init"},
			// container=: systemd knows it runs in a container (no getty, no udev).
			Env:  []string{"container=rtshimd-node", nodePath},
			Cwd:  "/",
			User: specs.User{UID: 0, GID: 0},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
		},
		Root: &specs.Root{Path: "rootfs"},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "rw"}},
			// With its own cgroup namespace runc mounts each hierarchy afresh, rooted at the
			// node's cgroup, writable: systemd manages the node's tree as its own.
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "rw"}},
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev"}},
			{Destination: "/src", Type: "bind", Source: repo, Options: []string{"rbind", "ro"}},
			{Destination: filepath.Join(toolsDir(), "bin"), Type: "bind", Source: filepath.Join(toolsDir(), "bin"), Options: []string{"rbind", "ro"}},
		},
		Linux: &specs.Linux{
			// No network namespace path: a new one, with only lo (systemd brings it up).
			Namespaces:  []specs.LinuxNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "network"}, {Type: "cgroup"}},
			CgroupsPath: n.Cgroup,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}},
			},
			// kubelet's OOM watcher reads the kernel log; FUSE for pods that want it.
			Devices: []specs.LinuxDevice{
				{Path: "/dev/kmsg", Type: "c", Major: 1, Minor: 11, FileMode: mode(0o640), UID: &zero, GID: &zero},
				{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229, FileMode: mode(0o666), UID: &zero, GID: &zero},
			},
		},
	}
}

// Exec runs a command in the node (runc exec) and returns its output.
func (n *systemdNode) Exec(limit time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "runc", append([]string{"--root", n.runcRoot, "exec", "--env", nodePath, n.ID}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in the node: %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// MustExec runs a command in the node and fails the test if it fails.
func (n *systemdNode) MustExec(args ...string) string {
	n.t.Helper()
	out, err := n.Exec(5*time.Minute, args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// Path is a path of the node's root as seen from here (not below its own mounts, /run and
// /tmp: those are reached through /proc/<pid>/root).
func (n *systemdNode) Path(p string) string { return filepath.Join(n.Rootfs, p) }

// LivePath reaches any path of the running node, its tmpfs mounts included.
func (n *systemdNode) LivePath(p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.Pid), p)
}

// WriteFile writes a file into the node's root.
func (n *systemdNode) WriteFile(p, content string) {
	n.t.Helper()
	if err := os.MkdirAll(filepath.Dir(n.Path(p)), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(n.Path(p), []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// Cgroupfs is the directory of the node's cgroup rel in a v1 controller, as seen from here.
func (n *systemdNode) Cgroupfs(controller, rel string) string {
	return filepath.Join("/sys/fs/cgroup", controller, n.Cgroup, rel)
}

// Unit reads properties of a systemd unit in the node (systemctl show).
func (n *systemdNode) Unit(name string, props ...string) map[string]string {
	n.t.Helper()
	args := []string{"systemctl", "show", name}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	out := n.MustExec(args...)
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// inNetns runs f on an OS thread in the network namespace of pid: a socket made there stays
// in that namespace whichever thread uses it afterwards.
func inNetns(pid int, f func() error) error {
	return inNetnsOf(func() (netns.NsHandle, error) { return netns.GetFromPid(pid) }, f)
}

// inNetnsPath is inNetns for the namespace at path (ip netns's /run/netns/NAME).
func inNetnsPath(path string, f func() error) error {
	return inNetnsOf(func() (netns.NsHandle, error) { return netns.GetFromPath(path) }, f)
}

func inNetnsOf(open func() (netns.NsHandle, error), f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := open()
	if err != nil {
		return err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return err
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// The thread cannot go back to the pool in the other namespace.
			panic(fmt.Sprintf("return to the test's network namespace: %v", err))
		}
	}()
	return f()
}

// Forward serves addr (host:port) inside the node by forwarding each connection to the
// same address here: the test's registry on 127.0.0.1 has the same name in the node.
func (n *systemdNode) Forward(addr string) {
	n.t.Helper()
	var l net.Listener
	if err := inNetns(n.Pid, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		n.t.Fatalf("listen on %s in the node: %v", addr, err)
	}
	serveForward(n.t, l, addr)
}

// serveForward copies each connection l accepts to a connection to target made here, until
// the test ends.
func serveForward(t testing.TB, l net.Listener, target string) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
}

// HTTPClient reaches servers on the node's loopback (kubelet's API).
func (n *systemdNode) HTTPClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // kubelet's self-signed serving cert
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := inNetns(n.Pid, func() (err error) { c, err = (&net.Dialer{}).DialContext(ctx, network, addr); return err })
			return c, err
		},
	}}
}

// stop halts the node as a kind node is stopped (SIGRTMIN+3: systemd's halt), deletes the
// container, and fails the test on anything of it left here.
func (n *systemdNode) stop() {
	t := n.t
	if t.Failed() {
		if out, err := n.Exec(time.Minute, "journalctl", "--no-pager", "-n", "150", "-u", "rtshimd", "-u", "kubelet"); err == nil {
			t.Logf("the node's journal (rtshimd, kubelet):\n%s", out)
		}
	}
	run := func(args ...string) (string, error) {
		out, err := exec.Command("runc", append([]string{"--root", n.runcRoot}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("kill", n.ID, "37"); err != nil { // SIGRTMIN+3
		t.Errorf("halt the node: %v %s", err, out)
	}
	deadline := time.Now().Add(90 * time.Second)
	for processAlive(n.Pid) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if processAlive(n.Pid) {
		t.Errorf("the node's systemd did not halt in 90 s; killed")
		_, _ = run("kill", n.ID, "KILL")
	}
	if out, err := run("delete", "--force", n.ID); err != nil {
		t.Errorf("delete the node: %v %s", err, out)
	}
	// Nothing of the node may be left: its mounts were in its own namespace, its processes
	// died with its PID namespace, runc removed its cgroup (systemd had emptied it).
	for _, m := range mountsUnder(n.Dir) {
		t.Errorf("mount of the node left: %s", m)
	}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + n.Cgroup)
	for _, r := range roots {
		t.Errorf("cgroup of the node left: %s", r)
	}
	removeCgroupTree(n.Cgroup)
	waitFor(t, 10*time.Second, "no process of the node", func() (bool, string) {
		procs := processesMentioning(n.Dir, 0)
		return len(procs) == 0, strings.Join(procs, "; ")
	})
	if t.Failed() {
		if b, err := os.ReadFile(filepath.Join(n.Dir, "console.log")); err == nil {
			t.Logf("the node's console:\n%s", lastLines(string(b), 40))
		}
	}
}
