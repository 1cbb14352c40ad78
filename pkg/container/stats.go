package container

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/pkg/cgpath"
	"github.com/rtshimd/rtshimd/pkg/cgstats"
	"github.com/rtshimd/rtshimd/pkg/config"
	"github.com/rtshimd/rtshimd/pkg/image"
	"github.com/rtshimd/rtshimd/pkg/procstats"
	"github.com/rtshimd/rtshimd/pkg/protocache"
	"github.com/rtshimd/rtshimd/pkg/sandbox"
)

// cpuSample is the last CPU reading of a cgroup, for usage in nano-cores between calls.
type cpuSample struct {
	at    time.Time
	usage uint64
}

type cpuRates struct {
	mu   sync.Mutex
	last map[string]cpuSample
}

// rate returns nano-cores since the previous reading of key (0 on the first).
func (r *cpuRates) rate(key string, now time.Time, usage uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]cpuSample{}
	}
	prev, ok := r.last[key]
	r.last[key] = cpuSample{now, usage}
	if !ok || usage < prev.usage || !now.After(prev.at) {
		return 0
	}
	return uint64(float64(usage-prev.usage) / now.Sub(prev.at).Seconds())
}

func (r *cpuRates) forget(key string) {
	r.mu.Lock()
	delete(r.last, key)
	r.mu.Unlock()
}

func (m *Manager) cgroups() *cgstats.Reader {
	m.cgOnce.Do(func() { m.cg = cgstats.New("/sys/fs/cgroup") })
	return m.cg
}

func u64(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

// Stats reads container id's CPU and memory usage through its runtime (the cgroup, or
// the shim's metrics) and its writable layer's usage.
func (m *Manager) Stats(id string) (*runtimeapi.ContainerStats, error) {
	c, err := m.Get(id)
	if err != nil {
		return nil, err
	}
	return m.stats(c), nil
}

// sample is one reading of a container: its runtime's counters (cgOK false where the
// container does not run or the runtime could not say), its processes' counts from /proc
// (a Full reading of a container whose runtime names them), and its writable layer's usage.
type sample struct {
	at     time.Time
	cg     cgstats.Stats
	cgOK   bool
	proc   procstats.Counts
	procOK bool
	fs     image.Usage
	fsOK   bool
}

// sample reads c, as much as scope says: the CRI's stats take cgstats.Usage, metrics Full.
func (m *Manager) sample(c *Container, scope cgstats.Scope) sample {
	s := sample{at: time.Now()}
	if c.Status().State == StateRunning {
		cg, err := c.rt.Stats(context.Background(), c.task(), c.CgroupsPath, scope)
		if err == nil {
			s.cg, s.cgOK = cg, true
			if scope == cgstats.Full && cg.Pids != nil {
				s.proc, s.procOK = procstats.Read("/proc", cg.Pids), true
			}
		} else {
			logrus.WithFields(logrus.Fields{"container": c.ID, "handler": c.Handler}).WithError(err).Debug("container stats unreadable")
		}
	}
	if u, err := m.opts.Images.RootfsUsage(c.ID); err == nil {
		s.fs, s.fsOK = u, true
	}
	return s
}

func (m *Manager) stats(c *Container) *runtimeapi.ContainerStats {
	return m.statsOf(c, m.sample(c, cgstats.Usage))
}

// statsOf is c's ContainerStats from a reading of it.
func (m *Manager) statsOf(c *Container, s sample) *runtimeapi.ContainerStats {
	now := s.at
	out := &runtimeapi.ContainerStats{
		Cpu:    &runtimeapi.CpuUsage{Timestamp: now.UnixNano()},
		Memory: &runtimeapi.MemoryUsage{Timestamp: now.UnixNano()},
	}
	// The attributes (the container's ID, metadata, labels and annotations) never change:
	// they go out as encoded once.
	protocache.SetField(out, "attributes", c.statsAttributes())
	if s.cgOK {
		fillUsage(out.Cpu, out.Memory, s.cg, m.rates.rate(c.ID, now, s.cg.CPUUsageNanos), now)
	}
	if u := s.fs; s.fsOK {
		out.WritableLayer = &runtimeapi.FilesystemUsage{
			Timestamp: u.Timestamp.UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: u.Mountpoint},
			UsedBytes: u64(u.Bytes), InodesUsed: u64(u.Inodes),
		}
	}
	return out
}

func fillUsage(cpu *runtimeapi.CpuUsage, mem *runtimeapi.MemoryUsage, s cgstats.Stats, nanoCores uint64, now time.Time) {
	cpu.UsageCoreNanoSeconds = u64(s.CPUUsageNanos)
	cpu.UsageNanoCores = u64(nanoCores)
	mem.UsageBytes, mem.WorkingSetBytes, mem.RssBytes = u64(s.MemoryUsage), u64(s.WorkingSet), u64(s.RSS)
	mem.PageFaults, mem.MajorPageFaults = u64(s.PageFaults), u64(s.MajorPageFaults)
	if s.MemoryLimit > 0 {
		avail := uint64(0)
		if s.MemoryLimit > s.WorkingSet {
			avail = s.MemoryLimit - s.WorkingSet
		}
		mem.AvailableBytes = u64(avail)
	}
}

// ListStats returns the stats of the containers that match filter (running ones, as
// kubelet expects, unless the filter names an id).
func (m *Manager) ListStats(filter *runtimeapi.ContainerStatsFilter) []*runtimeapi.ContainerStats {
	var picked []*Container
	for _, c := range m.snapshot() {
		if f := filter.GetId(); f != "" && !strings.HasPrefix(c.ID, f) {
			continue
		}
		if f := filter.GetPodSandboxId(); f != "" && !strings.HasPrefix(c.SandboxID, f) {
			continue
		}
		if !sandbox.MatchLabels(filter.GetLabelSelector(), c.config.Labels) {
			continue
		}
		if filter.GetId() == "" && c.Status().State != StateRunning {
			continue
		}
		picked = append(picked, c)
	}
	out := make([]*runtimeapi.ContainerStats, len(picked))
	spread(len(picked), func(i int) { out[i] = m.stats(picked[i]) })
	return out
}

// spread runs f(0..n-1) on a few goroutines: reading cgroup files is syscall-bound
// (memory.stat is computed by the kernel on each read).
func spread(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < min(4, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

func (m *Manager) snapshot() []*Container {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Container, 0, len(m.containers))
	for _, c := range m.containers {
		out = append(out, c)
	}
	return out
}

// PodStats reads a pod's usage: its cgroup parent when the pod has one (kubelet's pod
// cgroup; for sandboxing runtimes it holds the sandbox), else the sum of its containers;
// its network interfaces from its namespace; its containers' stats.
func (m *Manager) PodStats(sandboxID string) (*runtimeapi.PodSandboxStats, error) {
	sb, err := m.opts.Sandboxes.Get(sandboxID)
	if err != nil {
		return nil, err
	}
	return m.podStats(sb), nil
}

func (m *Manager) podStats(sb *sandbox.Sandbox) *runtimeapi.PodSandboxStats {
	ctrs := m.ofSandbox(sb.ID)
	samples := make([]sample, len(ctrs))
	for i, c := range ctrs {
		samples[i] = m.sample(c, cgstats.Usage)
	}
	return m.podStatsOf(sb, ctrs, samples)
}

// podStatsOf is the pod's PodSandboxStats, its containers' from their readings (each read
// once per call: the pod's figures are their sum unless the pod cgroup says).
func (m *Manager) podStatsOf(sb *sandbox.Sandbox, ctrs []*Container, samples []sample) *runtimeapi.PodSandboxStats {
	now := time.Now()
	cfg := sb.PodConfig()
	linux := &runtimeapi.LinuxPodSandboxStats{
		Cpu:     &runtimeapi.CpuUsage{Timestamp: now.UnixNano()},
		Memory:  &runtimeapi.MemoryUsage{Timestamp: now.UnixNano()},
		Process: &runtimeapi.ProcessUsage{Timestamp: now.UnixNano()},
	}
	var pids []int
	if st := sb.Status(); st.InfraPid > 0 && st.State == sandbox.StateReady {
		pids = append(pids, st.InfraPid)
	}
	var sum cgstats.Stats
	for i, c := range ctrs {
		cs := m.statsOf(c, samples[i])
		linux.Containers = append(linux.Containers, cs)
		sum.CPUUsageNanos += cs.GetCpu().GetUsageCoreNanoSeconds().GetValue()
		sum.MemoryUsage += cs.GetMemory().GetUsageBytes().GetValue()
		sum.WorkingSet += cs.GetMemory().GetWorkingSetBytes().GetValue()
		sum.RSS += cs.GetMemory().GetRssBytes().GetValue()
		sum.PageFaults += cs.GetMemory().GetPageFaults().GetValue()
		sum.MajorPageFaults += cs.GetMemory().GetMajorPageFaults().GetValue()
		if st := c.Status(); st.State == StateRunning && st.Pid > 0 {
			pids = append(pids, st.Pid)
		}
	}
	if parent := cfg.GetLinux().GetCgroupParent(); parent != "" {
		if dir, err := cgpath.Parent(m.opts.CgroupDriver == config.SystemdDriver, parent); err == nil {
			if s, err := m.cgroups().ReadScope(dir, cgstats.Usage); err == nil {
				sum = s
			}
		}
	}
	fillUsage(linux.Cpu, linux.Memory, sum, m.rates.rate("pod:"+sb.ID, now, sum.CPUUsageNanos), now)
	if sum.Processes > 0 {
		linux.Process.ProcessCount = u64(sum.Processes)
	} else {
		linux.Process.ProcessCount = u64(uint64(len(pids)))
	}
	if sb.NetNS != "" && len(pids) > 0 {
		if ifs, err := netDev(pids[0]); err == nil {
			nu := &runtimeapi.NetworkUsage{Timestamp: now.UnixNano()}
			for _, i := range ifs {
				iu := &runtimeapi.NetworkInterfaceUsage{Name: i.Name, RxBytes: u64(i.RxBytes), RxErrors: u64(i.RxErrors), TxBytes: u64(i.TxBytes), TxErrors: u64(i.TxErrors)}
				nu.Interfaces = append(nu.Interfaces, iu)
				if i.Name == "eth0" {
					nu.DefaultInterface = iu
				}
			}
			linux.Network = nu
		}
	}
	out := &runtimeapi.PodSandboxStats{Linux: linux}
	protocache.SetField(out, "attributes", sb.StatsAttributes()) // encoded once
	return out
}

// netDev reads the interfaces of pid's network namespace: a pod's, through a process in it.
func netDev(pid int) ([]cgstats.Interface, error) {
	return cgstats.NetDev(fmt.Sprintf("/proc/%d/net/dev", pid))
}

// netPid is a process in the pod's network namespace: the infra process, else a running
// container's; 0 if none.
func netPid(sb *sandbox.Sandbox, running []*Container) int {
	if st := sb.Status(); st.InfraPid > 0 && st.State == sandbox.StateReady {
		return st.InfraPid
	}
	for _, c := range running {
		if st := c.Status(); st.State == StateRunning && st.Pid > 0 {
			return st.Pid
		}
	}
	return 0
}

// ListPodStats returns the stats of the ready pods that match filter. The pods are read
// as ListStats reads containers, a few at a time: the cgroup files are syscall-bound.
func (m *Manager) ListPodStats(filter *runtimeapi.PodSandboxStatsFilter) []*runtimeapi.PodSandboxStats {
	var picked []*sandbox.Sandbox
	for _, sb := range m.opts.Sandboxes.All() {
		if f := filter.GetId(); f != "" && !strings.HasPrefix(sb.ID, f) {
			continue
		}
		if filter.GetId() == "" && sb.Status().State != sandbox.StateReady {
			continue
		}
		if !sandbox.MatchLabels(filter.GetLabelSelector(), sb.PodConfig().GetLabels()) {
			continue
		}
		picked = append(picked, sb)
	}
	out := make([]*runtimeapi.PodSandboxStats, len(picked))
	spread(len(picked), func(i int) { out[i] = m.podStats(picked[i]) })
	return out
}

// RunningByHandler counts running containers by handler.
func (m *Manager) RunningByHandler() map[string]int {
	out := map[string]int{}
	for _, c := range m.snapshot() {
		if c.Status().State == StateRunning {
			out[c.Handler]++
		}
	}
	return out
}
