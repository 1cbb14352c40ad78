package container

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgcontrollers"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/failpoint"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/oci"
)

// MaxExecOutput caps what one ExecSync returns, stdout and stderr together: the answer
// must fit the 16 MiB gRPC message limit (kubelet's and this server's), less room for the
// message's own fields. As containerd and CRI-O (CVE-2022-31030, CVE-2022-1708, a 16 MiB
// cap) the rest is read and dropped silently (so the process never blocks on a full
// pipe; the output is byte-exact up to the cap); here it is also logged.
const MaxExecOutput = 16<<20 - 64<<10

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
	budget := &execBudget{left: MaxExecOutput}
	stdout, stderr := &capped{budget: budget}, &capped{budget: budget}
	x, err := m.prepareExec(c, cmd, false)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(x.Dir)
	x.Stdout, x.Stderr = stdout, stderr
	p, err := c.rt.Exec(ctx, c.Task(), x)
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
		if n := budget.droppedBytes(); n > 0 {
			logrus.WithFields(logrus.Fields{"container": c.ID, "cmd": strings.Join(cmd, " "), "kept": MaxExecOutput, "dropped": n}).Warn("exec output truncated to fit the gRPC message limit")
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

// execBudget is the room left for an exec's output, shared by its streams, and what was
// dropped beyond it.
type execBudget struct {
	mu      sync.Mutex
	left    int
	dropped int64
}

// take returns how much of n bytes may be kept.
func (b *execBudget) take(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := min(n, b.left)
	b.left -= k
	b.dropped += int64(n - k)
	return k
}

func (b *execBudget) droppedBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// capped keeps what its budget allows and drops the rest, always reporting the whole
// write as done, so the copy from the process goes on to EOF. The buffer is a field, not
// embedded: an embedded bytes.Buffer's ReadFrom would let io.Copy bypass Write, and the
// cap with it.
type capped struct {
	buf    bytes.Buffer
	budget *execBudget
}

func (w *capped) Write(p []byte) (int, error) {
	if k := w.budget.take(len(p)); k > 0 {
		w.buf.Write(p[:k])
	}
	return len(p), nil
}

func (w *capped) Bytes() []byte { return w.buf.Bytes() }

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

// applyResources updates the runtime, then the record; when the record cannot be written,
// the runtime is set back to the limits the record still names, so that what
// ContainerStatus reports stays what the container has and kubelet's retry starts from it.
func (m *Manager) applyResources(ctx context.Context, c *Container, res *specs.LinuxResources) error {
	cgcontrollers.Default().Trim(res, c.CgroupsPath)
	prev := c.Status().Resources
	if err := c.rt.Update(ctx, c.Task(), res); err != nil {
		return err
	}
	b, _ := json.Marshal(res)
	err := failpoint.Fail("update-container/runtime-updated")
	if err == nil {
		err = m.update(c, func(s *Status) { s.Resources = b })
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("update container %s: record the new limits: %w", c.ID, err)
	undo := undoResources(prev, res)
	cgcontrollers.Default().Trim(undo, c.CgroupsPath)
	if uerr := c.rt.Update(context.WithoutCancel(ctx), c.Task(), undo); uerr != nil {
		logrus.WithError(uerr).WithField("container", c.ID).Error("cannot set back the limits of a container whose update failed; ContainerStatus reports the old ones")
		return fmt.Errorf("%w (setting the old limits back failed too: %v)", err, uerr)
	}
	return fmt.Errorf("%w (the old limits were set back)", err)
}

// undoResources is what sets a container back from next to prev, the limits recorded
// before (JSON of specs.LinuxResources): prev itself, with "no limit" where prev had none
// and next set one (runc's update leaves a field it is not given as it is).
func undoResources(prev json.RawMessage, next *specs.LinuxResources) *specs.LinuxResources {
	undo := &specs.LinuxResources{}
	if len(prev) > 0 {
		_ = json.Unmarshal(prev, undo)
	}
	unlimited := int64(-1)
	if next.Memory != nil {
		if undo.Memory == nil {
			undo.Memory = &specs.LinuxMemory{}
		}
		if next.Memory.Limit != nil && undo.Memory.Limit == nil {
			undo.Memory.Limit = &unlimited
		}
		if next.Memory.Swap != nil && undo.Memory.Swap == nil {
			undo.Memory.Swap = &unlimited
		}
	}
	if next.CPU != nil && next.CPU.Quota != nil {
		if undo.CPU == nil {
			undo.CPU = &specs.LinuxCPU{}
		}
		if undo.CPU.Quota == nil {
			undo.CPU.Quota = &unlimited
		}
	}
	return undo
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
	return c.rt.ReopenLog(ctx, c.Task())
}
