package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/pkg/cgcontrollers"
	"github.com/rtshimd/rtshimd/pkg/errdefs"
	"github.com/rtshimd/rtshimd/pkg/monitor"
	"github.com/rtshimd/rtshimd/pkg/oci"
	"github.com/rtshimd/rtshimd/pkg/store"
)

// MaxExecOutput is kubelet's cap on what ExecSync returns per stream.
const MaxExecOutput = 16 << 20

// ExecResult is what an ExecSync returns.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int32
}

// ExecSync runs cmd in the running container and waits for it; with timeout > 0 (seconds)
// the process is killed when it expires and the error says so.
func (m *Manager) ExecSync(ctx context.Context, id string, cmd []string, timeout int64) (*ExecResult, error) {
	c, err := m.Get(id)
	if err != nil {
		return nil, err
	}
	x, err := m.prepareExec(c, cmd, false)
	if err != nil {
		return nil, err
	}
	defer x.cleanup()
	args, pidFile := append(x.args, c.ID), x.pidFile
	run := exec.Command(c.Runtime.Path, args...)
	stdout, stderr := &capped{max: MaxExecOutput}, &capped{max: MaxExecOutput}
	run.Stdout, run.Stderr = stdout, stderr
	// runsc's sandbox can keep the pipes open; never wait for EOF beyond this.
	run.WaitDelay = 2 * time.Second
	if err := run.Start(); err != nil {
		return nil, fmt.Errorf("handler %q: exec in %s: %w", c.Handler, c.ID, err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(time.Duration(timeout) * time.Second)
		defer t.Stop()
		expire = t.C
	}
	var werr error
	timedOut := false
	select {
	case werr = <-done:
	case <-expire:
		timedOut = true
	case <-ctx.Done():
		timedOut = true
	}
	if timedOut {
		// Kill the process first and let the runtime's exec reap it and return: killing
		// the runtime first would orphan the process to the container's init, which may
		// never reap it.
		m.killExec(c, pidFile)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = run.Process.Kill()
			<-done
		}
		what := fmt.Sprintf("timed out after %ds", timeout)
		if ctx.Err() != nil {
			what = ctx.Err().Error()
		}
		return nil, fmt.Errorf("exec %q in container %s %s; the process was killed: %w", strings.Join(cmd, " "), c.ID, what, context.DeadlineExceeded)
	}
	res := &ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exitErr *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &exitErr):
		res.ExitCode = int32(exitErr.ExitCode())
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int32(ws.Signal())
		}
		// A runtime that could not even start the process says so on stderr and exits
		// non-zero, which is what the user sees either way.
	case errors.Is(werr, exec.ErrWaitDelay):
	default:
		return nil, fmt.Errorf("handler %q: exec in %s: %w", c.Handler, c.ID, werr)
	}
	return res, nil
}

// killExec kills an exec'd process: a host pid for the runc family; for sandboxed
// runtimes the pid inside the sandbox, through the runtime.
func (m *Manager) killExec(c *Container, pidFile string) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	if !c.Shared {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Runtime.Path, append(c.Runtime.GlobalArgs(), "kill", "--pid", strconv.Itoa(pid), c.ID, "KILL")...).CombinedOutput()
	if err != nil {
		logrus.WithField("container", c.ID).Warnf("kill exec'd process %d: %v: %s", pid, err, out)
	}
}

// execPrep is an exec's process file and runtime arguments (without the container ID).
type execPrep struct {
	dir, pidFile string
	args         []string
}

func (x *execPrep) cleanup() { os.RemoveAll(x.dir) }

// prepareExec checks the container runs and writes the process the exec runs: the
// container's own (user, environment, capabilities) with another command.
func (m *Manager) prepareExec(c *Container, cmd []string, tty bool) (*execPrep, error) {
	if len(cmd) == 0 {
		return nil, invalid("cmd is empty")
	}
	if st := c.Status().State; st != StateRunning {
		return nil, fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	spec, err := c.Spec()
	if err != nil {
		return nil, fmt.Errorf("read the spec of container %s: %w", c.ID, err)
	}
	if spec.Process == nil {
		return nil, fmt.Errorf("the spec of container %s has no process to take user and environment from", c.ID)
	}
	proc := *spec.Process
	proc.Args = cmd
	proc.Terminal = tty
	proc.ConsoleSize = nil
	dir, err := os.MkdirTemp(c.Dir, "exec-")
	if err != nil {
		return nil, err
	}
	x := &execPrep{dir: dir}
	pj, _ := json.Marshal(&proc)
	procFile := filepath.Join(dir, "process.json")
	if err := store.WriteFileAtomic(procFile, pj, 0o600); err != nil {
		x.cleanup()
		return nil, err
	}
	x.pidFile = filepath.Join(dir, "pid")
	x.args = append(c.Runtime.GlobalArgs(), "exec", "--process", procFile, "--pid-file", x.pidFile)
	if c.Shared {
		// runsc's --pid-file names a host process; the one to kill lives in the sandbox.
		x.pidFile = filepath.Join(dir, "internal-pid")
		x.args = append(x.args, "--internal-pid-file", x.pidFile)
	}
	return x, nil
}

// capped keeps at most max bytes and drops the rest.
type capped struct {
	bytes.Buffer
	max int
}

func (w *capped) Write(p []byte) (int, error) {
	if room := w.max - w.Len(); room > 0 {
		w.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// UpdateResources applies new CPU and memory limits through the runtime's `update`.
func (m *Manager) UpdateResources(ctx context.Context, id string, r *runtimeapi.LinuxContainerResources) error {
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	if r == nil {
		return invalid("linux (LinuxContainerResources) is required: rtshimd updates Linux CPU and memory limits")
	}
	if st := c.Status().State; st != StateRunning && st != StateCreated {
		return fmt.Errorf("container %s is %s: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	res, err := oci.Resources(r)
	if err != nil {
		return err
	}
	cgcontrollers.Default().Trim(res, c.CgroupsPath)
	b, _ := json.Marshal(res)
	f := filepath.Join(c.Dir, "resources.json")
	if err := store.WriteFileAtomic(f, b, 0o600); err != nil {
		return err
	}
	defer os.Remove(f)
	if err := c.Runtime.Update(ctx, c.ID, f); err != nil {
		return err
	}
	c.setState(func(s *Status) { s.Resources = b })
	return m.persist(c, false)
}

// ReopenLog makes the monitor reopen the container's log file (kubelet rotated it).
func (m *Manager) ReopenLog(ctx context.Context, id string) error {
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	if st := c.Status().State; st != StateRunning {
		return fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	if err := monitor.Command(ctx, c.Dir, monitor.CmdReopen); err != nil {
		return fmt.Errorf("reopen log of %s: %w", c.ID, err)
	}
	return nil
}
