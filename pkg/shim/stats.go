package shim

import (
	"context"
	"fmt"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/typeurl/v2"

	"github.com/rtshimd/rtshimd/pkg/cgstats"
)

// noLimit: cgroup v1 reports "no limit" as a huge page-aligned number, v2 as MaxUint64.
const noLimit = 1 << 62

// Stats reads the task's cgroup counters (cgroup v1 or v2 metrics, as the shim sends
// them), computed as pkg/cgstats computes them from the cgroup filesystem.
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
	s.CPUUsageNanos = m.GetCPU().GetUsage().GetTotal()
	if mem := m.GetMemory(); mem != nil {
		s.MemoryUsage = mem.GetUsage().GetUsage()
		if l := mem.GetUsage().GetLimit(); l < noLimit {
			s.MemoryLimit = l
		}
		s.WorkingSet = sub(s.MemoryUsage, mem.TotalInactiveFile)
		s.RSS = mem.TotalRSS
		s.PageFaults, s.MajorPageFaults = mem.TotalPgFault, mem.TotalPgMajFault
	}
	s.Processes = m.GetPids().GetCurrent()
	return s
}

func fromV2(m *v2.Metrics) cgstats.Stats {
	var s cgstats.Stats
	s.CPUUsageNanos = m.GetCPU().GetUsageUsec() * 1000
	if mem := m.GetMemory(); mem != nil {
		s.MemoryUsage = mem.Usage
		if mem.UsageLimit < noLimit {
			s.MemoryLimit = mem.UsageLimit
		}
		s.WorkingSet = sub(s.MemoryUsage, mem.InactiveFile)
		s.RSS = mem.Anon
		s.PageFaults, s.MajorPageFaults = mem.Pgfault, mem.Pgmajfault
	}
	s.Processes = m.GetPids().GetCurrent()
	return s
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
