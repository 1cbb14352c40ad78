package shim

import (
	"context"
	"fmt"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/typeurl/v2"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
)

// noLimit: cgroup v1 reports "no limit" as a huge page-aligned number, v2 as MaxUint64.
const noLimit = 1 << 62

// Stats reads the task's cgroup counters (cgroup v1 or v2 metrics, as the shim sends
// them), computed as internal/cgroups/cgstats computes them from the cgroup filesystem.
func (c *Client) Stats(ctx context.Context, id string) (cgstats.Stats, error) {
	resp, err := c.task.Stats(ctx, &taskapi.StatsRequest{ID: id})
	if err != nil {
		return cgstats.Stats{}, c.wrap("stats", id, err)
	}
	if resp.Stats == nil {
		return cgstats.Stats{}, fmt.Errorf("shim %s: stats %s: no metrics", c.cfg.ID, id)
	}
	m, err := typeurl.UnmarshalAny(resp.Stats)
	if err != nil {
		return cgstats.Stats{}, fmt.Errorf("shim %s: stats %s: decode %s: %w", c.cfg.ID, id, resp.Stats.GetTypeUrl(), err)
	}
	switch m := m.(type) {
	case *v1.Metrics:
		return fromV1(m), nil
	case *v2.Metrics:
		return fromV2(m), nil
	}
	return cgstats.Stats{}, fmt.Errorf("shim %s: stats %s: unknown metrics %s", c.cfg.ID, id, resp.Stats.GetTypeUrl())
}

func fromV1(m *v1.Metrics) cgstats.Stats {
	var s cgstats.Stats
	if cpu := m.GetCPU(); cpu != nil {
		s.CPUUsageNanos = cpu.GetUsage().GetTotal()
		s.CPUUserNanos, s.CPUSystemNanos = cpu.GetUsage().GetUser(), cpu.GetUsage().GetKernel()
		t := cpu.GetThrottling()
		s.CPUPeriods, s.CPUThrottledPeriods, s.CPUThrottledNanos = t.GetPeriods(), t.GetThrottledPeriods(), t.GetThrottledTime()
	}
	if mem := m.GetMemory(); mem != nil {
		s.MemoryUsage = mem.GetUsage().GetUsage()
		if l := mem.GetUsage().GetLimit(); l < noLimit {
			s.MemoryLimit = l
		}
		s.WorkingSet = sub(s.MemoryUsage, mem.TotalInactiveFile)
		s.RSS = mem.TotalRSS
		s.PageFaults, s.MajorPageFaults = mem.TotalPgFault, mem.TotalPgMajFault
		s.MemoryCache, s.MemoryMappedFile = mem.TotalCache, mem.TotalMappedFile
		if sw := mem.GetSwap().GetUsage(); sw > 0 { // memory.memsw: memory plus swap
			s.MemorySwap = sub(sw, s.MemoryUsage)
		}
		s.MemoryKernel = mem.GetKernel().GetUsage()
		s.MemoryMaxUsage, s.MemoryFailcnt = mem.GetUsage().GetMax(), mem.GetUsage().GetFailcnt()
	}
	s.OOMKills = m.GetMemoryOomControl().GetOomKill()
	s.Processes, s.PidsLimit = m.GetPids().GetCurrent(), m.GetPids().GetLimit()
	if b := m.GetBlkio(); b != nil {
		devs := cgstats.Devices{}
		for _, e := range b.GetIoServiceBytesRecursive() {
			devs.Get(e.Major, e.Minor).Bytes[e.Op] = e.Value
		}
		for _, e := range b.GetIoServicedRecursive() {
			devs.Get(e.Major, e.Minor).Ops[e.Op] = e.Value
		}
		s.Blkio = devs.List()
	}
	for _, h := range m.GetHugetlb() {
		s.Hugetlb = append(s.Hugetlb, cgstats.Hugetlb{Pagesize: h.Pagesize, Usage: h.Usage, MaxUsage: h.Max, HasMax: true})
	}
	return s
}

func fromV2(m *v2.Metrics) cgstats.Stats {
	var s cgstats.Stats
	if cpu := m.GetCPU(); cpu != nil {
		s.CPUUsageNanos = cpu.GetUsageUsec() * 1000
		s.CPUUserNanos, s.CPUSystemNanos = cpu.GetUserUsec()*1000, cpu.GetSystemUsec()*1000
		s.CPUPeriods, s.CPUThrottledPeriods, s.CPUThrottledNanos = cpu.GetNrPeriods(), cpu.GetNrThrottled(), cpu.GetThrottledUsec()*1000
	}
	if mem := m.GetMemory(); mem != nil {
		s.MemoryUsage = mem.Usage
		if mem.UsageLimit < noLimit {
			s.MemoryLimit = mem.UsageLimit
		}
		s.WorkingSet = sub(s.MemoryUsage, mem.InactiveFile)
		s.RSS = mem.Anon
		s.PageFaults, s.MajorPageFaults = mem.Pgfault, mem.Pgmajfault
		s.MemoryCache, s.MemoryMappedFile, s.MemorySwap = mem.File, mem.FileMapped, mem.SwapUsage
		s.SwapKnown = true
		if mem.SwapLimit < noLimit {
			s.SwapLimit = mem.SwapLimit
		}
		s.MemoryKernel = mem.KernelStack + mem.Slab + mem.Sock
		s.MemoryMaxUsage = mem.MaxUsage
	}
	s.MemoryFailcnt, s.OOMKills = m.GetMemoryEvents().GetMax(), m.GetMemoryEvents().GetOomKill()
	s.Processes, s.PidsLimit = m.GetPids().GetCurrent(), m.GetPids().GetLimit()
	if io := m.GetIo(); io != nil {
		devs := cgstats.Devices{}
		for _, e := range io.GetUsage() {
			d := devs.Get(e.Major, e.Minor)
			d.Bytes["Read"], d.Bytes["Write"], d.Ops["Read"], d.Ops["Write"] = e.Rbytes, e.Wbytes, e.Rios, e.Wios
		}
		s.Blkio = devs.List()
	}
	for _, h := range m.GetHugetlb() {
		s.Hugetlb = append(s.Hugetlb, cgstats.Hugetlb{Pagesize: h.Pagesize, Usage: h.Current})
	}
	if cpu, mem, io := m.GetCPU().GetPSI(), m.GetMemory().GetPSI(), m.GetIo().GetPSI(); cpu != nil || mem != nil || io != nil {
		s.Pressure = &cgstats.Pressure{CPU: psi(cpu), Memory: psi(mem), IO: psi(io)}
	}
	return s
}

func psi(p *v2.PSIStats) cgstats.PSI {
	return cgstats.PSI{SomeMicros: p.GetSome().GetTotal(), FullMicros: p.GetFull().GetTotal()}
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
