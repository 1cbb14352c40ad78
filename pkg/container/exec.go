package container

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/pkg/cgcontrollers"
	"github.com/rtshimd/rtshimd/pkg/errdefs"
	"github.com/rtshimd/rtshimd/pkg/kind"
	"github.com/rtshimd/rtshimd/pkg/oci"
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
	stdout, stderr := &capped{max: MaxExecOutput}, &capped{max: MaxExecOutput}
	x, err := m.prepareExec(c, cmd, false)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(x.Dir)
	x.Stdout, x.Stderr = stdout, stderr
	p, err := c.rt.Exec(ctx, c.task(), x)
	if err != nil {
		return nil, err
	}
	var code int
	var werr error
	done := make(chan struct{})
	go func() { code, werr = p.Wait(); close(done) }()
	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(time.Duration(timeout) * time.Second)
		defer t.Stop()
		expire = t.C
	}
	select {
	case <-done:
	case <-expire:
	case <-ctx.Done():
	}
	select {
	case <-done:
		if werr != nil {
			return nil, werr
		}
		return &ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: int32(code)}, nil
	default:
	}
	p.Kill()
	waitKilled(done)
	what := fmt.Sprintf("timed out after %ds", timeout)
	if ctx.Err() != nil {
		what = ctx.Err().Error()
	}
	return nil, fmt.Errorf("exec %q in container %s %s; the process was killed: %w", strings.Join(cmd, " "), c.ID, what, context.DeadlineExceeded)
}

// killedWait bounds the wait for a killed exec to be reaped: a runtime that does not
// answer must not hold the caller (kubelet's probe) for ever.
const killedWait = 15 * time.Second

func waitKilled(done <-chan struct{}) {
	select {
	case <-done:
	case <-time.After(killedWait):
	}
}

// prepareExec checks the container runs and makes the process the exec runs: the
// container's own (user, environment, capabilities) with another command, and a scratch
// directory for the runtime (the caller removes it).
func (m *Manager) prepareExec(c *Container, cmd []string, tty bool) (kind.ExecSpec, error) {
	if len(cmd) == 0 {
		return kind.ExecSpec{}, invalid("cmd is empty")
	}
	if st := c.Status().State; st != StateRunning {
		return kind.ExecSpec{}, fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	spec, err := c.Spec()
	if err != nil {
		return kind.ExecSpec{}, fmt.Errorf("read the spec of container %s: %w", c.ID, err)
	}
	if spec.Process == nil {
		return kind.ExecSpec{}, fmt.Errorf("the spec of container %s has no process to take user and environment from", c.ID)
	}
	proc := *spec.Process
	proc.Args = cmd
	proc.Terminal = tty
	proc.ConsoleSize = nil
	dir, err := os.MkdirTemp(c.Dir, "exec-")
	if err != nil {
		return kind.ExecSpec{}, err
	}
	return kind.ExecSpec{Process: &proc, Dir: dir, Terminal: tty}, nil
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
	if m.opts.NRI != nil {
		if res, err = m.opts.NRI.UpdateContainer(ctx, c, res); err != nil {
			return err
		}
	}
	if err := m.applyResources(ctx, c, res); err != nil {
		return err
	}
	if m.opts.NRI != nil {
		m.opts.NRI.PostUpdateContainer(ctx, c)
	}
	return nil
}

// ApplyResources sets a container's limits as UpdateResources does, without telling NRI
// plugins: it is how their own updates are applied.
func (m *Manager) ApplyResources(ctx context.Context, id string, res *specs.LinuxResources) error {
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	if st := c.Status().State; st != StateRunning && st != StateCreated {
		return fmt.Errorf("container %s is %s: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	return m.applyResources(ctx, c, res)
}

func (m *Manager) applyResources(ctx context.Context, c *Container, res *specs.LinuxResources) error {
	cgcontrollers.Default().Trim(res, c.CgroupsPath)
	if err := c.rt.Update(ctx, c.task(), res); err != nil {
		return err
	}
	b, _ := json.Marshal(res)
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
	return c.rt.ReopenLog(ctx, c.task())
}
