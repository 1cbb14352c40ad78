package container

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/failpoint"
)

// killWait bounds the wait for a container to die after SIGKILL.
const killWait = 10 * time.Second

// Stop stops a running container: its stop signal, then SIGKILL after timeout seconds.
// A container that is not running (or gone) is not an error.
func (m *Manager) Stop(ctx context.Context, id string, timeout int64) error {
	c, unlock, ok, err := m.index.Hold(id)
	if !ok {
		return err
	}
	defer unlock()
	if err := m.stop(ctx, c, timeout); err != nil {
		return err
	}
	if m.opts.NRI != nil && c.Status().State == StateExited {
		m.opts.NRI.StopContainer(ctx, c)
	}
	return nil
}

func (m *Manager) stop(ctx context.Context, c *Container, timeout int64) error {
	if st := c.Status().State; st != StateRunning && st != StateUnknown {
		return nil
	}
	log := logrus.WithField("container", c.ID)
	if timeout > 0 {
		if err := c.rt.Kill(ctx, c.Task(), c.StopSignal, false); err != nil && !m.hasExited(c) {
			log.WithError(err).Warn("stop signal")
		}
		select {
		case <-c.exited.Done():
			return nil
		case <-time.After(time.Duration(timeout) * time.Second):
			log.WithField("timeout", timeout).Info("container ignored its stop signal; killing it")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := c.rt.Kill(ctx, c.Task(), "SIGKILL", true); err != nil && !m.hasExited(c) {
		return fmt.Errorf("kill container %s: %w", c.ID, err)
	}
	if err := failpoint.Fail("stop-container/killed"); err != nil {
		return err
	}
	select {
	case <-c.exited.Done():
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("container %s did not exit %v after SIGKILL", c.ID, killWait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Manager) hasExited(c *Container) bool {
	select {
	case <-c.exited.Done():
		return true
	case <-time.After(100 * time.Millisecond):
		return false
	}
}

// StopAll stops every container of a sandbox (StopPodSandbox).
func (m *Manager) StopAll(ctx context.Context, sandboxID string) error {
	var errs []error
	for _, c := range m.OfSandbox(sandboxID) {
		if err := m.Stop(ctx, c.ID, 0); err != nil {
			errs = append(errs, err)
		}
	}
	// Containers of the pod kept without a usable record: the pod's stop is the decision
	// an operator's would be, and they must not outlive its namespaces.
	if m.anyKept() {
		m.StopRequested(ctx, []string{sandboxID})
	}
	return errors.Join(errs...)
}
