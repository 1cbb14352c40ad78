package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/podcgroup"
	"github.com/rtshimd/rtshimd/internal/failpoint"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/retry"
)

// Remove removes a container, killing it if it runs. A container that is gone is not an
// error.
func (m *Manager) Remove(ctx context.Context, id string) error {
	c, unlock, ok, err := m.index.Hold(id)
	if !ok {
		return err // nil: gone, or removed by a concurrent call
	}
	defer unlock()
	// A container kept because its create and cleanup failed never ran, and plugins were
	// told of its removal already: only its cleanup is left.
	if st := c.Status(); st.State != StateUnknown || st.Reason != reasonCleanupFailed {
		if err := m.stop(ctx, c, 0); err != nil {
			return err
		}
		if m.opts.NRI != nil {
			// From the plugins' RemoveContainer to the container's leaving the list, no
			// plugin is synchronized: one that connects now would otherwise be given the
			// container and miss its removal (the callers of Remove hold no block).
			defer m.opts.NRI.BlockSync()()
			// Before the bundle goes: plugins get the container with its spec.
			m.opts.NRI.RemoveContainer(ctx, c)
		}
	}
	if err := m.cleanup(c); err != nil {
		return err
	}
	m.index.Remove(c)
	logrus.WithField("container", c.ID).Info("container removed")
	m.publish(c, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	return nil
}

// reasonCleanupFailed marks a container kept because its cleanup failed.
const reasonCleanupFailed = "CleanupFailed"

// cleanupRetry is how often a container whose cleanup failed is tried again.
var cleanupRetry = 5 * time.Second

// keepForCleanup keeps a container whose create failed and whose cleanup failed too: it
// still holds what cleanup could not undo (a mount, runtime state, a layer), so it stays
// listed, UNKNOWN with the reason, its name reserved and its record kept, and cleanup is
// retried in the background until it succeeds (or kubelet's RemoveContainer does it).
// Dropping it would leak whatever it holds with nothing left to find it by.
func (m *Manager) keepForCleanup(c *Container, createErr, cleanupErr error) {
	log := logrus.WithFields(logrus.Fields{"container": c.ID, "name": c.Name})
	log.WithError(cleanupErr).Error("cleanup of failed container failed; keeping it listed as unknown and retrying")
	_ = m.update(c, func(s *Status) {
		s.State, s.Reason = StateUnknown, reasonCleanupFailed
		s.Message = fmt.Sprintf("create failed (%v) and its cleanup failed (%v); retrying", createErr, cleanupErr)
	})
	c.exited.Mark()
	m.index.Add(c)
	m.retryCleanup(c)
}

// retryCleanup removes a container kept for cleanup in the background, every cleanupRetry,
// until it succeeds. A daemon that stops first leaves the record, and the next one's
// recovery takes it up again.
func (m *Manager) retryCleanup(c *Container) {
	log := logrus.WithFields(logrus.Fields{"container": c.ID, "name": c.Name, "step": "cleanup of a failed create"})
	retry.Every(m.ctx, &m.wg, cleanupRetry, log, func() error { return m.Remove(m.ctx, c.ID) })
}

// cleanup undoes everything a container may hold, whatever state it reached, and deletes
// its record. Safe to repeat.
func (m *Manager) cleanup(c *Container) error {
	if err := failpoint.Fail("container-cleanup"); err != nil {
		return fmt.Errorf("clean up container %s: %w", c.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kind.DefaultTimeout)
	defer cancel()
	var errs []error
	if c.rt != nil {
		if err := c.rt.Delete(ctx, c.Task()); err != nil {
			errs = append(errs, fmt.Errorf("delete container: %w", err))
		}
		if err := failpoint.Fail("remove-container/runtime-deleted"); err != nil {
			return err
		}
		if len(errs) == 0 {
			if err := podcgroup.RemoveLeft(c.CgroupsPath, c.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) == 0 {
		// Never pull the filesystem from under a process the runtime failed to remove.
		if err := unmountUsernsMounts(c.Dir); err != nil {
			errs = append(errs, err)
		} else {
			if err := m.opts.Images.RemoveVolumes(c.ID); err != nil {
				errs = append(errs, err)
			}
			if err := m.opts.Images.RemoveRootfs(c.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("clean up container %s: %w", c.ID, errors.Join(errs...))
	}
	if err := failpoint.Fail("remove-container/rootfs-removed"); err != nil {
		return err
	}
	if c.Restore != "" {
		if err := os.RemoveAll(c.Restore); err != nil {
			return fmt.Errorf("clean up container %s: %w", c.ID, err)
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("clean up container %s: %w", c.ID, err)
	}
	return c.status.Forget(m.opts.Store, c.ID)
}

// RemoveAll removes every container of a sandbox (RemovePodSandbox).
func (m *Manager) RemoveAll(ctx context.Context, sandboxID string) error {
	var errs []error
	for _, c := range m.OfSandbox(sandboxID) {
		if err := m.Remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
