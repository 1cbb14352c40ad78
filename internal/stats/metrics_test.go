package stats

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/stats/procstats"
)

// Every descriptor is complete and named once; every metric built from a full reading
// (this process as the container's) has a descriptor, its type and as many label values
// as it has keys, and every descriptor gets a value.
func TestContainerMetricsMatchDescriptors(t *testing.T) {
	descs := map[string]*runtimeapi.MetricDescriptor{}
	for _, d := range MetricDescriptors() {
		if d.Help == "" || len(d.LabelKeys) == 0 || descs[d.Name] != nil {
			t.Errorf("descriptor %v: empty help or label keys, or named twice", d)
		}
		descs[d.Name] = d
	}
	quota, period, shares, limit := int64(50000), uint64(100000), uint64(512), int64(64<<20)
	res, _ := json.Marshal(specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota, Period: &period, Shares: &shares}, Memory: &specs.LinuxMemory{Limit: &limit}})
	s := sample{
		at: time.Now(), cgOK: true, fsOK: true,
		cg: cgstats.Stats{
			CPUUsageNanos: 3e9, CPUUserNanos: 2e9, CPUSystemNanos: 1e9, PidsLimit: 100, Pids: []int{os.Getpid()},
			Blkio:    []cgstats.BlkioDevice{{Major: 7, Minor: 99, Bytes: map[string]uint64{"Read": 1, "Write": 2, "Total": 3}, Ops: map[string]uint64{"Read": 1, "Write": 1}}},
			Hugetlb:  []cgstats.Hugetlb{{Pagesize: "2MB", Usage: 1, MaxUsage: 2, HasMax: true}},
			Pressure: &cgstats.Pressure{CPU: cgstats.PSI{SomeMicros: 2e6}},
		},
		fs: image.Usage{Mountpoint: os.TempDir(), Bytes: 4096},
		// A Full sample walks /proc for the processes its runtime named.
		proc: procstats.Read("/proc", []int{os.Getpid()}), procOK: true,
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(os.TempDir(), &fs); err != nil {
		t.Fatal(err)
	}
	labels := []string{"c", "id", "img", "c", "ns", "pod"}
	got := containerMetrics(container.Status{State: container.StateRunning, StartedAt: time.Now().UnixNano(), Resources: res}, s, &fs, labels)
	got = append(got, networkMetrics([]cgstats.Interface{{Name: "eth0", RxBytes: 1}}, 1, "ns", "pod")...)
	seen := map[string]bool{}
	for _, m := range got {
		d := descs[m.Name]
		if d == nil {
			t.Errorf("metric %s has no descriptor", m.Name)
			continue
		}
		seen[m.Name] = true
		if len(m.LabelValues) != len(d.LabelKeys) {
			t.Errorf("%s: label values %v for keys %v", m.Name, m.LabelValues, d.LabelKeys)
		}
		for _, v := range m.LabelValues {
			if v == "" {
				t.Errorf("%s: empty label value in %v", m.Name, m.LabelValues)
			}
		}
		// Counters end in _total, as Prometheus names them, but for the inode total (a
		// gauge); failcnt is cAdvisor's counter without the suffix.
		wantCounter := (strings.HasSuffix(m.Name, "_total") && m.Name != "container_fs_inodes_total") || m.Name == "container_memory_failcnt"
		if (m.MetricType == runtimeapi.MetricType_COUNTER) != wantCounter {
			t.Errorf("%s: type %v", m.Name, m.MetricType)
		}
	}
	for name := range descs {
		if !seen[name] {
			t.Errorf("no value for %s", name)
		}
	}
	value := func(name string) uint64 {
		for _, m := range got {
			if m.Name == name {
				return m.Value.GetValue()
			}
		}
		return 0
	}
	for name, want := range map[string]uint64{
		"container_cpu_usage_seconds_total": 3, "container_cpu_user_seconds_total": 2, "container_spec_cpu_quota": 50000,
		"container_spec_cpu_shares": 512, "container_spec_memory_limit_bytes": 64 << 20, "container_threads_max": 100,
		"container_processes": 1, "container_pressure_cpu_waiting_seconds_total": 2, "container_fs_usage_bytes": 4096,
	} {
		if v := value(name); v != want {
			t.Errorf("%s = %d, want %d", name, v, want)
		}
	}
	if value("container_file_descriptors") < 3 || value("container_threads") == 0 {
		t.Errorf("process counts of this process: fds %d threads %d", value("container_file_descriptors"), value("container_threads"))
	}
}

// Without a runtime reading (a runsc container whose events failed) and without recorded
// resources, only what is known is sent: spec defaults and last seen (no start time: not
// started).
func TestContainerMetricsWithoutReading(t *testing.T) {
	got := containerMetrics(container.Status{State: container.StateRunning}, sample{at: time.Now()}, nil, []string{"c", "id", "img", "c", "ns", "pod"})
	names := map[string]uint64{}
	for _, m := range got {
		names[m.Name] = m.Value.GetValue()
	}
	if len(names) != 6 || names["container_spec_cpu_period"] != 100000 || names["container_spec_cpu_shares"] != 1024 {
		t.Errorf("metrics without a reading: %v", names)
	}
	if _, ok := names["container_spec_cpu_quota"]; ok {
		t.Error("a quota without one set")
	}
}
