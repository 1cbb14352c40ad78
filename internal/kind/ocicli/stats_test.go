package ocicli

import (
	"encoding/json"
	"testing"

	"github.com/rtshimd/rtshimd/internal/kind/ocicli/ocicmd"
)

// `events --stats` data in runc's format (gVisor fills a part of it) reads as a cgroup
// reading: memsw less usage is swap, a no-limit value is no limit, blkio by device.
func TestEventStats(t *testing.T) {
	raw := `{"cpu":{"usage":{"total":3000,"kernel":1000,"user":2000},"throttling":{"periods":10,"throttledPeriods":2,"throttledTime":500}},
	"memory":{"usage":{"limit":9223372036854771712,"usage":1000,"max":1500,"failcnt":1},"swap":{"usage":1200},"kernel":{"usage":50},"cache":300,
	"raw":{"total_rss":400,"total_inactive_file":100,"total_mapped_file":20}},
	"pids":{"current":3,"limit":99},
	"blkio":{"ioServiceBytesRecursive":[{"major":8,"minor":0,"op":"Read","value":4096}],"ioServicedRecursive":[{"major":8,"minor":0,"op":"Read","value":1}]}}`
	var ev ocicmd.EventStats
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		t.Fatal(err)
	}
	s := eventStats(&ev)
	if s.CPUUsageNanos != 3000 || s.CPUUserNanos != 2000 || s.CPUSystemNanos != 1000 || s.CPUThrottledPeriods != 2 || s.CPUThrottledNanos != 500 ||
		s.MemoryLimit != 0 || s.WorkingSet != 900 || s.MemorySwap != 200 || s.MemoryKernel != 50 || s.MemoryCache != 300 || s.MemoryMappedFile != 20 ||
		s.MemoryMaxUsage != 1500 || s.MemoryFailcnt != 1 || s.RSS != 400 || s.Processes != 3 || s.PidsLimit != 99 || s.Pids != nil {
		t.Errorf("eventStats = %+v", s)
	}
	if len(s.Blkio) != 1 || s.Blkio[0].Bytes["Read"] != 4096 || s.Blkio[0].Ops["Read"] != 1 {
		t.Errorf("blkio = %+v", s.Blkio)
	}
}
