package nrihost

import (
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	nrigen "github.com/containerd/nri/pkg/runtime-tools/generate"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgcontrollers"
)

// Adjust applies a plugin's adjustment to a container's spec with the NRI module's own
// generator (what containerd and CRI-O use), so every field NRI knows (env, args, mounts,
// devices, hooks, rlimits, resources, annotations, cgroups path, OOM score, sysctls,
// namespaces, seccomp, scheduler, I/O priority) is applied as they apply it. Limits of
// controllers the container's cgroup lacks are dropped, as for CRI's own.
func Adjust(spec *specs.Spec, adjust *api.ContainerAdjustment) error {
	if adjust == nil {
		return nil
	}
	if spec.Process == nil {
		spec.Process = &specs.Process{}
	}
	if spec.Linux == nil {
		spec.Linux = &specs.Linux{}
	}
	g := nrigen.SpecGenerator(&specGen{spec: spec}, nrigen.WithResourceChecker(func(res *specs.LinuxResources) error {
		trimResources(res, spec.Linux.CgroupsPath)
		return nil
	}))
	if err := g.Adjust(adjust); err != nil {
		return fmt.Errorf("apply adjustment: %w", err)
	}
	return nil
}

// trimResources leaves out what this node's cgroups cannot take: controllers it lacks, and
// a swap limit where cgroup v1 has no swap accounting (NRI sets swap with every memory
// limit, as containerd does).
func trimResources(res *specs.LinuxResources, cgroupsPath string) {
	node := cgcontrollers.Default()
	node.Trim(res, cgroupsPath)
	if res.Memory != nil && res.Memory.Swap != nil && !node.V2() {
		if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err != nil {
			res.Memory.Swap = nil
		}
	}
}

// specGen is the spec editor the NRI generator drives (its UnderlyingGenerator), written
// on our spec directly: runtime-tools' generator, which containerd passes, would bring a
// 2019 module for what these few setters do.
type specGen struct{ spec *specs.Spec }

var _ nrigen.UnderlyingGenerator = (*specGen)(nil)

func (g *specGen) Spec() *specs.Spec { return g.spec }

func (g *specGen) process() *specs.Process {
	if g.spec.Process == nil {
		g.spec.Process = &specs.Process{}
	}
	return g.spec.Process
}

func (g *specGen) linux() *specs.Linux {
	if g.spec.Linux == nil {
		g.spec.Linux = &specs.Linux{}
	}
	return g.spec.Linux
}

func (g *specGen) resources() *specs.LinuxResources {
	l := g.linux()
	if l.Resources == nil {
		l.Resources = &specs.LinuxResources{}
	}
	return l.Resources
}

func (g *specGen) cpu() *specs.LinuxCPU {
	r := g.resources()
	if r.CPU == nil {
		r.CPU = &specs.LinuxCPU{}
	}
	return r.CPU
}

func (g *specGen) memory() *specs.LinuxMemory {
	r := g.resources()
	if r.Memory == nil {
		r.Memory = &specs.LinuxMemory{}
	}
	return r.Memory
}

func (g *specGen) hooks() *specs.Hooks {
	if g.spec.Hooks == nil {
		g.spec.Hooks = &specs.Hooks{}
	}
	return g.spec.Hooks
}

func (g *specGen) AddAnnotation(key, value string) {
	if g.spec.Annotations == nil {
		g.spec.Annotations = map[string]string{}
	}
	g.spec.Annotations[key] = value
}

func (g *specGen) RemoveAnnotation(key string) { delete(g.spec.Annotations, key) }

func (g *specGen) AddDevice(device specs.LinuxDevice) {
	l := g.linux()
	for i, d := range l.Devices {
		if d.Path == device.Path {
			l.Devices[i] = device
			return
		}
	}
	l.Devices = append(l.Devices, device)
}

func (g *specGen) RemoveDevice(path string) {
	if g.spec.Linux == nil {
		return
	}
	for i, d := range g.spec.Linux.Devices {
		if d.Path == path {
			g.spec.Linux.Devices = append(g.spec.Linux.Devices[:i], g.spec.Linux.Devices[i+1:]...)
			return
		}
	}
}

var namespaceTypes = map[string]specs.LinuxNamespaceType{
	"network": specs.NetworkNamespace, "pid": specs.PIDNamespace, "mount": specs.MountNamespace,
	"ipc": specs.IPCNamespace, "uts": specs.UTSNamespace, "user": specs.UserNamespace,
	"cgroup": specs.CgroupNamespace, "time": specs.TimeNamespace,
}

func namespaceType(ns string) (specs.LinuxNamespaceType, error) {
	if t, ok := namespaceTypes[ns]; ok {
		return t, nil
	}
	return "", fmt.Errorf("unknown namespace type %q", ns)
}

func (g *specGen) AddOrReplaceLinuxNamespace(ns, path string) error {
	t, err := namespaceType(ns)
	if err != nil {
		return err
	}
	l := g.linux()
	for i, n := range l.Namespaces {
		if n.Type == t {
			l.Namespaces[i].Path = path
			return nil
		}
	}
	l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: t, Path: path})
	return nil
}

func (g *specGen) RemoveLinuxNamespace(ns string) error {
	t, err := namespaceType(ns)
	if err != nil {
		return err
	}
	if g.spec.Linux == nil {
		return nil
	}
	for i, n := range g.spec.Linux.Namespaces {
		if n.Type == t {
			g.spec.Linux.Namespaces = append(g.spec.Linux.Namespaces[:i], g.spec.Linux.Namespaces[i+1:]...)
			return nil
		}
	}
	return nil
}

func (g *specGen) AddPreStartHook(h specs.Hook) {
	g.hooks().Prestart = append(g.hooks().Prestart, h) //nolint:staticcheck // NRI still relays prestart hooks
}
func (g *specGen) AddPostStartHook(h specs.Hook) {
	g.hooks().Poststart = append(g.hooks().Poststart, h)
}
func (g *specGen) AddPostStopHook(h specs.Hook) { g.hooks().Poststop = append(g.hooks().Poststop, h) }

func (g *specGen) AddProcessEnv(name, value string) {
	if name == "" {
		return
	}
	p := g.process()
	prefix := name + "="
	for i, e := range p.Env {
		if len(e) >= len(prefix) && e[:len(prefix)] == prefix {
			p.Env[i] = prefix + value
			return
		}
	}
	p.Env = append(p.Env, prefix+value)
}

func (g *specGen) ClearProcessEnv() {
	if g.spec.Process != nil {
		g.spec.Process.Env = []string{}
	}
}

func (g *specGen) SetProcessArgs(args []string) { g.process().Args = args }

func (g *specGen) SetProcessOOMScoreAdj(adj int) { g.process().OOMScoreAdj = &adj }

func (g *specGen) AddMount(m specs.Mount) { g.spec.Mounts = append(g.spec.Mounts, m) }

func (g *specGen) RemoveMount(dest string) {
	for i, m := range g.spec.Mounts {
		if m.Destination == dest {
			g.spec.Mounts = append(g.spec.Mounts[:i], g.spec.Mounts[i+1:]...)
			return
		}
	}
}

func (g *specGen) ClearMounts() { g.spec.Mounts = []specs.Mount{} }

func (g *specGen) Mounts() []specs.Mount { return g.spec.Mounts }

func (g *specGen) AddLinuxSysctl(key, value string) {
	l := g.linux()
	if l.Sysctl == nil {
		l.Sysctl = map[string]string{}
	}
	l.Sysctl[key] = value
}

func (g *specGen) RemoveLinuxSysctl(key string) {
	if g.spec.Linux != nil {
		delete(g.spec.Linux.Sysctl, key)
	}
}

func (g *specGen) SetLinuxCgroupsPath(path string) { g.linux().CgroupsPath = path }

func (g *specGen) SetLinuxRootPropagation(rp string) error {
	switch rp {
	case "", "private", "rprivate", "slave", "rslave", "shared", "rshared", "unbindable", "runbindable":
	default:
		return fmt.Errorf("rootfs propagation %q is not one of (r)private, (r)slave, (r)shared, (r)unbindable", rp)
	}
	g.linux().RootfsPropagation = rp
	return nil
}

func (g *specGen) AddLinuxResourcesDevice(allow bool, devType string, major, minor *int64, access string) {
	r := g.resources()
	r.Devices = append(r.Devices, specs.LinuxDeviceCgroup{Allow: allow, Type: devType, Major: major, Minor: minor, Access: access})
}

func (g *specGen) AddLinuxResourcesHugepageLimit(pageSize string, limit uint64) {
	r := g.resources()
	for i, h := range r.HugepageLimits {
		if h.Pagesize == pageSize {
			r.HugepageLimits[i].Limit = limit
			return
		}
	}
	r.HugepageLimits = append(r.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: pageSize, Limit: limit})
}

func (g *specGen) AddLinuxResourcesUnified(key, val string) {
	r := g.resources()
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified[key] = val
}

func (g *specGen) SetLinuxResourcesCPUCpus(cpus string)        { g.cpu().Cpus = cpus }
func (g *specGen) SetLinuxResourcesCPUMems(mems string)        { g.cpu().Mems = mems }
func (g *specGen) SetLinuxResourcesCPUPeriod(period uint64)    { g.cpu().Period = &period }
func (g *specGen) SetLinuxResourcesCPUQuota(quota int64)       { g.cpu().Quota = &quota }
func (g *specGen) SetLinuxResourcesCPUShares(shares uint64)    { g.cpu().Shares = &shares }
func (g *specGen) SetLinuxResourcesMemoryLimit(limit int64)    { g.memory().Limit = &limit }
func (g *specGen) SetLinuxResourcesMemorySwap(swap int64)      { g.memory().Swap = &swap }
func (g *specGen) SetLinuxResourcesCPURealtimePeriod(p uint64) { g.cpu().RealtimePeriod = &p }
func (g *specGen) SetLinuxResourcesCPURealtimeRuntime(t int64) { g.cpu().RealtimeRuntime = &t }
