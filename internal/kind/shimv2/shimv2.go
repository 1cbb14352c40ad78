// Package shimv2 implements the shim v2 kind of runtime (runtime_type "shim-v2"): a
// containerd shim v2 binary (Kata's containerd-shim-kata-v2, containerd-shim-runc-v2,
// gVisor's containerd-shim-runsc-v1) driven over ttrpc with the Task API (internal/kind/shimv2/shim),
// without containerd's daemon. One shim serves a pod: it is started for the sandbox
// container and the pod's containers are created through it (containerd's grouping by
// sandbox id). Container output goes over FIFOs to rtshim-monitor in logger mode, which
// the daemon starts (see startLogger), so CRI logs keep flowing and attach keeps working
// while the daemon is down; exec output comes back over FIFOs too.
package shimv2

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/kind/shimv2/shim"
	"github.com/rtshimd/rtshimd/internal/monitor"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/shimopts"
)

// stopWait bounds waits for a task to go after SIGKILL, and for output to drain.
const stopWait = 10 * time.Second

// Options are what the kind needs besides the handler's row.
type Options struct {
	// MonitorPath is rtshim-monitor, which the shim starts as the containers' logger.
	MonitorPath string
	// Address is the shims' -address: never served, it names the daemon to them (it
	// seeds their socket names and shows in their command lines).
	Address string
	// EventsAddress is where shims publish task events (a served socket, or "").
	EventsAddress string
}

// Runtime is one handler's shim, with a connection per pod.
type Runtime struct {
	row  *kind.Row
	opts Options

	mu      sync.Mutex
	clients map[string]*shim.Client // by pod sandbox ID

	// The host's cgroups, for what the shim's metrics lack.
	cgOnce sync.Once
	cg     *cgstats.Reader
}

var _ kind.Runtime = (*Runtime)(nil)

// New is the shim v2 kind for the handler's row (runtime_path is the shim binary).
func New(row *kind.Row, opts Options) *Runtime {
	return &Runtime{row: row, opts: opts, clients: map[string]*shim.Client{}}
}

// Type is kind.ShimV2.
func (r *Runtime) Type() string { return kind.ShimV2 }

// Plan: the shim owns the pod's sandbox container, always. The daemon still pins the
// pod's namespaces (a VM shim takes the network namespace for its tap device and ignores
// the rest; a runc shim joins them all); limits stay per container, as containerd sets them.
// Host namespaces are off until a row declares them: a VM cannot share the node's.
func (r *Runtime) Plan() kind.PodPlan {
	return kind.PodPlan{PinIPCUTS: true, SandboxContainer: true, MountsToNode: true}
}

// AdjustSpec leaves the spec as containerd's CRI plugin would give it to the shim.
func (r *Runtime) AdjustSpec(*specs.Spec) {}

func (r *Runtime) config(t kind.Task) shim.Config {
	return shim.Config{Binary: r.row.Path, ID: t.PodID, Bundle: t.PodDir, Address: r.opts.Address, TTRPCAddress: r.opts.EventsAddress}
}

// client is the pod's shim connection, made again after a daemon restart.
// The connection is made outside the lock and bounded, so one shim that accepts but
// never answers holds up only its own pod.
func (r *Runtime) client(ctx context.Context, t kind.Task) (*shim.Client, error) {
	if c := r.cached(t.PodID); c != nil {
		return c, nil
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c, err := shim.Connect(cctx, r.config(t))
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.clients[t.PodID]; ok && !closed(old) {
		_ = c.Close() // another call connected first
		return old, nil
	}
	r.clients[t.PodID] = c
	return c, nil
}

// connectTimeout bounds reconnecting to a pod's shim; statsTimeout one stats reading.
const (
	connectTimeout = 10 * time.Second
	statsTimeout   = 2 * time.Second
)

func (r *Runtime) cached(podID string) *shim.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clients[podID]
	if !ok {
		return nil
	}
	if closed(c) {
		delete(r.clients, podID)
		return nil
	}
	return c
}

func closed(c *shim.Client) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

func (r *Runtime) forget(podID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[podID]; ok {
		_ = c.Close()
		delete(r.clients, podID)
	}
}

// gone tells whether err means the task (or its whole shim) no longer exists.
func gone(err error) bool {
	return errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, shim.ErrShimDied)
}

// errorf names the handler, and the operation and task unless the shim client's error
// names them already.
func (r *Runtime) errorf(op, id string, err error) error {
	var ce *shim.CallError
	if errors.As(err, &ce) {
		return fmt.Errorf("handler %q: %w", r.row.Handler, err)
	}
	return fmt.Errorf("handler %q: %s %s: %w", r.row.Handler, op, id, err)
}

// Create starts the pod's shim for its sandbox container, and creates the task. A
// container's output goes to the logger the shim starts; its stdin, if it keeps one, is a
// FIFO the logger feeds from attach clients.
func (r *Runtime) Create(ctx context.Context, t kind.Task) (kind.Created, error) {
	// A shim that never answers must not hold the caller for ever.
	ctx, cancel := monitor.WithCreateDeadline(ctx)
	defer cancel()
	// The row's options first: a row they do not fit starts no shim for the pod.
	opts := shim.CreateOptions{ID: t.ID, Bundle: t.Dir, Terminal: t.Terminal}
	var err error
	if opts.Options, err = shimopts.For(r.row.Path, r.row.ShimOptions, r.row.SystemdCgroup); err != nil {
		return kind.Created{}, r.errorf("create", t.ID, fmt.Errorf("shim_options: %w", err))
	}
	var c *shim.Client
	if t.Sandbox {
		c, err = shim.Start(ctx, r.config(t))
		if err == nil {
			r.mu.Lock()
			if old, ok := r.clients[t.PodID]; ok && old != c {
				_ = old.Close()
			}
			r.clients[t.PodID] = c
			r.mu.Unlock()
		}
	} else {
		c, err = r.client(ctx, t)
	}
	if err != nil {
		return kind.Created{}, r.errorf("create", t.ID, err)
	}
	if !t.Sandbox {
		if opts.Stdin, opts.Stdout, opts.Stderr, err = r.startLogger(ctx, t); err != nil {
			return kind.Created{}, r.errorf("create", t.ID, err)
		}
	}
	pid, err := c.Create(ctx, opts)
	if err != nil {
		return kind.Created{}, r.errorf("create", t.ID, err)
	}
	return kind.Created{Pid: int(pid), SupervisorPid: c.Pid()}, nil
}

// startLogger makes the container's stdio FIFOs and starts its logger on them: it holds
// stdin's write end before the shim opens the read end (else the container would read
// EOF at once), writes the CRI log and serves attach, in a session of its own. (The
// shim could start a logger itself through a binary:// URI, but the runc shim gives such
// a container no stdin.)
func (r *Runtime) startLogger(ctx context.Context, t kind.Task) (stdin, stdout, stderr string, err error) {
	lc := monitor.LoggerConfig{LogPath: t.LogPath, LogDir: t.LogDir, StdinOnce: t.StdinOnce, Terminal: t.Terminal}
	fifo := func(name string, want bool) (string, error) {
		if !want {
			return "", nil
		}
		path := filepath.Join(t.Dir, name)
		if err := unix.Mkfifo(path, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("%s fifo: %w", name, err)
		}
		return path, nil
	}
	if lc.Stdin, err = fifo("stdin", t.Stdin); err != nil {
		return "", "", "", err
	}
	if lc.Stdout, err = fifo("stdout", true); err != nil {
		return "", "", "", err
	}
	// A terminal has one stream.
	if lc.Stderr, err = fifo("stderr", !t.Terminal); err != nil {
		return "", "", "", err
	}
	if err := monitor.StartLogger(ctx, r.opts.MonitorPath, t.Dir, lc); err != nil {
		return "", "", "", err
	}
	return lc.Stdin, lc.Stdout, lc.Stderr, nil
}

// releaseLogger ends a container's logger whose output FIFOs the shim never opened (the
// task was never created): opening and closing their write ends gives it EOF.
func releaseLogger(dir string) {
	for _, name := range []string{"stdout", "stderr"} {
		if w, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	}
}

// Start starts the created task.
func (r *Runtime) Start(ctx context.Context, t kind.Task) error {
	c, err := r.client(ctx, t)
	if err == nil {
		_, err = c.Start(ctx, t.ID, "")
	}
	if err != nil {
		return r.errorf("start", t.ID, err)
	}
	return nil
}

// Status is the shim's State of the task; a shim or task that is gone is stopped.
func (r *Runtime) Status(ctx context.Context, t kind.Task) (string, error) {
	c, err := r.client(ctx, t)
	var st shim.State
	if err == nil {
		st, err = c.State(ctx, t.ID, "")
	}
	if err != nil {
		if gone(err) {
			return kind.TaskStopped, nil
		}
		return "", r.errorf("state", t.ID, err)
	}
	switch st.Status {
	case "created":
		return kind.TaskCreated, nil
	case "running", "paused", "pausing":
		return kind.TaskRunning, nil
	}
	return kind.TaskStopped, nil
}

// Kill signals the task's init, or all its processes. A task or shim that is gone is
// not an error: Delete cleans up after it.
func (r *Runtime) Kill(ctx context.Context, t kind.Task, sig string, all bool) error {
	n, err := oci.SignalNumber(sig)
	if err != nil {
		return r.errorf("kill", t.ID, err)
	}
	c, err := r.client(ctx, t)
	if err != nil {
		if gone(err) {
			return nil
		}
		return r.errorf("kill", t.ID, err)
	}
	err = c.Kill(ctx, t.ID, "", n, all)
	if err == nil || gone(err) {
		return nil
	}
	// A stopped task refuses signals: only an error while it still runs.
	if st, serr := c.State(ctx, t.ID, ""); serr == nil && st.Status == "stopped" {
		return nil
	}
	return r.errorf("kill", t.ID, err)
}

// Wait waits through the shim. A shim that died, or a task it no longer knows, is a lost
// end (ok false).
func (r *Runtime) Wait(ctx context.Context, t kind.Task) (kind.Exit, bool, error) {
	c, err := r.client(ctx, t)
	if err == nil {
		var e shim.Exit
		if e, err = c.Wait(ctx, t.ID, ""); err == nil {
			return kind.Exit{Status: int(e.Status), ExitedAt: e.ExitedAt}, true, nil
		}
	}
	if ctx.Err() != nil {
		return kind.Exit{}, false, ctx.Err()
	}
	if !gone(err) {
		logrus.WithError(err).WithFields(logrus.Fields{"container": t.ID, "handler": r.row.Handler}).Warn("wait through the shim failed")
	}
	return kind.Exit{}, false, nil
}

// KillLost cleans up a container whose shim died: the shim binary's delete force-deletes
// it (as containerd does for a dead shim), so nothing of it runs afterwards.
func (r *Runtime) KillLost(ctx context.Context, t kind.Task) kind.Exit {
	ctx, cancel := context.WithTimeout(ctx, kind.DefaultTimeout)
	defer cancel()
	if c, err := r.client(ctx, t); err == nil {
		// The shim lives but lost the task: make sure of it through the shim.
		_ = c.Kill(ctx, t.ID, "", syscall.SIGKILL, true)
		_, _ = c.Delete(ctx, t.ID, "")
	} else if err := shim.Cleanup(ctx, shim.Config{Binary: r.row.Path, ID: t.ID, Bundle: t.Dir, Address: r.opts.Address, TTRPCAddress: r.opts.EventsAddress}); err != nil {
		logrus.WithError(err).WithField("container", t.ID).Warn("clean up container of a dead shim")
	}
	return kind.Exit{Status: 137, Signal: 9, ExitedAt: time.Now()}
}

// Delete deletes the task; for the sandbox container it then shuts the pod's shim down.
// A shim that died is cleaned up with the shim binary's delete.
func (r *Runtime) Delete(ctx context.Context, t kind.Task) error {
	c, err := r.client(ctx, t)
	switch {
	case err == nil:
		if err := r.deleteTask(ctx, c, t); err != nil {
			return err
		}
		if t.Sandbox {
			if err := c.Shutdown(ctx); err != nil {
				logrus.WithError(err).WithField("sandbox", t.ID).Warn("shim shutdown; cleaning up after it")
				if err := shim.Cleanup(ctx, r.config(t)); err != nil {
					return r.errorf("delete", t.ID, err)
				}
			}
			r.forget(t.PodID)
		}
	case errors.Is(err, errdefs.ErrNotFound):
		// No shim was ever recorded (its start failed), or it was cleaned up before.
	default:
		if err := r.cleanupDead(ctx, t); err != nil {
			return err
		}
	}
	if !t.Sandbox {
		releaseLogger(t.Dir)
		waitLogger(ctx, t.Dir)
	}
	return nil
}

// deleteTask deletes a task through its shim, killing it first if it still runs.
func (r *Runtime) deleteTask(ctx context.Context, c *shim.Client, t kind.Task) error {
	id := t.ID
	_, err := c.Delete(ctx, id, "")
	if errors.Is(err, errdefs.ErrNotFound) {
		// The shim has no such task, yet a create sent to it may have reached the runtime
		// before the daemon died during the call (the runc shim abandons a create whose
		// caller went away, and forgets it): the shim binary's delete removes what the
		// runtime holds, as containerd does after a dead shim. This needs a shim that
		// answers Delete only once a create in flight has ended (containerd's runc shim
		// holds one lock across them); the error is only logged, because a create that
		// never reached the runtime has nothing for the binary's delete to find.
		if err := shim.DeleteLeftover(ctx, r.taskConfig(t)); err != nil {
			logrus.WithError(err).WithField("container", id).Warn("delete what an interrupted create may have left")
		}
		return nil
	}
	if err == nil || gone(err) {
		return nil
	}
	// Still running (the runc shim says "cannot delete a running process" without a
	// code): kill, wait and delete again, as a forced delete does.
	_ = c.Kill(ctx, id, "", syscall.SIGKILL, true)
	wctx, cancel := context.WithTimeout(ctx, stopWait)
	_, _ = c.Wait(wctx, id, "")
	cancel()
	if _, err := c.Delete(ctx, id, ""); err != nil && !gone(err) {
		return r.errorf("delete", id, err)
	}
	return nil
}

// taskConfig is the shim binary's configuration for an action on one task.
func (r *Runtime) taskConfig(t kind.Task) shim.Config {
	return shim.Config{Binary: r.row.Path, ID: t.ID, Bundle: t.Dir, Address: r.opts.Address, TTRPCAddress: r.opts.EventsAddress}
}

// cleanupDead runs the shim binary's delete for a task whose shim is gone.
func (r *Runtime) cleanupDead(ctx context.Context, t kind.Task) error {
	cfg := r.taskConfig(t)
	if t.Sandbox {
		cfg = r.config(t)
		r.forget(t.PodID)
	}
	if err := shim.Cleanup(ctx, cfg); err != nil {
		return r.errorf("delete", t.ID, err)
	}
	return nil
}

// waitLogger gives a container's logger the moment it needs to write its last lines and
// go, once the shim closed its output, so the caller can remove its directory.
func waitLogger(ctx context.Context, dir string) {
	deadline := time.Now().Add(2 * time.Second)
	for monitor.Alive(dir) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

// Attach connects to the container's logger, which holds its output and stdin; terminal
// sizes go to the shim, which owns the terminal.
func (r *Runtime) Attach(ctx context.Context, t kind.Task, s kind.AttachStreams) error {
	c, err := r.client(ctx, t)
	if err != nil {
		return r.errorf("attach", t.ID, err)
	}
	resize := func(sz kind.TerminalSize) {
		if err := c.ResizePty(ctx, t.ID, "", uint32(sz.Width), uint32(sz.Height)); err != nil {
			logrus.WithError(err).WithField("container", t.ID).Debug("resize terminal")
		}
	}
	in := s.Stdin
	if in != nil && t.StdinOnce {
		// The shim holds a writer on the stdin FIFO too: the container sees EOF only once
		// the shim closes it (CloseIO), after the logger closed its own. What is already in
		// the FIFO still reaches the container.
		in = &closeIOReader{r: in, closeIO: func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.CloseIO(cctx, t.ID, ""); err != nil {
				logrus.WithError(err).WithField("container", t.ID).Warn("close stdin")
			}
		}}
	}
	return monitor.AttachSession(ctx, t.Dir, in, s.Stdout, s.Stderr, s.Resize, resize)
}

// closeIOReader calls closeIO once its reader ends.
type closeIOReader struct {
	r       io.Reader
	once    sync.Once
	closeIO func()
}

func (c *closeIOReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil {
		c.once.Do(func() { go c.closeIO() })
	}
	return n, err
}

// ReopenLog asks the container's logger to reopen its log file.
func (r *Runtime) ReopenLog(ctx context.Context, t kind.Task) error {
	if err := monitor.Command(ctx, t.Dir, monitor.CmdReopen); err != nil {
		return fmt.Errorf("reopen log of %s: %w", t.ID, err)
	}
	return nil
}

// Update applies new limits through the shim.
func (r *Runtime) Update(ctx context.Context, t kind.Task, res *specs.LinuxResources) error {
	c, err := r.client(ctx, t)
	if err == nil {
		err = c.Update(ctx, t.ID, res)
	}
	if err != nil {
		return r.errorf("update", t.ID, err)
	}
	return nil
}

// Stats are the shim's metrics of the task: they work where the container lives in a VM.
// Bounded: a stuck shim must not hold kubelet's stats loop. The shim's metrics name no
// processes, and its v1 metrics carry no pressure: those come from the host cgroup the
// spec named, where it exists and holds processes (runc's shim). A VM shim's containers
// have no such cgroup on the host, so they get none; nor does a Usage reading, which needs
// neither.
func (r *Runtime) Stats(ctx context.Context, t kind.Task, cgroupsPath string, scope cgstats.Scope) (cgstats.Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	c, err := r.client(ctx, t)
	if err != nil {
		return cgstats.Stats{}, err
	}
	s, err := c.Stats(ctx, t.ID)
	if err != nil {
		return s, err
	}
	dir, err := cgpath.Dir(cgroupsPath)
	if err != nil {
		return s, nil
	}
	r.cgOnce.Do(func() { r.cg = cgstats.New("/sys/fs/cgroup") })
	if scope == cgstats.Usage {
		// The CRI's stats carry PSI; the shim's metrics may not (the runc shim's v1 do not).
		if s.Pressure == nil && r.cg.V2() {
			s.Pressure = r.cg.Pressure(dir)
		}
		return s, nil
	}
	if pids, err := r.cg.Procs(dir); err == nil && len(pids) > 0 {
		s.Pids = pids
		if s.Pressure == nil {
			s.Pressure = r.cg.Pressure(dir)
		}
	}
	return s, nil
}

// Version is the shim binary's name and the Version line of its -v.
func (r *Runtime) Version(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, r.row.Path, "-v")
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("handler %q: %s -v: %w", r.row.Handler, r.row.Path, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version:"); ok {
			return filepath.Base(r.row.Path) + " " + strings.TrimSpace(v), nil
		}
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

// Features: a shim has no `features` command; discovery uses the kind's defaults and
// what the row declares.
func (r *Runtime) Features(context.Context) (*features.Features, error) {
	return nil, errors.New("shim v2 runtimes do not report OCI features")
}

// Probe runs the bundle as a pod's sandbox container under a shim of its own, to the
// end, and leaves nothing of it.
func (r *Runtime) Probe(ctx context.Context, id, dir string) (kind.ProbeResult, error) {
	t := kind.Task{ID: id, PodID: id, Sandbox: true, Dir: dir, PodDir: dir}
	err := func() error {
		if _, err := r.Create(ctx, t); err != nil {
			return err
		}
		if err := r.Start(ctx, t); err != nil {
			return err
		}
		e, ok, err := r.Wait(ctx, t)
		switch {
		case err != nil:
			return err
		case !ok:
			return errors.New("the shim lost the probe container")
		case e.Status != 0:
			return fmt.Errorf("the probe container exited with status %d%s", e.Status, shimLogTail(dir))
		}
		return nil
	}()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopWait)
	defer cancel()
	if derr := r.Delete(dctx, t); derr != nil && err == nil {
		err = derr
	}
	return kind.ProbeResult{}, err
}

// shimLogTail is the end of the shim's own log, for error messages.
func shimLogTail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, shim.LogFile))
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	if len(b) > 300 {
		b = b[len(b)-300:]
	}
	return ": shim log: " + string(b)
}

// Exec runs a process in the task through the shim, its stdio over FIFOs in x.Dir.
func (r *Runtime) Exec(ctx context.Context, t kind.Task, x kind.ExecSpec) (kind.ExecProcess, error) {
	c, err := r.client(ctx, t)
	if err != nil {
		return nil, r.errorf("exec in", t.ID, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := &execProcess{c: c, id: t.ID, execID: "exec-" + hex.EncodeToString(b[:]), done: make(chan struct{})}
	opts := shim.ExecOptions{ID: t.ID, ExecID: p.execID, Process: x.Process, Terminal: x.Terminal}
	fifo := func(name string) (string, error) {
		path := filepath.Join(x.Dir, name)
		if err := unix.Mkfifo(path, 0o600); err != nil {
			return "", r.errorf("exec in", t.ID, fmt.Errorf("%s fifo %s: %w", name, path, err))
		}
		return path, nil
	}
	if x.Stdin != nil {
		if opts.Stdin, err = fifo("stdin"); err != nil {
			return nil, err
		}
	}
	if opts.Stdout, err = fifo("stdout"); err != nil {
		return nil, err
	}
	outputs := []struct {
		path string
		w    io.Writer
	}{{opts.Stdout, x.Stdout}}
	if !x.Terminal {
		if opts.Stderr, err = fifo("stderr"); err != nil {
			return nil, err
		}
		outputs = append(outputs, struct {
			path string
			w    io.Writer
		}{opts.Stderr, x.Stderr})
	}
	for _, o := range outputs {
		p.readers = append(p.readers, readFIFO(o.path, o.w))
	}
	if err := c.Exec(ctx, opts); err != nil {
		p.abort()
		return nil, r.errorf("exec in", t.ID, err)
	}
	if _, err := c.Start(ctx, t.ID, p.execID); err != nil {
		p.abort()
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = c.Delete(dctx, t.ID, p.execID)
		cancel()
		return nil, r.errorf("exec in", t.ID, err)
	}
	go func() {
		p.exit, p.err = c.Wait(context.Background(), t.ID, p.execID)
		close(p.done)
	}()
	if x.Stdin != nil {
		go func() {
			in, err := openStdinWriter(opts.Stdin, p.done)
			if err != nil {
				logrus.WithError(err).WithFields(logrus.Fields{"container": t.ID, "exec": p.execID}).Warn("exec stdin")
				return
			}
			go func() {
				<-p.done
				in.Close()
			}()
			_, _ = io.Copy(in, x.Stdin)
			in.Close()
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.CloseIO(cctx, t.ID, p.execID)
		}()
	}
	if x.Terminal && x.Resize != nil {
		go func() {
			for sz := range x.Resize {
				_ = c.ResizePty(context.Background(), t.ID, p.execID, uint32(sz.Width), uint32(sz.Height))
			}
		}()
	}
	return p, nil
}

// openStdinWriter opens the write end of an exec's stdin FIFO once the shim holds its read
// end. The shim opens it after Start, in the background (containerd's fifo package opens
// in a goroutine), so Start returning does not mean a reader is there yet: a
// non-blocking open until then fails with ENXIO. Non-blocking so that a process that
// stopped reading gives EPIPE rather than a write blocked for ever; given up when the
// process ends or after 10 s.
func openStdinWriter(path string, done <-chan struct{}) (*os.File, error) {
	deadline := time.After(10 * time.Second)
	for {
		f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NONBLOCK, 0)
		if err == nil || !errors.Is(err, unix.ENXIO) {
			return f, err
		}
		select {
		case <-done:
			return nil, fmt.Errorf("open %s: process ended before the shim opened it", path)
		case <-deadline:
			return nil, fmt.Errorf("open %s: the shim did not open it within 10s: %w", path, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fifoReader copies one output FIFO to a writer. Its blocking open returns once the shim
// opens the write end; the copy ends at EOF, when the shim closes it.
type fifoReader struct {
	path    string
	mu      sync.Mutex
	f       *os.File
	stopped bool
	copied  chan struct{}
}

func readFIFO(path string, w io.Writer) *fifoReader {
	fr := &fifoReader{path: path, copied: make(chan struct{})}
	if w == nil {
		w = io.Discard
	}
	go func() {
		defer close(fr.copied)
		f, err := os.OpenFile(path, os.O_RDONLY, 0)
		if err != nil {
			return
		}
		fr.mu.Lock()
		fr.f = f
		stopped := fr.stopped
		fr.mu.Unlock()
		if stopped { // stop ran between the open and here
			f.Close()
			return
		}
		_, _ = io.Copy(w, f)
		f.Close()
	}()
	return fr
}

// stop ends the reader: an open still waiting for a writer is released by opening the
// write end once, a copy under way by closing the file.
func (fr *fifoReader) stop() {
	if w, err := os.OpenFile(fr.path, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
		w.Close()
	}
	fr.mu.Lock()
	fr.stopped = true
	if fr.f != nil {
		fr.f.Close()
	}
	fr.mu.Unlock()
	<-fr.copied
}

type execProcess struct {
	c          *shim.Client
	id, execID string
	readers    []*fifoReader
	done       chan struct{}
	exit       shim.Exit
	err        error
}

func (p *execProcess) abort() {
	for _, fr := range p.readers {
		fr.stop()
	}
}

// Wait waits for the process, then for its output (up to a bound: a child it left behind
// may hold the streams), and deletes it from the shim.
func (p *execProcess) Wait() (int, error) {
	<-p.done
	// One deadline for all streams: a child left behind may hold them all.
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	expired := false
	for _, fr := range p.readers {
		if !expired {
			select {
			case <-fr.copied:
				continue
			case <-deadline.C:
				expired = true
			}
		}
		fr.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = p.c.Delete(ctx, p.id, p.execID)
	if p.err != nil {
		return 0, fmt.Errorf("exec in %s: %w", p.id, p.err)
	}
	return int(p.exit.Status), nil
}

// Kill kills the exec'd process through the shim.
func (p *execProcess) Kill() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.c.Kill(ctx, p.id, p.execID, syscall.SIGKILL, false); err != nil && !gone(err) {
		logrus.WithError(err).WithFields(logrus.Fields{"container": p.id, "exec": p.execID}).Warn("kill exec'd process")
	}
}
