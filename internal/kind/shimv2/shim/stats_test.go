package shim

import (
	"testing"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
)

// The shim's metrics map to the same readings internal/cgroups/cgstats takes from the files.
func TestFromV1(t *testing.T) {
	s := fromV1(&v1.Metrics{
		CPU: &v1.CPUStat{Usage: &v1.CPUUsage{Total: 30, User: 20, Kernel: 10}, Throttling: &v1.Throttle{Periods: 5, ThrottledPeriods: 2, ThrottledTime: 7}},
		Memory: &v1.MemoryStat{
			Usage: &v1.MemoryEntry{Usage: 1000, Limit: 1 << 63, Max: 1200, Failcnt: 3}, Swap: &v1.MemoryEntry{Usage: 1100}, Kernel: &v1.MemoryEntry{Usage: 40},
			TotalCache: 300, TotalMappedFile: 30, TotalRSS: 500, TotalInactiveFile: 100,
		},
		MemoryOomControl: &v1.MemoryOomControl{OomKill: 1},
		Pids:             &v1.PidsStat{Current: 4, Limit: 64},
		Blkio: &v1.BlkIOStat{
			IoServiceBytesRecursive: []*v1.BlkIOEntry{{Major: 8, Minor: 0, Op: "Read", Value: 4096}},
			IoServicedRecursive:     []*v1.BlkIOEntry{{Major: 8, Minor: 0, Op: "Read", Value: 1}},
		},
		Hugetlb: []*v1.HugetlbStat{{Pagesize: "2MB", Usage: 2, Max: 4}},
	})
	if s.CPUUserNanos != 20 || s.CPUSystemNanos != 10 || s.CPUThrottledPeriods != 2 || s.CPUThrottledNanos != 7 ||
		s.MemoryLimit != 0 || s.WorkingSet != 900 || s.MemorySwap != 100 || s.MemoryKernel != 40 || s.MemoryMaxUsage != 1200 ||
		s.MemoryFailcnt != 3 || s.OOMKills != 1 || s.PidsLimit != 64 || s.MemoryCache != 300 || s.MemoryMappedFile != 30 {
		t.Errorf("v1 = %+v", s)
	}
	if len(s.Blkio) != 1 || s.Blkio[0].Bytes["Read"] != 4096 || s.Blkio[0].Ops["Read"] != 1 {
		t.Errorf("v1 blkio = %+v", s.Blkio)
	}
	if len(s.Hugetlb) != 1 || !s.Hugetlb[0].HasMax || s.Hugetlb[0].MaxUsage != 4 || s.Pressure != nil {
		t.Errorf("v1 hugetlb %+v pressure %v", s.Hugetlb, s.Pressure)
	}
}

func TestFromV2(t *testing.T) {
	s := fromV2(&v2.Metrics{
		CPU:          &v2.CPUStat{UsageUsec: 3, UserUsec: 2, SystemUsec: 1, NrPeriods: 9, NrThrottled: 4, ThrottledUsec: 5, PSI: &v2.PSIStats{Some: &v2.PSIData{Total: 100}, Full: &v2.PSIData{Total: 50}}},
		Memory:       &v2.MemoryStat{Usage: 1000, UsageLimit: 2000, InactiveFile: 100, Anon: 600, File: 300, FileMapped: 20, SwapUsage: 8, KernelStack: 1, Slab: 2, Sock: 3, MaxUsage: 1500},
		MemoryEvents: &v2.MemoryEvents{Max: 6, OomKill: 2},
		Pids:         &v2.PidsStat{Current: 3, Limit: 10},
		Io:           &v2.IOStat{Usage: []*v2.IOEntry{{Major: 259, Minor: 0, Rbytes: 10, Wbytes: 20, Rios: 1, Wios: 2}}},
		Hugetlb:      []*v2.HugeTlbStat{{Pagesize: "1GB", Current: 0}},
	})
	if s.CPUUserNanos != 2000 || s.CPUThrottledNanos != 5000 || s.CPUPeriods != 9 || s.MemoryLimit != 2000 || s.MemoryKernel != 6 ||
		s.MemorySwap != 8 || s.MemoryMaxUsage != 1500 || s.MemoryFailcnt != 6 || s.OOMKills != 2 || s.PidsLimit != 10 {
		t.Errorf("v2 = %+v", s)
	}
	if len(s.Blkio) != 1 || s.Blkio[0].Bytes["Write"] != 20 || s.Blkio[0].Ops["Write"] != 2 {
		t.Errorf("v2 io = %+v", s.Blkio)
	}
	if len(s.Hugetlb) != 1 || s.Hugetlb[0].HasMax || s.Pressure == nil || s.Pressure.CPU.SomeMicros != 100 || s.Pressure.CPU.FullMicros != 50 {
		t.Errorf("v2 hugetlb %+v pressure %+v", s.Hugetlb, s.Pressure)
	}
}
