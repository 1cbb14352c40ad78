package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/podcgroup"
	"github.com/rtshimd/rtshimd/internal/failpoint"
)

// Stop stops the pod's containers (ctrs), then its sandbox container, if any; the
// sandbox becomes NOTREADY. A sandbox that is gone is not an error.
func (m *Manager) Stop(ctx context.Context, id string, ctrs PodContainers) error {
	sb, unlock, ok, err := m.index.Hold(id)
	if !ok {
		return err
	}
	defer unlock()
	return m.stop(ctx, sb, ctrs)
}

func (m *Manager) stop(ctx context.Context, sb *Sandbox, ctrs PodContainers) error {
	if ctrs != nil {
		if err := ctrs.StopAll(ctx, sb.ID); err != nil {
			return fmt.Errorf("stop containers of pod sandbox %s: %w", sb.ID, err)
		}
	}
	if err := failpoint.Fail("stop-sandbox/containers-stopped"); err != nil {
		return err
	}
	if sb.SandboxContainer {
		if err := m.stopSandboxContainer(ctx, sb); err != nil {
			return err
		}
	}
	if err := failpoint.Fail("stop-sandbox/container-stopped"); err != nil {
		return err
	}
	if m.opts.NRI != nil && !sb.kept { // plugins heard of a kept pod's removal when its run failed
		m.opts.NRI.StopPodSandbox(ctx, sb) // before CNI DEL, as containerd
	}
	wasReady := sb.Status().State != StateNotReady
	if err := m.teardownNetwork(ctx, sb); err != nil {
		return err
	}
	if err := failpoint.Fail("stop-sandbox/network-down"); err != nil {
		return err
	}
	err := m.updateIf(sb, func(st *Status) bool {
		changed := st.State != StateNotReady
		st.State = StateNotReady
		return changed
	})
	if wasReady {
		logrus.WithField("sandbox", sb.ID).Info("pod sandbox stopped")
		m.publish(sb, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	}
	return err
}

func (m *Manager) stopSandboxContainer(ctx context.Context, sb *Sandbox) error {
	select {
	case <-sb.exited.Done():
	default:
		sb.mu.Lock()
		sb.stopping = true
		sb.mu.Unlock()
		if err := sb.rt.Kill(ctx, sb.Task(), "KILL", false); err != nil {
			return fmt.Errorf("stop sandbox container: %w", err)
		}
		select {
		case <-sb.exited.Done():
		case <-time.After(StopTimeout):
			return fmt.Errorf("stop pod sandbox %s: sandbox container did not exit %v after SIGKILL", sb.ID, StopTimeout)
		case <-ctx.Done():
			return fmt.Errorf("stop pod sandbox %s: %w", sb.ID, ctx.Err())
		}
	}
	if sb.rt.Plan().DeleteSandboxAtStop {
		podCgroup := sandboxPodCgroup(sb)
		if podCgroup != "" {
			// runsc on cgroup v2 removes, with the sandbox, the pod cgroup too when it made
			// it (no kubelet made it first), which fails (EBUSY) while the cgroups it made
			// there for the pod's containers are left: with every process of the sandbox
			// gone those are empty, and go first (a container's later delete finds its
			// cgroup gone, which runsc allows).
			if err := podcgroup.RemoveChildren(podCgroup); err != nil {
				logrus.WithError(err).WithField("sandbox", sb.ID).Warn("stop pod sandbox: container cgroups left")
			}
		}
		if err := sb.rt.Delete(ctx, sb.Task()); err != nil {
			if h := podcgroup.Holders(podCgroup); h != "" {
				return fmt.Errorf("delete sandbox container: %w (%s)", err, h)
			}
			return fmt.Errorf("delete sandbox container: %w", err)
		}
	}
	// Else it is deleted when the sandbox is removed, after its containers: a supervisor
	// that serves the whole pod (a shim) keeps serving them until then.
	return nil
}

// sandboxPodCgroup is the pod's cgroup (cgroup_parent, cgroupfs driver) where the sandbox
// container holds the pod and its cgroup is directly below it; "" otherwise.
func sandboxPodCgroup(sb *Sandbox) string {
	parent := sb.config.GetLinux().GetCgroupParent()
	if !sb.SandboxContainer || parent == "" || !strings.HasPrefix(sb.CgroupsPath, "/") {
		return ""
	}
	if dir := filepath.Dir(sb.CgroupsPath); dir == "/"+strings.Trim(parent, "/") {
		return dir
	}
	return ""
}
