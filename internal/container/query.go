package container

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/oci"
)

// CRIStatus is the container as ContainerStatus reports it; verbose adds the pid, the
// record and the OCI spec.
func (m *Manager) CRIStatus(id string, verbose bool) (*runtimeapi.ContainerStatus, map[string]string, error) {
	c, err := m.Get(id)
	if err != nil {
		return nil, nil, err
	}
	out := criStatus(c)
	if !verbose {
		return out, nil, nil
	}
	st := c.Status()
	spec, _ := c.Spec() // verbose only: the one answer that reads the bundle
	info, err := json.Marshal(struct {
		Pid         int         `json:"pid"`
		SandboxID   string      `json:"sandboxID"`
		Metadata    *Metadata   `json:"metadata"`
		Status      Status      `json:"status"`
		RuntimeSpec *specs.Spec `json:"runtimeSpec,omitempty"`
	}{st.Pid, c.SandboxID, &c.Metadata, st, spec})
	if err != nil {
		return nil, nil, err
	}
	return out, map[string]string{"info": string(info)}, nil
}

// PodStatuses is the ContainerStatus of every container of the pod, oldest first, from
// memory: PodSandboxStatus and the events carry them, and kubelet's Evented PLEG takes a
// pod's containers from there alone.
func (m *Manager) PodStatuses(sandboxID string) []*runtimeapi.ContainerStatus {
	return (&Index{m.index}).PodStatuses(sandboxID)
}

// PodStatuses is the ContainerStatus of every container of the pod, oldest first.
func (i *Index) PodStatuses(sandboxID string) []*runtimeapi.ContainerStatus {
	of := i.x.OfPod(sandboxID)
	slices.SortFunc(of, func(a, b *Container) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	out := make([]*runtimeapi.ContainerStatus, len(of))
	for i, c := range of {
		out[i] = criStatus(c)
	}
	return out
}

// criStatus is the container's ContainerStatus, from memory.
func criStatus(c *Container) *runtimeapi.ContainerStatus {
	st := c.Status()
	cfg := c.config
	out := &runtimeapi.ContainerStatus{
		Id:          c.ID,
		Metadata:    cfg.Metadata,
		State:       criState(st.State),
		CreatedAt:   c.CreatedAt,
		StartedAt:   st.StartedAt,
		FinishedAt:  st.FinishedAt,
		ExitCode:    st.ExitCode,
		Image:       &runtimeapi.ImageSpec{Image: c.imageName(), RuntimeHandler: c.ImageHandler},
		ImageRef:    c.imageRef(),
		ImageId:     c.ImageID,
		Reason:      st.Reason,
		Message:     st.Message,
		Labels:      cfg.Labels,
		Annotations: cfg.Annotations,
		Mounts:      statusMounts(c),
		LogPath:     c.LogPath,
		StopSignal:  oci.CRISignal(c.StopSignal),
	}
	if len(st.Resources) > 0 {
		var r specs.LinuxResources
		if json.Unmarshal(st.Resources, &r) == nil {
			out.Resources = &runtimeapi.ContainerResources{Linux: criResources(&r)}
		}
	}
	if u := c.User; u != nil {
		out.User = &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{
			Uid: int64(u.UID), Gid: int64(u.GID), SupplementalGroups: toInt64(u.AdditionalGids),
		}}
	}
	return out
}

func toInt64(in []uint32) []int64 {
	out := make([]int64, len(in))
	for i, v := range in {
		out[i] = int64(v)
	}
	return out
}

func criResources(r *specs.LinuxResources) *runtimeapi.LinuxContainerResources {
	out := &runtimeapi.LinuxContainerResources{}
	if c := r.CPU; c != nil {
		if c.Shares != nil {
			out.CpuShares = int64(*c.Shares)
		}
		if c.Quota != nil {
			out.CpuQuota = *c.Quota
		}
		if c.Period != nil {
			out.CpuPeriod = int64(*c.Period)
		}
		out.CpusetCpus, out.CpusetMems = c.Cpus, c.Mems
	}
	if mem := r.Memory; mem != nil && mem.Limit != nil {
		out.MemoryLimitInBytes = *mem.Limit
	}
	return out
}

// imageName is the image as status.image.image names it: a name, not the ID kubelet
// sends in config.image.image (kubectl shows it). A record of an earlier release has no
// ImageName and shows what its config said, as it did.
func (c *Container) imageName() string {
	if c.ImageName != "" {
		return c.ImageName
	}
	return c.ImageRef
}

// imageRef is the image's repo digest; for an image without one (or a record of an
// earlier release) its ID; for a container whose create failed before its rootfs was
// recorded (kept for cleanup), the image it asked for: the CRI wants one.
func (c *Container) imageRef() string {
	if c.ImageRepoDigest != "" {
		return c.ImageRepoDigest
	}
	if c.ImageID != "" {
		return c.ImageID
	}
	return c.ImageRef
}

// RunningByHandler counts running containers by handler.
func (m *Manager) RunningByHandler() map[string]int {
	out := map[string]int{}
	for _, c := range m.All() {
		if c.Status().State == StateRunning {
			out[c.Handler]++
		}
	}
	return out
}
