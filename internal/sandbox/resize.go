package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/podcgroup"
	"github.com/rtshimd/rtshimd/internal/config"
)

// Resize is the pod's last in-place resize (UpdatePodSandboxResources): the resources and
// overhead kubelet sent and what became of them. The record's config and overhead_applied
// keep what the pod was created with.
type Resize struct {
	At time.Time `json:"at"`
	// Resources and Overhead are the request's LinuxContainerResources (protojson).
	Resources json.RawMessage `json:"resources,omitempty"`
	Overhead  json.RawMessage `json:"overhead,omitempty"`
	// Applied is the overhead and the pod's limits plus it, worked out as at
	// RunPodSandbox, and where they went.
	Applied Overhead `json:"applied"`
	// NotApplied says why the limits could not be set.
	NotApplied string `json:"not_applied,omitempty"`
}

// UpdateResources records the pod's new resources and overhead (in-place pod resize) and
// sets its limits plus overhead where RunPodSandbox set them: the pod cgroup, and the
// sandbox container where it holds the whole pod (the kind's PodLimits).
//
// The CRI calls this after kubelet has resized the pod cgroup itself, and treats it as
// best effort. So the record is always updated; the limits are set as at creation (on a
// pod cgroup kubelet made, only raised: kubelet's own values stand, rtshimd adds the
// overhead kubelet does not know); and a failure to set them is returned (kubelet logs
// it and goes on) and kept in the record. A pod that is not ready is only recorded.
func (m *Manager) UpdateResources(ctx context.Context, id string, overhead, resources *runtimeapi.LinuxContainerResources) error {
	sb, err := m.Get(id)
	if err != nil {
		return err
	}
	sb.op.Lock()
	defer sb.op.Unlock()

	// The pod's config with the new values, for the computation RunPodSandbox makes.
	cfg := &runtimeapi.PodSandboxConfig{Metadata: sb.config.GetMetadata(), Linux: &runtimeapi.LinuxPodSandboxConfig{
		CgroupParent: sb.config.GetLinux().GetCgroupParent(), Resources: resources, Overhead: overhead,
	}}
	r := &Resize{At: time.Now(), Applied: podOverhead(cfg, sb.Handler, sb.Overhead)}
	if r.Resources, err = marshalResources(resources); err == nil {
		r.Overhead, err = marshalResources(overhead)
	}
	if err != nil {
		return fmt.Errorf("update pod sandbox %s resources: %w", sb.ID, err)
	}
	prev := sb.Status()
	if m.opts.NRI != nil && prev.State == StateReady {
		// As containerd: plugins hear of the resize first, and one that fails it fails the call.
		if err := m.opts.NRI.UpdatePodSandbox(ctx, sb, overhead, resources); err != nil {
			return err
		}
	}
	var applyErr error
	if prev.State == StateReady {
		applyErr = m.applyResize(ctx, sb, &r.Applied, currentLimits(sb, prev))
	} else {
		r.Applied.PodCgroupNote = "the pod is " + prev.State + ": recorded only"
	}
	if applyErr != nil {
		r.NotApplied = applyErr.Error()
	}
	if err := m.update(sb, func(st *Status) { st.Resize = r }); err != nil {
		return err
	}
	log := logrus.WithFields(logrus.Fields{"sandbox": sb.ID, "limits": limitsString(r.Applied.Limits), "pod_cgroup": r.Applied.PodCgroup})
	if applyErr != nil {
		log.WithError(applyErr).Warn("pod resized; its limits could not all be set")
		return fmt.Errorf("update pod sandbox %s resources: %w", sb.ID, applyErr)
	}
	log.Info("pod resized")
	if m.opts.NRI != nil && prev.State == StateReady {
		m.opts.NRI.PostUpdatePodSandbox(ctx, sb)
	}
	return nil
}

// Resources are the pod's resources and overhead as last set: the last resize's, else the
// config's.
func (s *Sandbox) Resources() (resources, overhead *runtimeapi.LinuxContainerResources) {
	resources, overhead = s.config.GetLinux().GetResources(), s.config.GetLinux().GetOverhead()
	r := s.Status().Resize
	if r == nil {
		return resources, overhead
	}
	decode := func(raw json.RawMessage) *runtimeapi.LinuxContainerResources {
		if len(raw) == 0 {
			return nil
		}
		out := &runtimeapi.LinuxContainerResources{}
		if protojson.Unmarshal(raw, out) != nil {
			return nil
		}
		return out
	}
	return decode(r.Resources), decode(r.Overhead)
}

func marshalResources(r *runtimeapi.LinuxContainerResources) (json.RawMessage, error) {
	if r == nil {
		return nil, nil
	}
	return protojson.Marshal(r)
}

// currentLimits are the limits the pod's cgroups have now: the last resize's, else
// creation's.
func currentLimits(sb *Sandbox, st Status) *specs.LinuxResources {
	if st.Resize != nil && st.Resize.NotApplied == "" && st.Resize.Applied.Limits != nil {
		return st.Resize.Applied.Limits
	}
	return sb.OverheadApplied.Limits
}

// applyResize sets o.Limits where RunPodSandbox set the pod's limits, filling in o where
// they went.
func (m *Manager) applyResize(ctx context.Context, sb *Sandbox, o *Overhead, cur *specs.LinuxResources) error {
	if o.Limits == nil {
		o.PodCgroupNote = "the pod has no limits"
		return nil
	}
	made := sb.OverheadApplied
	parent := sb.config.GetLinux().GetCgroupParent()
	switch {
	case m.opts.CgroupDriver != config.CgroupfsDriver:
		o.PodCgroupNote = "cgroup_driver " + m.opts.CgroupDriver + ": the pod's slice is systemd's and kubelet's to limit"
	case parent == "":
		o.PodCgroupNote = "no cgroup_parent: the pod has no cgroup of its own"
	case made.PodCgroupCreated:
		o.PodCgroup, o.PodCgroupCreated = made.PodCgroup, true
	case !podcgroup.Exists("/" + strings.TrimPrefix(parent, "/")):
		// Not made now: it would outlive the pod, nobody having recorded to remove it.
		o.PodCgroupNote = "the pod cgroup " + parent + " does not exist"
	default:
		o.PodCgroup = "/" + strings.TrimPrefix(parent, "/")
	}
	o.SandboxContainer = sb.SandboxContainer && sb.rt.Plan().PodLimits

	podCgroup := func() error {
		if o.PodCgroup == "" {
			return nil
		}
		if o.PodCgroupCreated {
			// rtshimd's own: exactly the pod's limits, lowered too.
			o.PodCgroupSet = o.Limits
			return podcgroup.Set(o.PodCgroup, o.Limits)
		}
		set, effective, _, err := podcgroup.Apply(o.PodCgroup, o.Limits)
		if err != nil {
			return err
		}
		o.PodCgroupSet, o.Limits = set, effective
		return nil
	}
	sandboxContainer := func() error {
		if !o.SandboxContainer || o.Limits == nil {
			return nil
		}
		if err := sb.rt.Update(ctx, sb.Task(), o.Limits); err != nil {
			return fmt.Errorf("sandbox container: %w", err)
		}
		return nil
	}
	// cgroup v1 refuses a CPU quota above the parent's: on a pod cgroup of rtshimd's, a
	// shrinking pod lowers the sandbox container (a child of the pod cgroup) first. Else
	// the pod cgroup goes first (kubelet's has been resized already; what rtshimd sets
	// there decides what the sandbox container gets).
	steps := []func() error{podCgroup, sandboxContainer}
	if o.PodCgroupCreated && quotaOf(o.Limits) < quotaOf(cur) {
		steps[0], steps[1] = steps[1], steps[0]
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// quotaOf is the CPU quota of r (-1: none).
func quotaOf(r *specs.LinuxResources) int64 {
	if r == nil || r.CPU == nil || r.CPU.Quota == nil {
		return -1
	}
	return *r.CPU.Quota
}

// limitsString is r for a log line.
func limitsString(r *specs.LinuxResources) string {
	if r == nil {
		return "none"
	}
	var parts []string
	if r.Memory != nil && r.Memory.Limit != nil {
		parts = append(parts, fmt.Sprintf("memory=%d", *r.Memory.Limit))
	}
	if c := r.CPU; c != nil {
		if c.Quota != nil && c.Period != nil {
			parts = append(parts, fmt.Sprintf("cpu_quota=%d/%d", *c.Quota, *c.Period))
		}
		if c.Shares != nil {
			parts = append(parts, fmt.Sprintf("cpu_shares=%d", *c.Shares))
		}
	}
	return strings.Join(parts, " ")
}
