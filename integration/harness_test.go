//go:build integration

// Package integration runs the built rtshimd as a real process, as root, and drives it
// through k8s.io/cri-client, the client kubelet uses, against Debian's runc and runsc.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/rtshimd/rtshimd/internal/config"
)

// cgroupRoot is the parent under every cgroup hierarchy of the pods this test binary
// starts: one per run, so concurrent runs of the suite never see each other's cgroups.
var cgroupRoot = fmt.Sprintf("rtshimd-test-%d", os.Getpid())

// binDir holds rtshimd, rtshim-monitor and rtshim-pause, built once by TestMain.
var binDir string

// monitorBin is the monitor the daemons are configured with (monitor_path): the one built
// from cmd/rtshim-monitor into binDir (make monitor), or the binary RTSHIMD_TEST_MONITOR
// names (its sanitized build, say).
var monitorBin string

func init() {
	// The main goroutine keeps the main thread, as the daemon's does: a goroutine that ends
	// locked in another namespace (pinnedPods enters the pin home's) ends its thread, but
	// the main thread cannot be ended, and /proc/self/mountinfo shows the main thread's
	// mount namespace: left in the pin home, every later mount check of the run read the
	// home's table (seen: rootfs "not mounted" in six tests of one run).
	runtime.LockOSThread()
}

func TestMain(m *testing.M) {
	if sock := os.Getenv(listFloorEnv); sock != "" {
		// BenchmarkScale's list floor, a server in a process of its own.
		if err := serveListFloor(sock); err != nil {
			fmt.Println("list floor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		fmt.Println("integration tests need root (namespaces, mounts, cgroups); skipping")
		os.Exit(0)
	}
	if dir := os.Getenv("RTSHIMD_TEST_BIN"); dir != "" {
		// Binaries built beforehand (make build's bin/): where no Go toolchain runs, as
		// in the cgroup-v2 node (TestInV2Node). No failpoints in them.
		binDir, monitorBin = dir, filepath.Join(dir, "rtshim-monitor")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "rtshimd-bin-")
	if err != nil {
		panic(err)
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	for _, b := range []struct {
		pkg    string
		static bool
	}{{"./cmd/rtshimd", false}, {"./cmd/rtshim-pause", true}} {
		// failpoints: the suite's daemon can be told to fail named steps (internal/failpoint).
		cmd := exec.Command("go", "build", "-tags", "containers_image_openpgp,exclude_graphdriver_btrfs,failpoints", "-o", dir, b.pkg)
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if b.static {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if err := cmd.Run(); err != nil {
			fmt.Println("build", b.pkg, "failed:", err)
			os.Exit(1)
		}
	}
	binDir = dir
	cmd := exec.Command("make", "--no-print-directory", "monitor", "BIN="+dir)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Println("build the monitor failed:", err)
		os.Exit(1)
	}
	monitorBin = filepath.Join(dir, "rtshim-monitor")
	if env := os.Getenv("RTSHIMD_TEST_MONITOR"); env != "" {
		monitorBin = env
	}
	fmt.Println("monitor:", monitorBin)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Daemon is one rtshimd process with its own config, state and run roots.
type Daemon struct {
	// Env is added to the daemon's environment at its next Start (failpoints).
	Env []string
	// Bin, when set, is the daemon binary the next Start runs (an earlier release's).
	Bin    string
	t      testing.TB
	Dir    string // holds config.toml, state/, run/, daemon.log
	Config string
	// Cfg is the config the file was written from (WriteConfig writes it again).
	Cfg     *config.Config
	Socket  string
	RunRoot string
	State   string
	// tmpfsRun: RunRoot is a tmpfs the harness mounted (benchmarks).
	tmpfsRun bool
	cmd      *exec.Cmd
	logf     *os.File
	exited   chan struct{}
	RS       internalapi.RuntimeService
	IS       internalapi.ImageManagerService
}

// suiteHandlers are the handlers the shared pod and container suites run on, one of each
// kind: runc (oci), runsc (oci-sandbox) and containerd's runc shim (shim-v2).
var suiteHandlers = []string{"runc", "runsc", "runc-shim"}

// suiteTable is the table the tests run with: Debian's runc, the pinned current runsc
// (hack/tools.sh) and Debian's 2022 runsc, containerd's runc shim v2 (Debian's containerd
// package; its daemon is not used), gVisor's shim v2 at the pinned runsc's version, plus a
// handler whose binary is missing. run is the daemon's run root.
func suiteTable(run string) map[string]*config.Handler {
	yes, no := true, false
	return map[string]*config.Handler{
		"runc": {RuntimePath: "/usr/sbin/runc", RuntimeRoot: run + "/runc"},
		"runc-shim": {RuntimeType: "shim-v2", RuntimePath: "/usr/bin/containerd-shim-runc-v2",
			Features: config.Declared{HostPID: &yes, HostIPC: &yes, RecursiveReadOnlyMounts: &yes}},
		"runsc": {RuntimeType: "oci-sandbox", RuntimePath: "/usr/local/bin/runsc", RuntimeRoot: run + "/runsc",
			RuntimeArgs: []string{"--oci-seccomp"}, Overhead: config.Overhead{Memory: "64Mi", CPU: "100m"}},
		// gVisor's own shim: a sandboxing shim, one per pod, the pod's containers in one
		// gVisor sandbox, as Kata's shim.
		"runsc-shim": {RuntimeType: "shim-v2", RuntimePath: "/usr/local/bin/containerd-shim-runsc-v1",
			Features: config.Declared{HostNetwork: &no, HostPID: &no, HostIPC: &no}},
		"runsc-debian": {RuntimeType: "oci-sandbox", RuntimePath: "/usr/bin/runsc", RuntimeRoot: run + "/runsc-debian"},
		"ghost":        {RuntimePath: "/opt/rtshimd-test/no-such-runtime"},
	}
}

// daemonSetup is what a test daemon starts with: its config as Go values (internal/config's
// own types, so that no test can write a key the daemon does not know) and how it runs.
type daemonSetup struct {
	d        *Daemon
	cfg      *config.Config
	tmpfsRun bool
}

// daemonOption changes a test daemon's setup.
type daemonOption func(*daemonSetup)

// withBin runs bin (an earlier release's daemon) instead of the one under test, from the
// first start.
func withBin(bin string) daemonOption { return func(s *daemonSetup) { s.d.Bin = bin } }

// withConfig changes the daemon's config; d has its directories set.
func withConfig(f func(d *Daemon, c *config.Config)) daemonOption {
	return func(s *daemonSetup) { f(s.d, s.cfg) }
}

// withRestore turns restore from checkpoints on for the runc row (restore = true in
// [handlers.runc]), which is off by default.
func withRestore() daemonOption {
	return withConfig(func(_ *Daemon, c *config.Config) {
		on := true
		c.Handlers["runc"].Restore = &on
	})
}

// withRegistries serves addrs as insecure (plain HTTP) registries.
func withRegistries(addrs ...string) daemonOption {
	return withConfig(func(_ *Daemon, c *config.Config) {
		for _, a := range addrs {
			c.Image.Registries = append(c.Image.Registries, config.Registry{Location: a, Insecure: true})
		}
	})
}

// forBenchmark is the daemon benchmarks time: at log level "info", as a node runs it, so
// that no debug line is written per call (RTSHIMD_BENCH_LOG_LEVEL=debug has it log each
// start's steps, "... timing"); and with its run root on a tmpfs, as a node's /run is (the
// default run_root is /run/rtshimd), so that the bundles, monitor files and runc's state
// cost what they cost there, not an ext4 journal's syncs. The state root stays on disk, as
// /var/lib is.
func forBenchmark() daemonOption {
	return func(s *daemonSetup) {
		s.cfg.LogLevel = "info"
		if v := os.Getenv("RTSHIMD_BENCH_LOG_LEVEL"); v != "" {
			s.cfg.LogLevel = v
		}
		s.tmpfsRun = true
	}
}

// newDaemon starts rtshimd for the test, the one way the suite does: on the daemon's
// defaults (config.Default) with roots, CNI dirs and an NRI socket of its own, log level
// debug and the suite's table (suiteTable), as the options change them.
func newDaemon(t testing.TB, opts ...daemonOption) *Daemon {
	t.Helper()
	dir := t.TempDir()
	// Searchable, as the daemon's roots are: a user-namespaced pod's root reaches its
	// rootfs through them (t.TempDir makes both levels 0700).
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	d := &Daemon{
		t: t, Dir: dir, Config: filepath.Join(dir, "config.toml"),
		RunRoot: filepath.Join(dir, "run"), State: filepath.Join(dir, "state"),
	}
	d.Socket = filepath.Join(d.RunRoot, "rtshimd.sock")
	cfg := config.Default()
	cfg.Socket, cfg.StateRoot, cfg.RunRoot, cfg.LogLevel = d.Socket, d.State, d.RunRoot, "debug"
	cfg.MonitorPath, cfg.PausePath = monitorBin, filepath.Join(binDir, "rtshim-pause")
	cfg.DefaultHandler, cfg.Handlers = "runc", suiteTable(d.RunRoot)
	// CNI dirs of its own, empty until a test writes a network config; NRI on, with a
	// socket of its own and no node plugins.
	cfg.Network.ConfDir, cfg.Network.CacheDir = filepath.Join(dir, "cni"), filepath.Join(dir, "cni-cache")
	cfg.NRI.SocketPath, cfg.NRI.PluginPath, cfg.NRI.PluginConfigPath = filepath.Join(dir, "nri.sock"), filepath.Join(dir, "nri-plugins"), filepath.Join(dir, "nri-conf.d")
	s := &daemonSetup{d: d, cfg: cfg}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(cfg.Network.ConfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if s.tmpfsRun {
		mountTmpfs(t, d.RunRoot)
		d.tmpfsRun = true
	}
	d.Cfg = cfg
	d.WriteConfig()
	d.Start()
	t.Cleanup(d.cleanup)
	return d
}

// configTOML is c as a config file.
func configTOML(t testing.TB, c *config.Config) string {
	t.Helper()
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		t.Fatalf("encode the config: %v", err)
	}
	return b.String()
}

// WriteConfig writes d.Cfg to the daemon's config file (read at its next start or reload).
func (d *Daemon) WriteConfig() {
	d.t.Helper()
	if err := os.WriteFile(d.Config, []byte(configTOML(d.t, d.Cfg)), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// mountTmpfs mounts a tmpfs on dir until the test's cleanups, registered after it, have run.
func mountTmpfs(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0711"); err != nil {
		t.Fatalf("tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount tmpfs %s: %v", dir, err)
		}
	})
}

// Start runs the daemon and waits until its socket answers Version.
func (d *Daemon) Start() {
	t := d.t
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(d.Dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	d.logf = logf
	bin, cfgPath := d.Bin, d.Config
	if bin == "" {
		bin = filepath.Join(binDir, "rtshimd")
	} else {
		cfgPath = d.earlierConfig()
	}
	d.cmd = exec.Command(bin, "--config", cfgPath)
	d.cmd.Env = append(os.Environ(), d.Env...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.exited = make(chan struct{})
	go func(cmd *exec.Cmd, ch chan struct{}) { _ = cmd.Wait(); close(ch) }(d.cmd, d.exited)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A socket file may be left by a killed daemon: wait until one accepts a connection.
	for {
		if c, err := net.Dial("unix", d.Socket); err == nil {
			c.Close()
			break
		}
		select {
		case <-d.exited:
			t.Fatalf("rtshimd exited during start-up:\n%s", d.Log())
		case <-ctx.Done():
			t.Fatalf("rtshimd did not serve on its socket:\n%s", d.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	endpoint := "unix://" + d.Socket
	for _, old := range []any{d.RS, d.IS} {
		if c, ok := old.(interface{ Close(context.Context) error }); ok {
			_ = c.Close(ctx)
		}
	}
	// A connection made while the daemon's listener was being put in place can be reset
	// (seen when a daemon is killed and restarted every few seconds): connect again until
	// Version answers, as long as the daemon runs.
	for {
		rs, is, err := connect(ctx, endpoint)
		if err == nil {
			d.RS, d.IS = rs, is
			return
		}
		select {
		case <-d.exited:
			t.Fatalf("rtshimd exited during start-up: %v\n%s", err, d.Log())
		case <-ctx.Done():
			t.Fatalf("rtshimd did not answer Version: %v\n%s", err, d.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// connect builds the runtime and image clients of endpoint and checks them with Version.
func connect(ctx context.Context, endpoint string) (internalapi.RuntimeService, internalapi.ImageManagerService, error) {
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(2 * time.Minute).Build(ctx)
	if err != nil {
		return nil, nil, err
	}
	is, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(2 * time.Minute).Build(ctx)
	if err == nil {
		_, err = rs.Version(ctx, "v1")
	}
	if err != nil {
		for _, c := range []any{rs, is} {
			if c, ok := c.(interface{ Close(context.Context) error }); ok {
				_ = c.Close(ctx)
			}
		}
		return nil, nil, err
	}
	return rs, is, nil
}

// newerKeys are config keys added after the earlier releases the upgrade tests run, which
// refuse keys they do not know: an earlier daemon gets the config without them. (A row's
// shim_options table is not among them: no upgrade test sets it.)
var newerKeys = regexp.MustCompile(`(?m)^\s*(pull_progress_timeout|device_ownership_from_security_context|default_ulimits|seccomp_profile|image_store|signature_policy|signature_policy_dir|registries_d|checkpoint|restore)\s*=.*\n`)

// newerTables are config tables added after those releases, taken out whole with their
// keys (up to the next table).
var newerTables = regexp.MustCompile(`(?m)^\[(tracing|node|mechanisms|checkpoints)\]\n(?:[^\[\n].*\n|\n)*`)

// loggedRunc writes, in dir, a runc wrapper that appends each call's arguments to a file
// and runs /usr/sbin/runc; it returns the wrapper's path and the file's.
func loggedRunc(t *testing.T, dir string) (wrapper, calls string) {
	t.Helper()
	wrapper, calls = filepath.Join(dir, "runc-logged"), filepath.Join(dir, "runc-calls")
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >>%s\nexec /usr/sbin/runc \"$@\"\n", calls)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, calls
}

// earlierConfig writes d's config without newerKeys beside it and returns its path.
func (d *Daemon) earlierConfig() string {
	b, err := os.ReadFile(d.Config)
	if err != nil {
		d.t.Fatal(err)
	}
	p := d.Config + ".earlier"
	if err := os.WriteFile(p, newerTables.ReplaceAll(newerKeys.ReplaceAll(b, nil), nil), 0o644); err != nil {
		d.t.Fatal(err)
	}
	return p
}

// Stop sends SIGTERM and waits for the daemon to exit.
func (d *Daemon) Stop() { d.signal(syscall.SIGTERM) }

// Kill sends SIGKILL, as a crash would.
func (d *Daemon) Kill() { d.signal(syscall.SIGKILL) }

func (d *Daemon) signal(sig syscall.Signal) {
	d.t.Helper()
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.t.Fatalf("rtshimd did not exit on %v", sig)
	}
	d.cmd = nil
	d.logf.Close()
}

// Restart stops (or kills) the daemon and starts it again on the same roots.
func (d *Daemon) Restart(kill bool) {
	if kill {
		d.Kill()
	} else {
		d.Stop()
	}
	d.Start()
}

// Log returns the daemon's log so far.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, "daemon.log"))
	return string(b)
}

// cleanup removes every sandbox still known, stops the daemon, and fails the test if
// anything of it is left on the node.
func (d *Daemon) cleanup() {
	t := d.t
	if d.cmd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if pods, err := d.RS.ListPodSandbox(ctx, nil); err == nil {
			for _, p := range pods {
				if err := d.RS.RemovePodSandbox(ctx, p.Id); err != nil {
					t.Errorf("cleanup: remove sandbox %s: %v", p.Id, err)
				}
			}
		}
		d.Stop()
	}
	d.assertNothingLeft()
	if t.Failed() {
		saved := filepath.Join(os.TempDir(), "rtshimd-daemon-"+strings.ReplaceAll(t.Name(), "/", "_")+".log")
		_ = os.WriteFile(saved, []byte(d.Log()), 0o644)
		t.Logf("daemon log (all of it in %s):\n%s", saved, lastLines(d.Log(), 80))
	}
}

// assertNothingLeft checks the node for remains of this daemon's pods: mounts under its
// run root, sandbox directories and records, and live processes that name its roots.
func (d *Daemon) assertNothingLeft() {
	t := d.t
	t.Helper()
	var m []string
	for _, p := range mountsUnder(d.Dir) {
		// A benchmark's run root is a tmpfs of the harness's, not the daemon's.
		if !(d.tmpfsRun && p == d.RunRoot) {
			m = append(m, p)
		}
	}
	// The image store's own mounts live as long as the daemon.
	if d.cmd != nil {
		m = slices.DeleteFunc(m, func(p string) bool { return isStoreMount(d, p) })
	}
	if len(m) > 0 {
		t.Errorf("mounts left under %s: %v", d.Dir, m)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.RunRoot, "sandboxes")); len(entries) > 0 {
		t.Errorf("left in %s: %d entries (%s)", filepath.Join(d.RunRoot, "sandboxes"), len(entries), entries[0].Name())
	}
	if left := stateEntries(filepath.Join(d.State, "sandboxes")); len(left) > 0 {
		t.Errorf("sandbox records left: %v", left)
	}
	if left := writableLayers(d.State); len(left) > 0 {
		t.Errorf("containers' writable layers left: %v", left)
	}
	if left, err := pinnedPods(d.RunRoot); err != nil || len(left) > 0 {
		t.Errorf("pods' namespaces left pinned in the pin home: %v (%v)", left, err)
	}
	waitFor(t, 15*time.Second, "processes of removed pods to end", func() (bool, string) {
		daemon := 0
		if d.cmd != nil {
			daemon = d.cmd.Process.Pid
		}
		procs := processesMentioning(d.Dir, daemon)
		return len(procs) == 0, strings.Join(procs, "; ")
	})
}

// isStoreMount reports whether p is one of the daemon's own mounts (the image store's
// driver's home, the writable layers' directory, the pin home's pin), which it holds
// while it runs (and a kill -9 leaves).
func isStoreMount(d *Daemon, p string) bool {
	return p == filepath.Join(d.State, "storage", "overlay") || p == filepath.Join(d.State, "storage", "rtshimd-rootfs") ||
		p == filepath.Join(d.RunRoot, "nshome") || p == filepath.Join(d.RunRoot, "nshome", "mnt")
}

// pinnedPods lists the pods with namespaces pinned in the daemon's pin home, read in the
// home itself: its mount namespace, pinned at <run root>/nshome/mnt, entered on a thread
// of its own (as the daemon does). So it needs no daemon (a stopping daemon removes
// <run root>/pinned, its way in), and finds what a stopped or killed one left: a home is
// released from the node only once it holds no pod.
func pinnedPods(runRoot string) ([]string, error) {
	pin := filepath.Join(runRoot, "nshome", "mnt")
	if !slices.Contains(mountsUnder(pin), pin) {
		return nil, nil // no home on the node: nothing pinned
	}
	ns, err := os.Open(pin)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	type result struct {
		ids []string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // left locked: the thread, in the home, ends with the goroutine
		var r result
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			r.err = fmt.Errorf("unshare fs: %w", err)
		} else if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
			r.err = fmt.Errorf("enter the pin home %s: %w", pin, err)
		} else {
			entries, err := os.ReadDir("/pods")
			r.err = err
			for _, e := range entries {
				r.ids = append(r.ids, e.Name())
			}
		}
		ch <- r
	}()
	r := <-ch
	return r.ids, r.err
}

// mountsUnder lists mount points at or below dir.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// processesMentioning lists live (non-zombie) processes whose command line contains s.
// Zombies are left out: this machine's PID 1 reaps orphans only every few seconds.
func processesMentioning(s string, except int) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == except {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), s) {
			continue
		}
		if processState(pid) == "Z" {
			continue
		}
		out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return out
}

// processState is the one-letter state of pid ("" if gone).
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

func processAlive(pid int) bool {
	st := processState(pid)
	return st != "" && st != "Z"
}

// waitFor polls cond until it holds or the limit passes. The limit only bounds a wait
// for something asynchronous; it is not a speed assertion.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("gave up waiting for %s: %s", what, detail)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// podConfig is a minimal sandbox config as kubelet sends it for a pod named name.
func podConfig(name string, pidMode runtimeapi.NamespaceMode) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "rtshimd-test", Uid: name + "-uid", Attempt: 1},
		Hostname: name,
		Labels:   map[string]string{"app": name, "suite": "rtshimd"},
		Annotations: map[string]string{
			"rtshimd.test/annotation": "value of " + name,
		},
		DnsConfig: &runtimeapi.DNSConfig{
			Servers:  []string{"10.96.0.10"},
			Searches: []string{"rtshimd-test.svc.cluster.local", "svc.cluster.local"},
			Options:  []string{"ndots:5"},
		},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/" + cgroupRoot + "/pod-" + name,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     pidMode,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
