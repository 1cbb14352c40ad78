package sandbox

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

// Remove stops the sandbox if needed, removes its containers (ctrs) and releases all it
// holds. A sandbox that is gone is not an error.
func (m *Manager) Remove(ctx context.Context, id string, ctrs PodContainers) error {
	sb, unlock, ok, err := m.index.Hold(id)
	if !ok {
		return err // nil: gone, or removed by a concurrent call
	}
	defer unlock()
	if err := m.stop(ctx, sb, ctrs); err != nil {
		return err
	}
	if ctrs != nil {
		if err := ctrs.RemoveAll(ctx, sb.ID); err != nil {
			return fmt.Errorf("remove containers of pod sandbox %s: %w", sb.ID, err)
		}
	}
	if err := failpoint.Fail("remove-sandbox/containers-removed"); err != nil {
		return err
	}
	if err := m.cleanup(sb); err != nil {
		return err
	}
	if m.opts.NRI != nil {
		// From the plugins' RemovePodSandbox to the pod's leaving the list, no plugin is
		// synchronized: one that connects now would otherwise be given the pod and miss
		// its removal. Only here: the containers' removal above takes the block itself.
		unblock := m.opts.NRI.BlockSync()
		defer unblock()
		if !sb.kept {
			m.opts.NRI.RemovePodSandbox(ctx, sb)
		}
	}
	m.index.Remove(sb)
	logrus.WithField("sandbox", sb.ID).Info("pod sandbox removed")
	m.publish(sb, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	return nil
}

// cleanupRetry is how often a sandbox whose cleanup failed is tried again.
var cleanupRetry = 5 * time.Second

// keepForCleanup keeps a sandbox whose RunPodSandbox failed and whose cleanup failed too:
// it still holds what cleanup could not undo (namespaces, mounts, a CNI attachment), so it
// stays listed NOTREADY with its name and record, and its removal is retried in the
// background until it succeeds (or kubelet's RemovePodSandbox does it).
func (m *Manager) keepForCleanup(sb *Sandbox, cleanupErr error) {
	log := logrus.WithFields(logrus.Fields{"sandbox": sb.ID, "pod": sb.Name})
	log.WithError(cleanupErr).Error("cleanup of failed sandbox failed; keeping it listed as not ready and retrying")
	_ = m.update(sb, func(st *Status) { st.State = StateNotReady })
	if sb.Status().ContainerPid == 0 {
		// No sandbox container ran, so none is watched: there is no exit to wait for.
		sb.exited.Mark()
	}
	sb.kept = true
	m.index.Add(sb)
	// A later daemon lists what the record says; kubelet's removal finishes it.
	retry.Every(m.ctx, &m.wg, cleanupRetry, log.WithField("step", "cleanup of a failed run"), func() error {
		return m.Remove(m.ctx, sb.ID, nil) // no container is made in a pod that never ran
	})
}

// cleanup undoes everything a sandbox may hold, whatever state it got to, and deletes
// its record. It is safe to repeat.
func (m *Manager) cleanup(sb *Sandbox) error {
	if err := failpoint.Fail("sandbox-cleanup"); err != nil {
		return fmt.Errorf("clean up sandbox %s: %w", sb.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kind.DefaultTimeout)
	defer cancel()
	var errs []error
	if sb.SandboxContainer && sb.rt != nil {
		if err := sb.rt.Delete(ctx, sb.Task()); err != nil {
			errs = append(errs, fmt.Errorf("delete sandbox container: %w", err))
		}
		if mp := sb.Status().MonitorPid; mp > 0 {
			// The monitor exits once the sandbox container is gone; wait so its files are final.
			select {
			case <-sb.exited.Done():
			case <-time.After(StopTimeout):
			}
		}
		if err := failpoint.Fail("remove-sandbox/container-deleted"); err != nil {
			return err
		}
		if len(errs) == 0 {
			if err := podcgroup.RemoveLeft(sb.CgroupsPath, sb.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := m.teardownNetwork(ctx, sb); err != nil {
		errs = append(errs, err)
	}
	for _, p := range []string{sb.NetNS, sb.IPCNS, sb.UTSNS, sb.UserNS} {
		if p != "" {
			if err := m.host().Unpin(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := failpoint.Fail("remove-sandbox/namespaces-unpinned"); err != nil {
		return err
	}
	// The pod's tmpfs (or the copy lent to the node, when it is in the pin home), or
	// (records of earlier releases) its shm and files tmpfs each; the directories in the
	// pod's tmpfs are not mounts.
	mounts := []string{sb.Tmpfs}
	if sb.Tmpfs == "" {
		mounts = []string{sb.Shm, sb.Files}
	}
	for _, p := range mounts {
		if p != "" {
			if err := m.host().Unmount(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if sb.TmpfsHome {
		if err := m.host().UnmountPodTmpfsInHome(sb.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if o := sb.OverheadApplied; o.PodCgroupCreated {
		if err := podcgroup.Remove(o.PodCgroup); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("clean up sandbox %s: %w", sb.ID, errors.Join(errs...))
	}
	if sb.Dir != "" {
		if err := os.RemoveAll(sb.Dir); err != nil {
			return fmt.Errorf("clean up sandbox %s: %w", sb.ID, err)
		}
	}
	if err := failpoint.Fail("remove-sandbox/dir-removed"); err != nil {
		return err
	}
	return sb.status.Forget(m.opts.Store, sb.ID)
}
