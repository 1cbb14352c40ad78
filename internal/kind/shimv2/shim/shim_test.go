package shim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/monitor"
)

const shimBinary = "/usr/bin/containerd-shim-runc-v2"

// requireShim skips unless the test can run a real shim: root, the runc shim, runc and a
// static busybox for the rootfs.
func requireShim(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (the shim runs runc)")
	}
	for _, p := range []string{shimBinary, "/bin/busybox"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("needs %s (containerd and busybox-static packages): %v", p, err)
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("needs runc in PATH")
	}
}

// buildMonitor is the monitor for the logger tests: RTSHIMD_TEST_MONITOR (make unit
// names its sanitized build), or one built here under ASan+UBSan, once per test binary.
var monitorBin, monitorTemp string

func buildMonitor(t *testing.T) string {
	t.Helper()
	if monitorBin != "" {
		return monitorBin
	}
	if b := os.Getenv("RTSHIMD_TEST_MONITOR"); b != "" {
		monitorBin = b
		return b
	}
	dir, err := os.MkdirTemp("", "rtshim-monitor-")
	if err != nil {
		t.Fatal(err)
	}
	monitorTemp = dir
	cmd := exec.Command("make", "--no-print-directory", "-C", "../../../..", "monitor-sanitized", "BIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build rtshim-monitor: %v\n%s", err, out)
	}
	monitorBin = filepath.Join(dir, "rtshim-monitor-sanitized")
	return monitorBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if monitorTemp != "" {
		os.RemoveAll(monitorTemp)
	}
	os.Exit(code)
}

// makeRootfs lays out a busybox rootfs in dir.
func makeRootfs(t *testing.T, dir string) {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{bin, filepath.Join(dir, "proc"), filepath.Join(dir, "dev"), filepath.Join(dir, "sys"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sh", "echo", "sleep", "cat", "head", "dd"} {
		if err := os.Symlink("busybox", filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
}

type bundleOpts struct {
	args        []string
	annotations map[string]string
	terminal    bool
	joinPid     uint32 // join this process's network, IPC and UTS namespaces
	rootfs      string // "": <bundle>/rootfs is made here; else the shim mounts this there
}

// makeBundle writes a runc bundle named id under root and returns its path.
func makeBundle(t *testing.T, root, id string, o bundleOpts) string {
	t.Helper()
	bundle := filepath.Join(root, id)
	if err := os.MkdirAll(filepath.Join(bundle, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if o.rootfs == "" {
		makeRootfs(t, filepath.Join(bundle, "rootfs"))
	}
	ns := func(typ specs.LinuxNamespaceType, name string) specs.LinuxNamespace {
		if o.joinPid != 0 && name != "" {
			return specs.LinuxNamespace{Type: typ, Path: fmt.Sprintf("/proc/%d/ns/%s", o.joinPid, name)}
		}
		return specs.LinuxNamespace{Type: typ}
	}
	caps := []string{"CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_AUDIT_WRITE"}
	spec := specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Terminal:        o.terminal,
			Args:            o.args,
			Env:             []string{"PATH=/bin", "TERM=xterm"},
			Cwd:             "/",
			Capabilities:    &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
			NoNewPrivileges: true,
		},
		Root:        &specs.Root{Path: "rootfs"},
		Hostname:    "shimtest",
		Annotations: o.annotations,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: "/rtshimd-shimtest-" + id,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.MountNamespace},
				ns(specs.NetworkNamespace, "net"), ns(specs.IPCNamespace, "ipc"), ns(specs.UTSNamespace, "uts"),
			},
		},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return bundle
}

// testRoot is a short directory for bundles, removed at the end.
func testRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "shimtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if leftMounts(root) == nil {
			os.RemoveAll(root)
		}
	})
	return root
}

func sandboxAnnotations(sandboxID string) map[string]string {
	return map[string]string{"io.kubernetes.cri.container-type": "sandbox", "io.kubernetes.cri.sandbox-id": sandboxID}
}

func containerAnnotations(sandboxID string) map[string]string {
	return map[string]string{"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": sandboxID}
}

func testID(t *testing.T, prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e6)
}

// processesWith lists the pids whose command line contains every one of words.
func processesWith(words ...string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 || zombie(pid) {
			continue
		}
		cmd := string(b)
		all := true
		for _, w := range words {
			all = all && strings.Contains(cmd, w)
		}
		if all {
			pids = append(pids, pid)
		}
	}
	return pids
}

// parentOf returns a process's parent pid (0 if unknown).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	var state string
	var ppid int
	if i < 0 {
		return 0
	}
	_, _ = fmt.Sscan(string(b[i+1:]), &state, &ppid) // zero if unparsable
	return ppid
}

// leftMounts lists mount points under dir.
func leftMounts(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// leftCgroups lists the cgroup directories of the container ids that still exist.
func leftCgroups(ids ...string) []string {
	var out []string
	ctrls, _ := filepath.Glob("/sys/fs/cgroup/*")
	ctrls = append(ctrls, "/sys/fs/cgroup")
	for _, c := range ctrls {
		for _, id := range ids {
			p := filepath.Join(c, "rtshimd-shimtest-"+id)
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// assertNothingLeft checks that no trace of the shim and its containers remains.
func assertNothingLeft(t *testing.T, cfg Config, socket, root string, ids ...string) {
	t.Helper()
	if pids := processesWith(shimBinary, "-id\x00"+cfg.ID+"\x00"); len(pids) > 0 {
		t.Errorf("shim processes left: %v", pids)
	}
	if pids := processesWith(root); len(pids) > 0 {
		t.Errorf("processes with %s in their command line left: %v", root, pids)
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("shim socket %s left (stat: %v)", socket, err)
	}
	if m := leftMounts(root); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if cg := leftCgroups(ids...); len(cg) > 0 {
		t.Errorf("cgroups left: %v", cg)
	}
	for _, id := range ids {
		state := filepath.Join("/run/containerd/runc", cfg.Namespace, id)
		if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("runc state %s left (stat: %v)", state, err)
		}
	}
	for _, name := range []string{AddressFile, PidFile, TaskFile} {
		if _, err := os.Stat(filepath.Join(cfg.Bundle, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in the bundle", name)
		}
	}
}

// openFifoReader makes a FIFO and reads all of it in the background; the shim opens
// its writing end at the exec's start.
func openFifoReader(t *testing.T, path string) <-chan string {
	t.Helper()
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1)
	go func() {
		f, err := os.Open(path) // blocks until the shim opens it for writing
		if err != nil {
			ch <- "open: " + err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		ch <- string(b)
	}()
	return ch
}

type logEntry struct{ stream, tag, text string }

// readCRILog parses a CRI log file.
func readCRILog(t *testing.T, path string) []logEntry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read CRI log: %v", err)
	}
	var out []logEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) != 4 {
			t.Fatalf("malformed CRI log line %q", sc.Text())
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Fatalf("CRI log line %q: %v", sc.Text(), err)
		}
		out = append(out, logEntry{f[1], f[2], f[3]})
	}
	return out
}

func hasEntry(entries []logEntry, stream, text string) bool {
	for _, e := range entries {
		if e.stream == stream && strings.Contains(e.text, text) {
			return true
		}
	}
	return false
}

// readFramesUntil reads attach frames until one's text contains want.
func readFramesUntil(t *testing.T, conn net.Conn, want string) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var seen strings.Builder
	for {
		kind, payload, err := monitor.ReadFrame(conn)
		if err != nil {
			t.Fatalf("attach: waiting for %q: %v; got %q", want, err, seen.String())
		}
		if kind == monitor.FrameStdout || kind == monitor.FrameStderr {
			seen.Write(payload)
		}
		if strings.Contains(seen.String(), want) {
			return seen.String()
		}
	}
}

// loggerDir prepares a logger directory with its config and returns it and its URI.
func loggerDir(t *testing.T, root, name string, cfg monitor.LoggerConfig) (string, string) {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := monitor.WriteLoggerConfig(dir, cfg); err != nil {
		t.Fatal(err)
	}
	return dir, monitor.LoggerURI(buildMonitor(t), dir)
}

func TestShimLifecycle(t *testing.T) {
	requireShim(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := testRoot(t)
	rootfs := filepath.Join(root, "rootfs-src")
	makeRootfs(t, rootfs)

	sbID, ctrID := testID(t, "sb"), testID(t, "ctr")
	sbBundle := makeBundle(t, root, sbID, bundleOpts{args: []string{"sleep", "1000"}, annotations: sandboxAnnotations(sbID)})
	var evlog eventLog
	evsock := filepath.Join(root, "events.sock")
	evserver, err := ServeEvents(evsock, evlog.add)
	if err != nil {
		t.Fatal(err)
	}
	defer evserver.Close()
	cfg := Config{Binary: shimBinary, ID: sbID, Bundle: sbBundle, TTRPCAddress: evsock}
	c, socket := startShim(ctx, t, cfg, sbID, sbBundle, ctrID, filepath.Join(root, ctrID))
	t.Logf("shim pid %d at %s", c.Pid(), c.Address())
	if c.Pid() <= 0 {
		t.Errorf("Pid() = %d", c.Pid())
	}
	defer func() {
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(sbBundle, LogFile)); err == nil {
				t.Logf("shim.log:\n%s", b)
			}
		}
	}()

	// Starting it again reaches the same shim.
	c2, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if c2.Pid() != c.Pid() {
		t.Errorf("second Start reached pid %d, want %d", c2.Pid(), c.Pid())
	}
	c2.Close()

	sbPid, err := c.Create(ctx, CreateOptions{ID: sbID, Bundle: sbBundle})
	if err != nil {
		t.Fatalf("Create sandbox: %v", err)
	}
	// runc's shim reports a second create with the same id as Unknown, so no errdefs kind.
	if _, err := c.Create(ctx, CreateOptions{ID: sbID, Bundle: sbBundle}); err == nil {
		t.Errorf("Create again succeeded")
	}
	if pid, err := c.Start(ctx, sbID, ""); err != nil || pid != sbPid {
		t.Fatalf("Start sandbox: pid %d, %v (create said %d)", pid, err, sbPid)
	}
	if st, err := c.State(ctx, sbID, ""); err != nil || st.Status != "running" || st.Pid != sbPid {
		t.Errorf("State sandbox = %+v, %v", st, err)
	}
	if _, err := c.State(ctx, "nonexistent", ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State of an unknown task: %v, want NotFound", err)
	}

	// A container of the pod, in the same shim, logging through rtshim-monitor logger.
	ctrBundle := makeBundle(t, root, ctrID, bundleOpts{
		args:        []string{"sh", "-c", "echo hello; echo oops >&2; i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"},
		annotations: containerAnnotations(sbID), joinPid: sbPid, rootfs: rootfs,
	})
	logPath := filepath.Join(root, "ctr.log")
	logDir, uri := loggerDir(t, root, "ctr-logger", monitor.LoggerConfig{LogPath: logPath})
	if _, err := c.Create(ctx, CreateOptions{ID: ctrID, Bundle: ctrBundle, Stdout: uri, Stderr: uri,
		Rootfs: []Mount{{Type: "bind", Source: rootfs, Options: []string{"rbind", "ro"}}}}); err != nil {
		t.Fatalf("Create container: %v", err)
	}
	if m := leftMounts(ctrBundle); len(m) != 1 {
		t.Errorf("mounts under the container's bundle after create: %v, want its rootfs", m)
	}
	if _, err := c.Start(ctx, ctrID, ""); err != nil {
		t.Fatalf("Start container: %v", err)
	}
	// The logger is the shim's child: it needs nothing of the daemon.
	if pids := processesWith(logDir); len(pids) != 1 || parentOf(pids[0]) != c.Pid() {
		t.Errorf("logger processes %v, want one, a child of the shim %d", pids, c.Pid())
	}
	att, err := monitor.Attach(ctx, logDir)
	if err != nil {
		t.Fatalf("attach to the logger: %v", err)
	}
	readFramesUntil(t, att, "tick 3")
	// kubelet rotates the log and asks for a reopen.
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := monitor.Command(ctx, logDir, monitor.CmdReopen); err != nil {
		t.Errorf("reopen: %v", err)
	}
	readFramesUntil(t, att, "tick 6")
	if err := monitor.Command(ctx, logDir, monitor.CmdStart); err == nil {
		t.Errorf("the logger accepted %q", monitor.CmdStart)
	}

	// A daemon restart: a new connection from the bundle's address file.
	c.Close()
	if _, err := c.State(ctx, sbID, ""); err == nil || errors.Is(err, ErrShimDied) {
		t.Errorf("State on a closed client: %v, want a client-closed error", err)
	}
	if c, err = Connect(ctx, cfg); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer c.Close()

	// Exec with FIFOs.
	outFifo, errFifo := filepath.Join(root, "exec-out"), filepath.Join(root, "exec-err")
	outCh, errCh := openFifoReader(t, outFifo), openFifoReader(t, errFifo)
	proc := &specs.Process{Args: []string{"sh", "-c", "echo exec-out; echo exec-err >&2; exit 3"}, Env: []string{"PATH=/bin"}, Cwd: "/"}
	if err := c.Exec(ctx, ExecOptions{ID: ctrID, ExecID: "exec1", Process: proc, Stdout: outFifo, Stderr: errFifo}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if _, err := c.Start(ctx, ctrID, "exec1"); err != nil {
		t.Fatalf("Start exec: %v", err)
	}
	if e, err := c.Wait(ctx, ctrID, "exec1"); err != nil || e.Status != 3 || e.ExitedAt.IsZero() {
		t.Errorf("Wait exec = %+v, %v; want status 3", e, err)
	}
	if out, errOut := <-outCh, <-errCh; out != "exec-out\n" || errOut != "exec-err\n" {
		t.Errorf("exec output %q, %q", out, errOut)
	}
	if _, err := c.Delete(ctx, ctrID, "exec1"); err != nil {
		t.Errorf("Delete exec: %v", err)
	}
	if e, ok := evlog.waitExit(t, ctrID, "exec1"); !ok || e.Exit.Status != 3 || e.Pid == 0 || e.Namespace != DefaultNamespace {
		t.Errorf("exit event of the exec: %+v (%v)", e, ok)
	}

	st, err := c.Stats(ctx, ctrID)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	t.Logf("stats: %+v", st)
	if st.CPUUsageNanos == 0 || st.MemoryUsage == 0 || st.WorkingSet == 0 || st.Processes == 0 || st.PageFaults == 0 {
		t.Errorf("Stats = %+v, want CPU, memory, working set, processes and page faults", st)
	}
	limit := int64(64 << 20)
	if err := c.Update(ctx, ctrID, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if st, err := c.Stats(ctx, ctrID); err != nil || st.MemoryLimit != uint64(limit) {
		t.Errorf("memory limit after Update = %d (%v), want %d", st.MemoryLimit, err, limit)
	}

	if err := c.Kill(ctx, ctrID, "", syscall.SIGKILL, false); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if e, err := c.Wait(ctx, ctrID, ""); err != nil || e.Status != 137 {
		t.Errorf("Wait after SIGKILL = %+v, %v; want 137", e, err)
	}
	if st, err := c.State(ctx, ctrID, ""); err != nil || st.Status != "stopped" || st.ExitStatus != 137 {
		t.Errorf("State after exit = %+v, %v", st, err)
	}
	shutdownWait = time.Second
	err = c.Shutdown(ctx)
	shutdownWait = 10 * time.Second
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Shutdown with tasks left: %v, want FailedPrecondition", err)
	}
	if e, err := c.Delete(ctx, ctrID, ""); err != nil || e.Status != 137 {
		t.Errorf("Delete container = %+v, %v", e, err)
	}
	if _, err := os.Stat(filepath.Join(ctrBundle, TaskFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left in the container's bundle after Delete (reconnected client): %v", TaskFile, err)
	}
	if e, ok := evlog.waitExit(t, ctrID, ctrID); !ok || e.Exit.Status != 137 || e.Exit.ExitedAt.IsZero() {
		t.Errorf("exit event of the container: %+v (%v)", e, ok)
	}
	// The logger ends with the output: the attach session ends, the socket goes.
	_ = att.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.Copy(io.Discard, att); err != nil {
		t.Errorf("attach session did not end: %v", err)
	}
	att.Close()
	rotated, current := readCRILog(t, logPath+".1"), readCRILog(t, logPath)
	if !hasEntry(rotated, "stdout", "hello") || !hasEntry(rotated, "stderr", "oops") {
		t.Errorf("rotated CRI log lacks the first lines: %v", rotated)
	}
	if !hasEntry(current, "stdout", "tick") || hasEntry(current, "stdout", "hello") {
		t.Errorf("CRI log after reopen: %v", current)
	}
	// Every tick is in one of the two, in order.
	next := 0
	for _, e := range append(rotated, current...) {
		if strings.HasPrefix(e.text, "tick ") {
			if e.text != fmt.Sprintf("tick %d", next) {
				t.Errorf("CRI log has %q, want tick %d", e.text, next)
			}
			next++
		}
	}
	if next < 7 {
		t.Errorf("CRI logs have %d ticks, want at least 7", next)
	}
	waitNoProcess(t, logDir)
	if _, err := os.Stat(filepath.Join(logDir, monitor.SocketFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("logger socket left: %v", err)
	}

	if b, _ := os.ReadFile(filepath.Join(sbBundle, LogFile)); bytes.Contains(b, []byte("post event")) || bytes.Contains(b, []byte("forward event")) {
		t.Errorf("the shim logged trouble with events while they were served:\n%s", b)
	}

	// The daemon is down: events are refused, which must not slow the shim.
	evserver.Close()
	began := time.Now()
	if err := c.Kill(ctx, sbID, "", syscall.SIGKILL, true); err != nil {
		t.Fatalf("Kill sandbox: %v", err)
	}
	if e, err := c.Wait(ctx, sbID, ""); err != nil || e.Status != 137 {
		t.Errorf("Wait sandbox = %+v, %v", e, err)
	}
	if _, err := c.Delete(ctx, sbID, ""); err != nil {
		t.Errorf("Delete sandbox: %v", err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("kill, wait and delete took %v with the event socket refusing", d)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	assertNothingLeft(t, cfg, socket, root, sbID, ctrID)
	if _, err := c.State(ctx, sbID, ""); !errors.Is(err, ErrShimDied) {
		t.Errorf("State after Shutdown: %v, want ErrShimDied", err)
	}
	checkShimLog(t, sbBundle)
}

// cleanupOnFailure leaves nothing running after a failed test: Cleanup for each
// container (id, bundle pairs), the sandbox first.
// startShim starts the shim of cfg, with cleanupOnFailure for idBundles, and returns the
// client (closed at the test's end) and the path of its socket.
func startShim(ctx context.Context, t *testing.T, cfg Config, idBundles ...string) (*Client, string) {
	t.Helper()
	cleanupOnFailure(t, cfg, idBundles...)
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, socketPath(c.Address())
}

func cleanupOnFailure(t *testing.T, cfg Config, idBundles ...string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := 0; i+1 < len(idBundles); i += 2 {
			c := cfg
			c.ID, c.Bundle = idBundles[i], idBundles[i+1]
			if err := Cleanup(ctx, c); err != nil {
				t.Logf("cleanup after failure: %v", err)
			}
		}
	})
}

// eventLog collects the events an EventServer receives.
type eventLog struct {
	mu     sync.Mutex
	events []Event
}

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// waitExit waits for the exit event of a process.
func (l *eventLog) waitExit(t *testing.T, containerID, processID string) (Event, bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		for _, e := range l.events {
			if e.Topic == TopicTaskExit && e.ContainerID == containerID && e.ProcessID == processID {
				l.mu.Unlock()
				return e, true
			}
		}
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	return Event{}, false
}

// checkShimLog shows the shim's log and fails on signs of trouble in it.
func checkShimLog(t *testing.T, bundle string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(bundle, LogFile))
	if err != nil {
		t.Errorf("shim log: %v", err)
		return
	}
	t.Logf("shim.log (%d bytes):\n%s", len(b), b)
}

// waitNoProcess waits until no process has word in its command line.
func waitNoProcess(t *testing.T, word string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for len(processesWith(word)) > 0 {
		if time.Now().After(deadline) {
			t.Errorf("processes with %s still running: %v", word, processesWith(word))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTerminalLogger runs a container with a terminal whose output goes through the
// logger, and types into it through an attach session.
func TestTerminalLogger(t *testing.T) {
	requireShim(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := testRoot(t)
	id := testID(t, "tty")
	bundle := makeBundle(t, root, id, bundleOpts{args: []string{"sh"}, terminal: true, annotations: sandboxAnnotations(id)})
	cfg := Config{Binary: shimBinary, ID: id, Bundle: bundle}
	c, socket := startShim(ctx, t, cfg, id, bundle)

	stdin := filepath.Join(root, "stdin")
	if err := unix.Mkfifo(stdin, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(root, "tty.log")
	logDir, uri := loggerDir(t, root, "tty-logger", monitor.LoggerConfig{LogPath: logPath, Stdin: stdin, StdinOnce: true, Terminal: true})
	if _, err := c.Create(ctx, CreateOptions{ID: id, Bundle: bundle, Terminal: true, Stdin: stdin, Stdout: uri}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := c.Start(ctx, id, ""); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := c.ResizePty(ctx, id, "", 100, 40); err != nil {
		t.Errorf("ResizePty: %v", err)
	}
	att, err := monitor.Attach(ctx, logDir)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	defer att.Close()
	if err := monitor.WriteFrame(att, monitor.FrameStdin, []byte("echo size $(stty size 2>/dev/null || echo ?) sum $((40+2))\n")); err != nil {
		t.Fatal(err)
	}
	readFramesUntil(t, att, "sum 42")
	// The first client's stdin ends (StdinOnce): the logger closes its end; CloseIO
	// closes the shim's, and the shell sees the end of its input.
	if err := monitor.WriteFrame(att, monitor.FrameCloseStdin, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := c.CloseIO(ctx, id, ""); err != nil {
		t.Errorf("CloseIO: %v", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	e, err := c.Wait(wctx, id, "")
	wcancel()
	if err != nil {
		t.Errorf("the shell did not end after its stdin closed: %v", err)
		_ = c.Kill(ctx, id, "", syscall.SIGKILL, true)
		e, err = c.Wait(ctx, id, "")
	}
	t.Logf("shell exit: %+v, %v", e, err)
	if _, err := c.Delete(ctx, id, ""); err != nil {
		t.Errorf("Delete: %v", err)
	}
	waitNoProcess(t, logDir)
	if entries := readCRILog(t, logPath); !hasEntry(entries, "stdout", "sum 42") {
		t.Errorf("CRI log lacks the shell's output: %v", entries)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	assertNothingLeft(t, cfg, socket, root, id)
	checkShimLog(t, bundle)
}

// TestLoggerDrain checks that the logger takes all of a container's output, up to its
// last line, and ends promptly when the shim deletes the task.
func TestLoggerDrain(t *testing.T) {
	requireShim(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := testRoot(t)
	id := testID(t, "drain")
	const n = 3000
	bundle := makeBundle(t, root, id, bundleOpts{annotations: sandboxAnnotations(id), args: []string{"sh", "-c",
		fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo out $i; echo err $i >&2; i=$((i+1)); done", n)}})
	cfg := Config{Binary: shimBinary, ID: id, Bundle: bundle}
	c, socket := startShim(ctx, t, cfg, id, bundle)
	logPath := filepath.Join(root, "drain.log")
	logDir, uri := loggerDir(t, root, "drain-logger", monitor.LoggerConfig{LogPath: logPath})
	if _, err := c.Create(ctx, CreateOptions{ID: id, Bundle: bundle, Stdout: uri, Stderr: uri}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := c.Start(ctx, id, ""); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if e, err := c.Wait(ctx, id, ""); err != nil || e.Status != 0 {
		t.Fatalf("Wait = %+v, %v", e, err)
	}
	began := time.Now()
	if _, err := c.Delete(ctx, id, ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	// The shim waits (up to 12 s) for the logger it signals at delete.
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("Delete took %v", d)
	}
	waitNoProcess(t, logDir)
	next := map[string]int{}
	for _, e := range readCRILog(t, logPath) {
		want := fmt.Sprintf("%s %d", map[string]string{"stdout": "out", "stderr": "err"}[e.stream], next[e.stream])
		if e.tag != "F" || e.text != want {
			t.Fatalf("CRI log entry %+v, want %q", e, want)
		}
		next[e.stream]++
	}
	if next["stdout"] != n || next["stderr"] != n {
		t.Errorf("CRI log has %v lines, want %d of each stream", next, n)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	assertNothingLeft(t, cfg, socket, root, id)
	if b, err := os.ReadFile(filepath.Join(logDir, monitor.LogFile)); err == nil {
		t.Logf("logger's own log:\n%s", b)
	}
}

// TestShimDied kills the shim: calls then fail with ErrShimDied, and Cleanup leaves
// nothing behind.
func TestShimDied(t *testing.T) {
	requireShim(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := testRoot(t)
	rootfs := filepath.Join(root, "rootfs-src")
	makeRootfs(t, rootfs)
	id := testID(t, "died")
	bundle := makeBundle(t, root, id, bundleOpts{args: []string{"sleep", "1000"}, annotations: sandboxAnnotations(id), rootfs: rootfs})
	cfg := Config{Binary: shimBinary, ID: id, Bundle: bundle}
	c, socket := startShim(ctx, t, cfg, id, bundle)
	initPid, err := c.Create(ctx, CreateOptions{ID: id, Bundle: bundle,
		Rootfs: []Mount{{Type: "bind", Source: rootfs, Options: []string{"rbind", "ro"}}}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := c.Start(ctx, id, ""); err != nil {
		t.Fatalf("Start task: %v", err)
	}
	waitErr := make(chan error, 1)
	go func() { _, err := c.Wait(ctx, id, ""); waitErr <- err }()
	time.Sleep(100 * time.Millisecond)
	if err := unix.Kill(c.Pid(), unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waitErr:
		if !errors.Is(err, ErrShimDied) {
			t.Errorf("Wait when the shim died: %v, want ErrShimDied", err)
		}
		t.Logf("Wait: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return when the shim died")
	}
	if _, err := c.State(ctx, id, ""); !errors.Is(err, ErrShimDied) {
		t.Errorf("State when the shim died: %v, want ErrShimDied", err)
	}
	if _, err := Connect(ctx, cfg); !errors.Is(err, ErrShimDied) {
		t.Errorf("Connect to the dead shim: %v, want ErrShimDied", err)
	}
	if err := Cleanup(ctx, cfg); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if !zombie(int(initPid)) {
		t.Errorf("container init %d still runs after Cleanup", initPid)
	}
	assertNothingLeft(t, cfg, socket, root, id)
	if err := Cleanup(ctx, cfg); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}
	checkShimLog(t, bundle)
}

// TestCleanupWithoutTask: a shim was started but no task created (the daemon died in
// between): Cleanup still removes the shim, its socket and files, and succeeds, twice.
func TestCleanupWithoutTask(t *testing.T) {
	requireShim(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := testRoot(t)
	id := testID(t, "notask")
	bundle := makeBundle(t, root, id, bundleOpts{args: []string{"sleep", "1"}, annotations: sandboxAnnotations(id)})
	cfg := Config{Binary: shimBinary, ID: id, Bundle: bundle}
	c, socket := startShim(ctx, t, cfg, id, bundle)
	c.Close()
	for i := range 2 {
		if err := Cleanup(ctx, cfg); err != nil {
			t.Errorf("Cleanup %d: %v", i+1, err)
		}
	}
	assertNothingLeft(t, cfg, socket, root, id)
	if err := os.RemoveAll(bundle); err != nil {
		t.Fatal(err)
	}
	if err := Cleanup(ctx, cfg); err != nil {
		t.Errorf("Cleanup once the bundle is gone: %v", err)
	}
}

// A shim that could not lower its oom_score_adj fails with what it needs said.
func TestOOMScoreHint(t *testing.T) {
	err := errors.New("containerd-shim-runsc-v1 start: exit status 1: io.containerd.runsc.v1: failed to set OOM Score on shim: write /proc/8569/oom_score_adj: permission denied")
	if h := oomScoreHint(err); !strings.Contains(h, "OOMScoreAdjust=-999") || !strings.Contains(h, "CAP_SYS_RESOURCE") {
		t.Errorf("hint %q", h)
	}
	if h := oomScoreHint(errors.New("exit status 1: no such file")); h != "" {
		t.Errorf("hint for another error: %q", h)
	}
}
