// Package ocicli implements the command-line kinds of runtime: the runc family (runc,
// crun, youki: runtime_type "oci"), which runs each container in namespaces the daemon
// pins, and sandbox runtimes such as gVisor's runsc ("oci-sandbox"), whose containers join
// one pod sandbox the runtime runs. Every task is supervised by its own rtshim-monitor,
// which runs the runtime's create and start, holds the task's stdio and records its exit,
// so tasks and their logs outlive the daemon. The runtime's command line is built here and
// in internal/oci (the binary driver) and cmd/rtshim-monitor (create, start, wait), nowhere else.
package ocicli

import (
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/cmdexit"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/fsafe/mountpoint"
	"github.com/rtshimd/rtshimd/internal/fsafe/unixsock"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/kind/ocicli/ocicmd"
	"github.com/rtshimd/rtshimd/internal/monitor"
	"github.com/rtshimd/rtshimd/internal/store"
)

// killWait bounds the wait for a task to go after SIGKILL or for its monitor to finish.
const killWait = 10 * time.Second

// Options are what both command-line kinds need besides the handler's runtime.
type Options struct {
	MonitorPath string
	// PlainStart: the monitor runs the runtime's start for every container, never the
	// exec FIFO (execFifo).
	PlainStart bool
}

// Runtime is a command-line runtime of either kind.
type Runtime struct {
	rt   *ocicmd.Runtime
	opts Options
	// sandboxed: containers join the pod sandbox the runtime runs (runsc); their processes
	// are not host processes and their IPC, UTS and PID namespaces are the sandbox's own.
	sandboxed bool

	cgOnce sync.Once
	cg     *cgstats.Reader

	// fifoStart: the runtime is runc, whose start the monitor does itself (execFifo);
	// fifoKnown once `features` has answered (a failed call is asked again).
	fifoMu    sync.Mutex
	fifoKnown bool
	fifoStart bool
}

// NewOCI is the runc-family kind for the handler's runtime.
func NewOCI(row *kind.Row, opts Options) *Runtime { return &Runtime{rt: ocicmd.New(row), opts: opts} }

// NewSandbox is the sandbox-runtime kind (runsc) for the handler's runtime.
func NewSandbox(row *kind.Row, opts Options) *Runtime {
	return &Runtime{rt: ocicmd.New(row), opts: opts, sandboxed: true}
}

var _ kind.Runtime = (*Runtime)(nil)

// Type is kind.OCI or kind.OCISandbox.
func (r *Runtime) Type() string {
	if r.sandboxed {
		return kind.OCISandbox
	}
	return kind.OCI
}

// Plan: the runc family gets IPC and UTS pinned by the daemon and a sandbox container only
// for a shared PID namespace; a sandbox runtime always runs the pod's sandbox, whose cgroup
// holds the whole pod, and keeps IPC, UTS and PID inside its own kernel.
func (r *Runtime) Plan() kind.PodPlan {
	if r.sandboxed {
		return kind.PodPlan{SandboxContainer: true, PodLimits: true, DeleteSandboxAtStop: true}
	}
	return kind.PodPlan{PinIPCUTS: true, HostNamespaces: true, DeleteSandboxAtStop: true, DetachRootfs: true, MountsToNode: true}
}

// AdjustSpec: a sandbox runtime's containers join its sandbox, not host namespaces: the
// network namespace's path is passed on (runsc reads it), IPC and UTS are new inside the
// sandbox, and there is no cgroup namespace to make. A PID namespace's path stays: runsc
// reads /proc/<sandbox pid>/ns/pid (a pod-shared PID namespace: the sandbox container's
// pid is the sandbox's) as "join the sandbox's root PID namespace" (Sandbox.fixPidns), and
// an entry without a path as "a new one" — blanking it gave every container of a
// shareProcessNamespace pod a PID namespace of its own.
func (r *Runtime) AdjustSpec(spec *specs.Spec) {
	if !r.sandboxed || spec.Linux == nil {
		return
	}
	ns := spec.Linux.Namespaces[:0]
	for _, n := range spec.Linux.Namespaces {
		switch n.Type {
		case specs.CgroupNamespace:
			continue
		case specs.IPCNamespace, specs.UTSNamespace:
			n.Path = ""
		}
		ns = append(ns, n)
	}
	spec.Linux.Namespaces = ns
	spec.Mounts = append(spec.Mounts, pathMounts(spec)...)
}

// pathMounts turns the container's masked and read-only paths into mounts, for gVisor,
// which ignores linux.maskedPaths and linux.readonlyPaths: a read-only path is its own
// directory bound read-only, a masked directory an empty read-only tmpfs, a masked file
// /dev/null bound read-only (as runc masks it). Paths under /proc and /sys are left to
// gVisor: its procfs and sysfs are its own and show no host state. Paths are resolved
// inside the rootfs (a symlink cannot lead out of it); one that is not there is skipped.
func pathMounts(spec *specs.Spec) []specs.Mount {
	if spec.Root == nil || !filepath.IsAbs(spec.Root.Path) {
		return nil
	}
	rootfs := spec.Root.Path
	own := func(p string) bool {
		p = filepath.Clean("/" + p)
		return !(p == "/proc" || p == "/sys" || strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/"))
	}
	var out []specs.Mount
	for _, p := range spec.Linux.ReadonlyPaths {
		if !own(p) {
			continue
		}
		host, err := securejoin.SecureJoin(rootfs, p)
		if fi, serr := os.Stat(host); err != nil || serr != nil || !fi.IsDir() {
			continue
		}
		out = append(out, specs.Mount{Destination: p, Type: "bind", Source: host, Options: []string{"rbind", "ro"}})
	}
	for _, p := range spec.Linux.MaskedPaths {
		if !own(p) {
			continue
		}
		host, err := securejoin.SecureJoin(rootfs, p)
		fi, serr := os.Stat(host)
		switch {
		case err != nil || serr != nil:
		case fi.IsDir():
			out = append(out, specs.Mount{Destination: p, Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec"}})
		default:
			out = append(out, specs.Mount{Destination: p, Type: "bind", Source: "/dev/null", Options: []string{"bind", "ro"}})
		}
	}
	return out
}

// Create runs the runtime's create under a new monitor.
func (r *Runtime) Create(ctx context.Context, t kind.Task) (kind.Created, error) {
	args := r.rt.GlobalArgs()
	if r.sandboxed && t.Sandbox && t.HostNetwork && !hasNetworkArg(r.rt.Args) {
		// A hostNetwork pod's sandbox uses the node's stack: runsc's own netstack would
		// start in a namespace of its own, not the node's.
		args = append(args, hostNetworkArg)
	}
	cfg := monitor.Config{
		ID: t.ID, Dir: t.Dir, Runtime: r.rt.Path, RuntimeArgs: args, Bundle: t.Dir,
		LogPath: t.LogPath, LogDir: t.LogDir,
		// A sandbox runtime's containers are not host processes the monitor can wait for.
		WaitWithRuntime: r.sandboxed && !t.Sandbox,
		Stdin:           t.Stdin, StdinOnce: t.StdinOnce, Terminal: t.Terminal,
	}
	if t.Restore != "" {
		if err := r.Restorable(); err != nil {
			return kind.Created{}, err
		}
		// Nothing runs until the start restores it: CRIU's work files (its restore.log) go
		// beside the bundle.
		cfg.RestoreImage, cfg.RestoreWork = t.Restore, filepath.Join(t.Dir, restoreWorkDir)
		cfg.RestoreLSM = t.RestoreLSM
		if err := os.MkdirAll(cfg.RestoreWork, 0o700); err != nil {
			return kind.Created{}, fmt.Errorf("handler %q: create %s: %w", r.rt.Handler, t.ID, err)
		}
	} else {
		cfg.ExecFifo = r.execFifo(ctx, t)
	}
	p, err := monitor.Start(ctx, r.opts.MonitorPath, cfg)
	if err != nil {
		return kind.Created{}, fmt.Errorf("handler %q: create %s: %w", r.rt.Handler, t.ID, err)
	}
	return kind.Created{Pid: p.InitPid, SupervisorPid: p.Pid}, nil
}

// restoreWorkDir is CRIU's work directory for a restore, in the task's directory.
const restoreWorkDir = "restore-work"

// execFifo is the path of runc's exec FIFO for t when the monitor may start t by reading
// it, as `runc start` does, instead of running runc: ~10 ms of a Go binary's start per
// container, in wall time and CPU (docs/performance.md). Only runc (its features say so);
// the monitor runs `runc start` when the FIFO is not there or the bundle's spec, as runc
// read it (a runtime_path wrapper may add to it), names poststart hooks, which runc from
// 1.2 runs in its start. "" otherwise.
func (r *Runtime) execFifo(ctx context.Context, t kind.Task) string {
	if r.sandboxed || t.Sandbox || r.opts.PlainStart {
		return ""
	}
	r.fifoMu.Lock()
	if !r.fifoKnown {
		// Not the request's cancellation: the answer holds for the daemon's life.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kind.DefaultTimeout)
		f, err := r.rt.Features(fctx)
		cancel()
		r.fifoKnown = err == nil
		r.fifoStart = err == nil && f.Annotations[runcVersionAnnotation] != ""
	}
	fifo := r.fifoStart
	r.fifoMu.Unlock()
	if !fifo {
		return ""
	}
	return filepath.Join(r.rt.Root, t.ID, "exec.fifo")
}

// runcVersionAnnotation is the annotation by which `runc features` names runc's version
// (runc 1.1 and later); crun and youki have starts of their own.
const runcVersionAnnotation = "org.opencontainers.runc.version"

// Start asks the task's monitor to run the runtime's start, or its restore. A restore
// CRIU refused is a failed precondition, in the words of CRIU's log.
func (r *Runtime) Start(ctx context.Context, t kind.Task) error {
	err := monitor.Command(ctx, t.Dir, monitor.CmdStart)
	if err == nil {
		return nil
	}
	// The runtime's failed restore (the monitor's reply names it), not a later refusal.
	if t.Restore != "" && ctx.Err() == nil && strings.Contains(err.Error(), filepath.Base(r.rt.Path)+" restore: ") {
		if why := criuErrors(filepath.Join(t.Dir, restoreWorkDir, "restore.log")); why != "" {
			return fmt.Errorf("handler %q: restore %s: CRIU failed: %s: %w", r.rt.Handler, t.ID, why, errdefs.ErrFailedPrecondition)
		}
	}
	return fmt.Errorf("handler %q: start %s: %w", r.rt.Handler, t.ID, err)
}

// Kill runs the runtime's kill. runsc's kill --all signals the whole sandbox's processes,
// so a sandbox runtime signals the container's init only (its children go with it).
func (r *Runtime) Kill(ctx context.Context, t kind.Task, sig string, all bool) error {
	// The init first, then --all. runc's --all finds the processes through one cgroup
	// (devices, on v1), and with its systemd driver on cgroup v1 systemd never moves them
	// there (it places a scope only in the controllers it manages): --all alone signalled
	// nothing and every stop waited out its timeout. Killing the init ends a container that
	// owns its PID namespace; --all then reaches the processes of one that shares the pod's.
	err := r.rt.Kill(ctx, t.ID, sig, false)
	if all && !r.sandboxed {
		aerr := r.rt.Kill(ctx, t.ID, sig, true)
		switch {
		case err != nil:
			err = aerr // the init had gone already: what --all says counts
		case aerr != nil && !ocicmd.IsNotExist(aerr):
			logrus.WithError(aerr).WithField("container", t.ID).Warn("kill --all after the init")
		}
	}
	if err == nil || ocicmd.IsNotExist(err) {
		return nil
	}
	// A stopped container refuses signals: only an error while the runtime says it runs.
	if st, serr := r.rt.State(ctx, t.ID); serr != nil || st.Status != specs.StateRunning {
		return nil
	}
	return err
}

// Wait follows the task's monitor. A sandbox container that runs on without its monitor
// (killed while the daemon was down) is followed through the runtime instead, so the
// pod keeps working.
func (r *Runtime) Wait(ctx context.Context, t kind.Task) (kind.Exit, bool, error) {
	e, ok, err := monitor.Watch(ctx, t.Dir)
	if err != nil || ok || !t.Sandbox {
		return e, ok, err
	}
	st, serr := r.rt.State(ctx, t.ID)
	if serr != nil || st.Status != specs.StateRunning {
		return e, false, nil
	}
	logrus.WithFields(logrus.Fields{"sandbox": t.ID, "handler": r.rt.Handler}).Warn("sandbox container runs without its monitor; following it through the runtime")
	r.rt.WaitStopped(ctx, t.ID)
	if ctx.Err() != nil {
		return kind.Exit{}, false, ctx.Err()
	}
	return kind.Exit{Status: 255, ExitedAt: time.Now()}, true, nil
}

// Status is the runtime's `state` of the task. A sandbox runtime's container that is
// stopped may never have started: its sandbox ended between create and start (a daemon
// killed inside StopPodSandbox leaves such a record "created"). Its monitor follows it with
// `<runtime> wait` only after a start, so it would wait for that start forever and no
// exit would ever come: if the monitor recorded none and accepts being released (it
// refuses once started), the task is TaskNeverStarted. A runc-like runtime's monitor is
// the init's parent and records its end started or not.
func (r *Runtime) Status(ctx context.Context, t kind.Task) (string, error) {
	st, err := r.rt.State(ctx, t.ID)
	switch {
	case ocicmd.IsNotExist(err) && t.Restore != "":
		// Restored at start: until then the runtime knows nothing of it, and its monitor
		// waits for the start (also after a failed restore, which it refuses to retry).
		if _, err := monitor.ReadExit(t.Dir); err != nil && monitor.Alive(t.Dir) {
			return kind.TaskCreated, nil
		}
		return kind.TaskStopped, nil
	case ocicmd.IsNotExist(err):
	case err != nil:
		return "", fmt.Errorf("handler %q: state of %s: %w", r.rt.Handler, t.ID, err)
	case st.Status == specs.StateCreating || st.Status == specs.StateCreated:
		return kind.TaskCreated, nil
	case st.Status == specs.StateRunning:
		return kind.TaskRunning, nil
	}
	if r.sandboxed && !t.Sandbox {
		// Command fails where the monitor is gone: no separate check that it is alive.
		if _, err := monitor.ReadExit(t.Dir); err != nil && monitor.Command(ctx, t.Dir, monitor.CmdExit) == nil {
			return kind.TaskNeverStarted, nil
		}
	}
	return kind.TaskStopped, nil
}

// KillLost kills a task nobody supervises and waits, through the runtime, until it no
// longer runs.
func (r *Runtime) KillLost(ctx context.Context, t kind.Task) kind.Exit {
	ctx, cancel := context.WithTimeout(ctx, killWait+kind.DefaultTimeout)
	defer cancel()
	if err := r.Kill(ctx, t, "SIGKILL", true); err != nil {
		logrus.WithError(err).WithField("container", t.ID).Warn("kill container whose monitor died")
	}
	r.rt.WaitStopped(ctx, t.ID)
	return kind.Exit{Status: 137, Signal: 9, ExitedAt: time.Now()}
}

// Delete force-deletes the task and, for one that never started, releases its monitor
// and waits for it to go, so its files are final before the caller removes them.
func (r *Runtime) Delete(ctx context.Context, t kind.Task) error {
	if err := r.rt.Delete(ctx, t.ID, true); err != nil {
		// runsc deletes a container whose sandbox is already gone (kubelet stops a pod
		// before it removes its containers) and then fails it ("no control socket found"):
		// a container the runtime no longer knows is deleted, which is what was asked.
		if _, serr := r.rt.State(ctx, t.ID); !ocicmd.IsNotExist(serr) {
			return err
		}
		logrus.WithError(err).WithField("container", t.ID).Debug("runtime failed a delete it did")
	}
	if r.sandboxed {
		// After any delete, not the sandbox's only: a pod's containers outlive its sandbox
		// in runsc's root when the sandbox goes at StopPodSandbox, so the last state to go
		// may be a container's.
		r.releaseNullNetNS()
	}
	if monitor.Alive(t.Dir) {
		_ = monitor.Command(ctx, t.Dir, monitor.CmdExit)
		wctx, cancel := context.WithTimeout(ctx, killWait)
		defer cancel()
		_, _, _ = monitor.Watch(wctx, t.Dir)
	}
	return nil
}

// Attach connects to the task's monitor, which holds its stdio and terminal.
func (r *Runtime) Attach(ctx context.Context, t kind.Task, s kind.AttachStreams) error {
	return monitor.AttachSession(ctx, t.Dir, s.Stdin, s.Stdout, s.Stderr, s.Resize, nil)
}

// ReopenLog asks the task's monitor to reopen its log file.
func (r *Runtime) ReopenLog(ctx context.Context, t kind.Task) error {
	if err := monitor.Command(ctx, t.Dir, monitor.CmdReopen); err != nil {
		return fmt.Errorf("reopen log of %s: %w", t.ID, err)
	}
	return nil
}

// Update runs the runtime's update with the resources in a file of the task's dir.
func (r *Runtime) Update(ctx context.Context, t kind.Task, res *specs.LinuxResources) error {
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	f := filepath.Join(t.Dir, "resources.json")
	if err := store.WriteFileAtomic(f, b, 0o600); err != nil {
		return err
	}
	defer os.Remove(f)
	return r.rt.Update(ctx, t.ID, f)
}

// sandboxStatsTimeout bounds one `runsc events --stats`: it is on kubelet's stats path.
const sandboxStatsTimeout = 2 * time.Second

// Stats reads the task's cgroup directly, without forking, as much of it as scope says. A
// sandbox runtime's container has no host processes (they live in the sandbox, whose
// cgroup holds the whole pod): the runtime reports its usage (`runsc events --stats`),
// all of it whatever the scope.
func (r *Runtime) Stats(ctx context.Context, t kind.Task, cgroupsPath string, scope cgstats.Scope) (cgstats.Stats, error) {
	if r.sandboxed && !t.Sandbox {
		ctx, cancel := context.WithTimeout(ctx, sandboxStatsTimeout)
		defer cancel()
		ev, err := r.rt.Stats(ctx, t.ID)
		if err != nil {
			return cgstats.Stats{}, err
		}
		return eventStats(ev), nil
	}
	dir, err := cgpath.Dir(cgroupsPath)
	if err != nil {
		return cgstats.Stats{}, fmt.Errorf("stats of %s: %w", t.ID, err)
	}
	r.cgOnce.Do(func() { r.cg = cgstats.New("/sys/fs/cgroup") })
	return r.cg.ReadScope(dir, scope)
}

// eventStats is a sandbox runtime's reading, as cgstats computes one from a cgroup. What
// gVisor does not account for stays zero; it names no host processes (they are its).
func eventStats(ev *ocicmd.EventStats) cgstats.Stats {
	mem := ev.Memory
	s := cgstats.Stats{
		CPUUsageNanos: ev.CPU.Usage.Total, CPUUserNanos: ev.CPU.Usage.User, CPUSystemNanos: ev.CPU.Usage.Kernel,
		CPUPeriods: ev.CPU.Throttling.Periods, CPUThrottledPeriods: ev.CPU.Throttling.ThrottledPeriods, CPUThrottledNanos: ev.CPU.Throttling.ThrottledTime,
		MemoryUsage: mem.Usage.Usage, MemoryLimit: mem.Usage.Limit, WorkingSet: mem.Usage.Usage, RSS: mem.Raw["total_rss"],
		MemoryCache: mem.Cache, MemoryMappedFile: mem.Raw["total_mapped_file"], MemoryKernel: mem.Kernel.Usage,
		MemoryMaxUsage: mem.Usage.Max, MemoryFailcnt: mem.Usage.Failcnt,
		PageFaults: mem.Raw["total_pgfault"], MajorPageFaults: mem.Raw["total_pgmajfault"],
		Processes: ev.Pids.Current, PidsLimit: ev.Pids.Limit,
	}
	if s.MemoryLimit >= 1<<62 {
		s.MemoryLimit = 0
	}
	if inactive := mem.Raw["total_inactive_file"]; inactive < s.WorkingSet {
		s.WorkingSet -= inactive
	}
	if mem.Swap.Usage > mem.Usage.Usage {
		s.MemorySwap = mem.Swap.Usage - mem.Usage.Usage
	}
	devs := cgstats.Devices{}
	for _, e := range ev.Blkio.IoServiceBytesRecursive {
		devs.Get(e.Major, e.Minor).Bytes[e.Op] = e.Value
	}
	for _, e := range ev.Blkio.IoServicedRecursive {
		devs.Get(e.Major, e.Minor).Ops[e.Op] = e.Value
	}
	s.Blkio = devs.List() // in device order: the series' order must not change between scrapes
	return s
}

// Version is the first line of the runtime's --version.
func (r *Runtime) Version(ctx context.Context) (string, error) { return r.rt.Version(ctx) }

// Features is the runtime's `features` output.
func (r *Runtime) Features(ctx context.Context) (*features.Features, error) {
	return r.rt.Features(ctx)
}

// rootNetNSRefusal is what runsc builds from before 2023 say of every network namespace on
// kernels that show net.core.dev_weight in all of them (5.x and later): they take it for
// the root one and refuse to run their own netstack there.
const rootNetNSRefusal = "cannot run with network enabled in root network namespace"

// hostNetworkArg runs a sandbox runtime's pods on the host kernel's network stack, inside
// the pod's network namespace.
const hostNetworkArg = "--network=host"

// Probe runs the bundle with the runtime's run (create, start, wait) and deletes it. A
// sandbox runtime that refuses its own netstack in the probe's network namespace (an old
// runsc) is tried again with host networking; if that runs, the handler gets it.
func (r *Runtime) Probe(ctx context.Context, id, dir string) (kind.ProbeResult, error) {
	err := probeWith(ctx, r.rt, id, dir)
	if err == nil || !r.sandboxed || !strings.Contains(err.Error(), rootNetNSRefusal) || hasNetworkArg(r.rt.Args) {
		return kind.ProbeResult{}, err
	}
	host := *r.rt
	host.Args = append(slices.Clone(r.rt.Args), hostNetworkArg)
	if herr := probeWith(ctx, &host, id, dir); herr != nil {
		return kind.ProbeResult{}, err
	}
	return kind.ProbeResult{
		Args: []string{hostNetworkArg},
		Note: "this runsc build takes the pod's network namespace for the root one (\"" + rootNetNSRefusal +
			"\"; an old build on a new kernel), so its pods run with " + hostNetworkArg +
			": the host kernel's network stack inside the pod's namespace, not gVisor's netstack",
	}, nil
}

func hasNetworkArg(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--network") })
}

func probeWith(ctx context.Context, rt *ocicmd.Runtime, id, dir string) error {
	err := rt.Run(ctx, id, dir)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
	defer cancel()
	_ = rt.Delete(dctx, id, true)
	releaseNullNetNS(rt.Root)
	return err
}

// nullNetNS is the file under its root where runsc (2024 and later) pins an empty network
// namespace for its gofers to share, a bind mount it never removes.
const nullNetNS = "null-netns"

// releaseNullNetNS unmounts runsc's shared null network namespace once the last sandbox
// of the root is gone, so that nothing of the handler stays mounted. A sandbox starting
// meanwhile either holds the namespace open already or makes and pins a new one.
func (r *Runtime) releaseNullNetNS() { releaseNullNetNS(r.rt.Root) }

func releaseNullNetNS(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() != nullNetNS {
			return // another sandbox's state: it may still start gofers
		}
	}
	path := filepath.Join(root, nullNetNS)
	// Concurrent cold starts may have stacked several mounts there.
	if err := mountpoint.DetachAll(path); err != nil {
		logrus.WithError(err).WithField("path", path).Warn("unmount runsc's null network namespace")
		return
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		logrus.WithError(err).WithField("path", path).Warn("remove runsc's null network namespace")
	}
}

// Exec runs the runtime's exec in the foreground: with a terminal, on a pseudo-terminal of
// ours that the runtime relays to the container's (so a resize of ours reaches it as
// SIGWINCH and we can wait for the process; a console socket would need a detached exec).
func (r *Runtime) Exec(ctx context.Context, t kind.Task, x kind.ExecSpec) (kind.ExecProcess, error) {
	pj, err := json.Marshal(x.Process)
	if err != nil {
		return nil, err
	}
	procFile := filepath.Join(x.Dir, "process.json")
	if err := store.WriteFileAtomic(procFile, pj, 0o600); err != nil {
		return nil, err
	}
	pidFile := filepath.Join(x.Dir, "pid")
	args := append(r.rt.GlobalArgs(), "exec", "--process", procFile, "--pid-file", pidFile)
	if r.sandboxed {
		// runsc's --pid-file names a host process; the one to kill lives in the sandbox.
		pidFile = filepath.Join(x.Dir, "internal-pid")
		args = append(args, "--internal-pid-file", pidFile)
	}
	cmd := exec.Command(r.rt.Path, append(args, t.ID)...)
	p := &execProcess{r: r, id: t.ID, pidFile: pidFile, cmd: cmd, done: make(chan struct{})}
	if x.Terminal {
		err = p.startTerminal(x)
	} else {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = x.Stdin, x.Stdout, x.Stderr
		// runsc's sandbox can keep the pipes open; never wait for EOF beyond this.
		cmd.WaitDelay = 2 * time.Second
		err = cmd.Start()
	}
	if err != nil {
		return nil, fmt.Errorf("handler %q: exec in %s: %w", r.rt.Handler, t.ID, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type execProcess struct {
	r       *Runtime
	id      string
	pidFile string
	cmd     *exec.Cmd
	master  *os.File
	copied  chan struct{} // the terminal's output is all copied
	done    chan struct{}
	err     error
}

func (p *execProcess) startTerminal(x kind.ExecSpec) error {
	master, slave, err := openPTY()
	if err != nil {
		return fmt.Errorf("allocate a terminal: %w", err)
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = p.cmd.Start()
	slave.Close()
	if err != nil {
		master.Close()
		return err
	}
	p.master = master
	if x.Resize != nil {
		go func() {
			for sz := range x.Resize {
				_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Height, Col: sz.Width})
			}
		}()
	}
	if x.Stdin != nil {
		go func() { _, _ = io.Copy(master, x.Stdin) }()
	}
	out := x.Stdout
	if out == nil {
		out = io.Discard
	}
	p.copied = make(chan struct{})
	go func() { _, _ = io.Copy(out, master); close(p.copied) }()
	return nil
}

// Wait waits for the runtime's exec and returns the process's exit code.
func (p *execProcess) Wait() (int, error) {
	<-p.done
	if p.master != nil {
		select { // the last output, without waiting on a terminal someone else holds
		case <-p.copied:
		case <-time.After(time.Second):
		}
		p.master.Close()
	}
	var ee *exec.ExitError
	switch {
	case cmdexit.Succeeded(p.cmd, p.err):
		return 0, nil
	case errors.As(p.err, &ee):
		// A runtime that could not even start the process says so on stderr and exits
		// non-zero, which is what the user sees either way.
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, fmt.Errorf("handler %q: exec in %s: %w", p.r.rt.Handler, p.id, p.err)
}

// Kill kills the exec'd process first and lets the runtime's exec reap it and return:
// killing the runtime first would orphan the process to the container's init, which may
// never reap it. A runtime that has not yet written the process's pid (a slow start: seen
// on the cgroup-v2 node, where `runc exec` takes over a second) is watched until it does,
// rather than killed: the process it was starting would run on in the container. If the
// runtime does not return, it is killed too.
func (p *execProcess) Kill() {
	go func() {
		deadline := time.NewTimer(5 * time.Second)
		defer deadline.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		killed := p.killProcess()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
				if !killed {
					killed = p.killProcess()
				}
			case <-deadline.C:
				_ = p.cmd.Process.Kill()
				return
			}
		}
	}()
}

// killProcess: a host pid for the runc family; for a sandbox runtime the pid inside the
// sandbox, through the runtime. false: the runtime has not written the pid yet.
func (p *execProcess) killProcess() bool {
	b, err := os.ReadFile(p.pidFile)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false // being written
	}
	if !p.r.sandboxed {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.r.rt.KillPid(ctx, p.id, pid, "KILL"); err != nil {
		logrus.WithError(err).WithField("container", p.id).Warnf("kill exec'd process %d", pid)
	}
	return true
}

// openPTY allocates a pseudo-terminal pair.
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

var _ kind.PortDialer = (*Runtime)(nil)

// DialPort connects to port on the localhost of a sandbox runtime's pod that runs its own
// network stack (runsc without --network=host): the host kernel cannot reach it, so the
// runtime hands the sandbox one end of a Unix socket connection (`runsc port-forward
// --stream`) and the sandbox connects it to the port.
func (r *Runtime) DialPort(ctx context.Context, t kind.Task, port int32) (net.Conn, bool, error) {
	if !r.sandboxed || t.HostNetwork || hasNetworkArg(r.rt.Args) {
		return nil, false, nil
	}
	// A short path: Unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "rtshimd-pf-")
	if err != nil {
		return nil, true, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s")
	l, err := unixsock.Listen(path, 0o600)
	if err != nil {
		return nil, true, err
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	args := append(r.rt.GlobalArgs(), "port-forward", "--stream", path, t.ID, strconv.Itoa(int(port)))
	cmd := exec.CommandContext(ctx, r.rt.Path, args...)
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, true, fmt.Errorf("handler %q: port-forward: %w", r.rt.Handler, err)
	}
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := l.Accept()
		ch <- accepted{c, err}
	}()
	// The runtime connects to the socket, hands its end to the sandbox and exits; the
	// sandbox then connects it to the port.
	werr := cmd.Wait()
	if werr != nil {
		l.Close()
		if a := <-ch; a.c != nil {
			a.c.Close()
		}
		return nil, true, fmt.Errorf("handler %q: port-forward to %s port %d: %w: %s", r.rt.Handler, t.ID, port, werr, strings.TrimSpace(out.String()))
	}
	select {
	case a := <-ch:
		return a.c, true, a.err
	case <-ctx.Done():
		// A connection that comes after all is closed, not left open.
		l.Close()
		go func() {
			if a := <-ch; a.c != nil {
				a.c.Close()
			}
		}()
		return nil, true, fmt.Errorf("handler %q: port-forward to %s port %d: the sandbox did not connect: %w", r.rt.Handler, t.ID, port, ctx.Err())
	}
}
