package nrihost

import (
	"encoding/json"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/sandbox"
)

// podSandbox is a pod as NRI plugins see it.
func podSandbox(sb *sandbox.Sandbox) *api.PodSandbox {
	if sb == nil {
		return nil
	}
	cfg := sb.PodConfig()
	md := cfg.GetMetadata()
	st := sb.Status()
	resources, overhead := sb.Resources() // after an in-place resize, the new ones
	linux := &api.LinuxPodSandbox{
		CgroupParent: cfg.GetLinux().GetCgroupParent(),
		CgroupsPath:  sb.CgroupsPath,
		PodResources: criResources(resources),
		PodOverhead:  criResources(overhead),
	}
	linux.Resources = linux.PodResources
	for _, ns := range []struct {
		typ, path string
	}{{"network", sb.NetNS}, {"ipc", sb.IPCNS}, {"uts", sb.UTSNS}, {"user", sb.UserNS}} {
		if ns.path != "" {
			linux.Namespaces = append(linux.Namespaces, &api.LinuxNamespace{Type: ns.typ, Path: ns.path})
		}
	}
	return &api.PodSandbox{
		Id:        sb.ID,
		Name:      md.GetName(),
		Uid:       md.GetUid(),
		Namespace: md.GetNamespace(),
		// The handler that runs the pod (the default one named), not the request's "".
		RuntimeHandler: sb.Handler,
		Labels:         api.DupStringMap(cfg.GetLabels()),
		Annotations:    api.DupStringMap(cfg.GetAnnotations()),
		Linux:          linux,
		Pid:            uint32(st.ContainerPid),
		Ips:            append([]string(nil), st.IPs...),
	}
}

// criResources turns CRI resources into NRI's, through the spec form the runtime gets.
func criResources(r *runtimeapi.LinuxContainerResources) *api.LinuxResources {
	if r == nil {
		return nil
	}
	res, err := oci.Resources(r)
	if err != nil {
		return nil
	}
	return api.FromOCILinuxResources(res, nil)
}

// containerState is a record's state in NRI's words. A container being created is
// CREATED to plugins, as the container it becomes.
func containerState(s string) api.ContainerState {
	switch s {
	case container.StateCreating, container.StateCreated:
		return api.ContainerState_CONTAINER_CREATED
	case container.StateRunning:
		return api.ContainerState_CONTAINER_RUNNING
	case container.StateExited:
		return api.ContainerState_CONTAINER_STOPPED
	}
	return api.ContainerState_CONTAINER_UNKNOWN
}

// nriContainer is a container as NRI plugins see it. spec is its OCI spec: the one being
// built at CreateContainer, else the bundle's (nil when unreadable: the record's fields
// are still given).
func nriContainer(c *container.Container, spec *specs.Spec) *api.Container {
	cfg := c.Config()
	st := c.Status()
	out := &api.Container{
		Id:            c.ID,
		PodSandboxId:  c.SandboxID,
		Name:          cfg.GetMetadata().GetName(),
		State:         containerState(st.State),
		Labels:        api.DupStringMap(cfg.GetLabels()),
		Annotations:   api.DupStringMap(cfg.GetAnnotations()),
		Pid:           uint32(st.Pid),
		CreatedAt:     c.CreatedAt,
		StartedAt:     st.StartedAt,
		FinishedAt:    st.FinishedAt,
		ExitCode:      st.ExitCode,
		StatusReason:  st.Reason,
		StatusMessage: st.Message,
		Image:         &api.Image{Name: c.ImageRef},
		Linux:         &api.LinuxContainer{CgroupsPath: c.CgroupsPath},
	}
	for _, d := range cfg.GetCDIDevices() {
		out.CDIDevices = append(out.CDIDevices, &api.CDIDevice{Name: d.GetName()})
	}
	if len(st.Resources) > 0 {
		var r specs.LinuxResources
		if json.Unmarshal(st.Resources, &r) == nil {
			out.Linux.Resources = api.FromOCILinuxResources(&r, nil)
		}
	}
	if spec == nil {
		return out
	}
	// The spec's annotations are what the runtime sees (the config's plus the CRI ones
	// Kata and gVisor read), as containerd reports them.
	if len(spec.Annotations) > 0 {
		out.Annotations = api.DupStringMap(spec.Annotations)
	}
	out.Mounts = api.FromOCIMounts(spec.Mounts)
	out.Hooks = api.FromOCIHooks(spec.Hooks)
	if p := spec.Process; p != nil {
		out.Args = api.DupStringSlice(p.Args)
		out.Env = api.DupStringSlice(p.Env)
		for _, l := range p.Rlimits {
			out.Rlimits = append(out.Rlimits, &api.POSIXRlimit{Type: l.Type, Hard: l.Hard, Soft: l.Soft})
		}
		out.User = &api.User{Uid: p.User.UID, Gid: p.User.GID, AdditionalGids: append([]uint32(nil), p.User.AdditionalGids...)}
		out.Linux.OomScoreAdj = api.Int(p.OOMScoreAdj)
		// (The module's converters of optional parts do not take nil.)
		if p.IOPriority != nil {
			out.Linux.IoPriority = api.FromOCILinuxIOPriority(p.IOPriority)
		}
		if p.Scheduler != nil {
			out.Linux.Scheduler = api.FromOCILinuxScheduler(p.Scheduler)
		}
	}
	if l := spec.Linux; l != nil {
		out.Linux.Namespaces = api.FromOCILinuxNamespaces(l.Namespaces)
		out.Linux.Devices = api.FromOCILinuxDevices(l.Devices)
		if l.Resources != nil {
			out.Linux.Resources = api.FromOCILinuxResources(l.Resources, nil)
		}
		if l.CgroupsPath != "" {
			out.Linux.CgroupsPath = l.CgroupsPath
		}
		if l.Seccomp != nil {
			out.Linux.SeccompPolicy = api.FromOCILinuxSeccomp(l.Seccomp)
		}
		out.Linux.Sysctl = api.DupStringMap(l.Sysctl)
		out.Linux.NetDevices = api.FromOCILinuxNetDevices(l.NetDevices)
	}
	return out
}

// mergeResources lays what an NRI update sets over the limits a container has: an update
// names only what it changes.
func mergeResources(cur *specs.LinuxResources, u *api.LinuxResources) *specs.LinuxResources {
	out := &specs.LinuxResources{}
	if cur != nil {
		b, _ := json.Marshal(cur)
		_ = json.Unmarshal(b, out)
	}
	if u == nil {
		return out
	}
	if m := u.Memory; m != nil {
		if out.Memory == nil {
			out.Memory = &specs.LinuxMemory{}
		}
		set64 := func(dst **int64, v *api.OptionalInt64) {
			if v != nil {
				x := v.GetValue()
				*dst = &x
			}
		}
		set64(&out.Memory.Limit, m.Limit)
		set64(&out.Memory.Reservation, m.Reservation)
		set64(&out.Memory.Swap, m.Swap)
		set64(&out.Memory.KernelTCP, m.KernelTcp)
		if m.Swappiness != nil {
			v := m.Swappiness.GetValue()
			out.Memory.Swappiness = &v
		}
		if m.DisableOomKiller != nil {
			v := m.DisableOomKiller.GetValue()
			out.Memory.DisableOOMKiller = &v
		}
	}
	if c := u.Cpu; c != nil {
		if out.CPU == nil {
			out.CPU = &specs.LinuxCPU{}
		}
		if c.Shares != nil {
			v := c.Shares.GetValue()
			out.CPU.Shares = &v
		}
		if c.Quota != nil {
			v := c.Quota.GetValue()
			out.CPU.Quota = &v
		}
		if c.Period != nil {
			v := c.Period.GetValue()
			out.CPU.Period = &v
		}
		if c.RealtimeRuntime != nil {
			v := c.RealtimeRuntime.GetValue()
			out.CPU.RealtimeRuntime = &v
		}
		if c.RealtimePeriod != nil {
			v := c.RealtimePeriod.GetValue()
			out.CPU.RealtimePeriod = &v
		}
		if c.Cpus != "" {
			out.CPU.Cpus = c.Cpus
		}
		if c.Mems != "" {
			out.CPU.Mems = c.Mems
		}
	}
	for _, h := range u.HugepageLimits {
		found := false
		for i := range out.HugepageLimits {
			if out.HugepageLimits[i].Pagesize == h.PageSize {
				out.HugepageLimits[i].Limit, found = h.Limit, true
			}
		}
		if !found {
			out.HugepageLimits = append(out.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: h.PageSize, Limit: h.Limit})
		}
	}
	if len(u.Unified) > 0 {
		if out.Unified == nil {
			out.Unified = map[string]string{}
		}
		for k, v := range u.Unified {
			out.Unified[k] = v
		}
	}
	if p := u.Pids; p != nil {
		v := p.Limit
		out.Pids = &specs.LinuxPids{Limit: &v}
	}
	return out
}
