package container

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/failpoint"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/monitor"
	"github.com/rtshimd/rtshimd/internal/phasetime"
)

// Start starts a created container.
func (m *Manager) Start(ctx context.Context, id string) error {
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	sb, err := m.opts.Sandboxes.Get(c.SandboxID)
	if err != nil {
		return fmt.Errorf("container %s: %w", c.ID, err)
	}
	release, err := sb.Use()
	if err != nil {
		return fmt.Errorf("start container %s: %w", c.ID, err)
	}
	defer release()
	c.op.Lock()
	defer c.op.Unlock()
	if st := c.Status().State; st != StateCreated {
		return fmt.Errorf("container %s is %s, not created: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	tm := phasetime.Start(ctx, "StartContainer")
	// The start time is taken before the runtime is asked: a container that exits at
	// once may be reported exited before the command returns, and its finish time must
	// not precede its start.
	if m.opts.NRI != nil {
		if err := m.opts.NRI.StartContainer(ctx, c); err != nil {
			return err
		}
		tm.Mark("nri")
	}
	started := time.Now().UnixNano()
	// A container the runtime runs must not stay running while its record says created
	// (kubelet would start it again, or a second copy). As containerd, it is killed; its
	// exit is then recorded as any other (watch), with the request's context ended or not.
	kill := func() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
		defer cancel()
		if kerr := c.rt.Kill(kctx, c.Task(), "SIGKILL", true); kerr != nil {
			logrus.WithError(kerr).WithField("container", c.ID).Error("kill a container whose start could not be recorded")
		}
	}
	killStarted := func(err error) error {
		kill()
		return fmt.Errorf("start container %s: the runtime started it, then: %w (it was killed)", c.ID, err)
	}
	giveBack := func(bool) {}
	if c.Restore != "" {
		// The restore makes the container as a create would: runc binds the pod's files
		// from its tmpfs. Its rootfs stays on the node's table (the spec is not read here
		// to tell whether hooks after the start need it).
		if giveBack, err = m.opts.Sandboxes.LendTmpfs(sb); err != nil {
			return fmt.Errorf("start container %s: %w", c.ID, err)
		}
	}
	err = c.rt.Start(ctx, c.Task())
	giveBack(false)
	if err != nil {
		return startFailed(ctx, c, err, kill, killStarted)
	}
	tm.Mark("runtime_start")
	// The runtime runs it now: a failure from here on kills it.
	if err := failpoint.Fail("start-container/runtime-started"); err != nil {
		return killStarted(err)
	}
	pid := 0
	if c.Restore != "" {
		// A restored container's init is known from its restore on (its create made none).
		if pid, err = readPidFile(filepath.Join(c.Dir, monitor.PidFile)); err != nil {
			return killStarted(err)
		}
		if c.RestoreNoNewPrivs {
			if err := checkNoNewPrivs(pid); err != nil {
				return killStarted(err)
			}
		}
	}
	if err := m.update(c, func(s *Status) {
		if s.State == StateCreated {
			s.State = StateRunning
		}
		s.StartedAt = started
		if pid > 0 {
			s.Pid = pid
		}
	}); err != nil {
		return killStarted(err)
	}
	if c.Restore != "" {
		// The checkpoint's memory is in the processes now: the unpacked archive goes.
		if err := os.RemoveAll(c.Restore); err != nil {
			logrus.WithError(err).WithField("container", c.ID).Warn("remove the restored checkpoint")
		}
	}
	if err := failpoint.Fail("start-container/done"); err != nil { // a crash before the reply, or a failure after the record
		return killStarted(err)
	}
	tm.Mark("persist")
	logrus.WithField("container", c.ID).Info("container started")
	m.publish(c, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	tm.Mark("publish")
	tm.Log(logrus.Fields{"container": c.ID}, "container start timing")
	if m.opts.NRI != nil {
		m.opts.NRI.PostStartContainer(ctx, c)
	}
	return nil
}

// readPidFile reads a runtime's --pid-file.
func readPidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: %q is not a pid", path, b)
	}
	return pid, nil
}

// startFailed answers a start the runtime failed. The runtime may have started the
// container all the same: the caller's deadline passed while the monitor ran the start
// (it carries on), runc start was killed at the monitor's limit while poststart hooks ran
// (the process was exec'd), a shim's Start timed out. So the runtime is asked, with a
// context of its own since the request's may have ended, and a container that runs, or
// ran, is killed and its exit recorded as any other; one it cannot tell about is killed
// too, as containerd deletes the task with its process on any start error. One that is
// still created stays so, for kubelet to remove (audit 2026-11-26, N7).
func startFailed(ctx context.Context, c *Container, err error, kill func(), killStarted func(error) error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kind.DefaultTimeout)
	st, serr := c.rt.Status(sctx, c.Task())
	cancel()
	switch {
	case serr != nil:
		logrus.WithError(serr).WithField("container", c.ID).Warn("a failed start's container cannot be told about; killing it")
		kill()
		return fmt.Errorf("start container %s: %w (the runtime could not say whether it started it: %v; it was killed)", c.ID, err, serr)
	case st == kind.TaskRunning || st == kind.TaskStopped:
		logrus.WithError(err).WithFields(logrus.Fields{"container": c.ID, "state": st}).Warn("the runtime started a container whose start failed; killing it")
		return killStarted(err)
	}
	return err
}
