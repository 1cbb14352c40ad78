//go:build integration

package integration

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criMetricNames are the cAdvisor metrics kubelet's PodAndContainerStatsFromCRI and
// critest's metrics specs expect of a runtime.
var criMetricNames = []string{
	"container_blkio_device_usage_total",
	"container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total", "container_cpu_cfs_throttled_seconds_total",
	"container_cpu_system_seconds_total", "container_cpu_usage_seconds_total", "container_cpu_user_seconds_total",
	"container_file_descriptors",
	"container_fs_inodes_free", "container_fs_inodes_total", "container_fs_limit_bytes",
	"container_fs_reads_bytes_total", "container_fs_reads_total", "container_fs_usage_bytes",
	"container_fs_writes_bytes_total", "container_fs_writes_total",
	"container_hugetlb_max_usage_bytes", "container_hugetlb_usage_bytes",
	"container_last_seen",
	"container_memory_cache", "container_memory_failcnt", "container_memory_failures_total", "container_memory_kernel_usage",
	"container_memory_mapped_file", "container_memory_max_usage_bytes", "container_memory_rss", "container_memory_swap",
	"container_memory_usage_bytes", "container_memory_working_set_bytes",
	"container_network_receive_bytes_total", "container_network_receive_errors_total",
	"container_network_receive_packets_dropped_total", "container_network_receive_packets_total",
	"container_network_transmit_bytes_total", "container_network_transmit_errors_total",
	"container_network_transmit_packets_dropped_total", "container_network_transmit_packets_total",
	"container_oom_events_total",
	"container_pressure_cpu_stalled_seconds_total", "container_pressure_cpu_waiting_seconds_total",
	"container_pressure_io_stalled_seconds_total", "container_pressure_io_waiting_seconds_total",
	"container_pressure_memory_stalled_seconds_total", "container_pressure_memory_waiting_seconds_total",
	"container_processes", "container_sockets",
	"container_spec_cpu_period", "container_spec_cpu_quota", "container_spec_cpu_shares",
	"container_spec_memory_limit_bytes", "container_spec_memory_reservation_limit_bytes", "container_spec_memory_swap_limit_bytes",
	"container_start_time_seconds", "container_threads", "container_threads_max", "container_ulimits_soft",
}

// mayLackDescriptor: a runtime may not describe these (their data depends on the kernel
// and the cgroup setup: hugetlb, PSI), nor a quota, a reservation or ulimits.
var mayLackDescriptor = setOf(
	"container_hugetlb_max_usage_bytes", "container_hugetlb_usage_bytes",
	"container_pressure_cpu_stalled_seconds_total", "container_pressure_cpu_waiting_seconds_total",
	"container_pressure_io_stalled_seconds_total", "container_pressure_io_waiting_seconds_total",
	"container_pressure_memory_stalled_seconds_total", "container_pressure_memory_waiting_seconds_total",
	"container_spec_cpu_quota", "container_spec_memory_reservation_limit_bytes", "container_ulimits_soft",
)

// mayLackValue: besides those, block I/O may go unaccounted (the device's scheduler, the
// kernel's throttle layer), so a pod's metrics may lack these values.
var mayLackValue = setOf(
	"container_blkio_device_usage_total",
	"container_fs_reads_bytes_total", "container_fs_reads_total", "container_fs_writes_bytes_total", "container_fs_writes_total",
)

// runscLacks are values a gVisor container has none of here: its processes and open files
// live in gVisor's kernel, not in a host cgroup /proc can see; `runsc events --stats`
// gives CPU and memory usage and a task count, no CFS throttling, CPU split or memory
// detail beyond usage and cache.
var runscLacks = setOf(
	"container_file_descriptors", "container_sockets", "container_threads",
)

func setOf(names ...string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// critest's metrics specs, in our words: descriptors complete and covering the expected
// set; a pod with a limited running container that writes files has, among its and its
// container's metrics, a value with non-empty labels for every expected metric a runtime
// must serve; each described metric's first value has a label value per key.
func TestCRIMetricsDescriptorSet(t *testing.T) {
	e := newContainerEnv(t)
	writeNetwork(t, e)
	ctx := ctxT(t)

	descs, err := e.d.RS.ListMetricDescriptors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for _, d := range descs {
		if d.Help == "" || len(d.LabelKeys) == 0 {
			t.Errorf("descriptor %s: help %q, label keys %v", d.Name, d.Help, d.LabelKeys)
		}
		keys[d.Name] = len(d.LabelKeys)
	}
	for _, n := range criMetricNames {
		if _, ok := keys[n]; !ok && !mayLackDescriptor[n] {
			t.Errorf("no descriptor for %s", n)
		}
	}

	for _, handler := range []string{"runc", "runc-shim", "runsc"} {
		t.Run(handler, func(t *testing.T) {
			podID, pod := e.pod("metrics-set-"+handler, handler)
			cfg := e.ctrConfig("writer", "sh", "-c", "i=0; while true; do i=$((i+1)); head -c 65536 /dev/zero > /tmp/f$((i%4)); sleep 1; done")
			cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 64 << 20}
			ctrID := e.run(podID, pod, cfg)
			defer func() { _ = e.d.RS.RemovePodSandbox(ctx, podID) }()

			lacks := map[string]bool{}
			if handler == "runsc" {
				lacks = runscLacks
			}
			var missing []string
			waitFor(t, 20*time.Second, "a value for every required metric", func() (bool, string) {
				found, err := podMetricValues(e, podID, ctrID)
				if err != nil {
					return false, err.Error()
				}
				missing = missing[:0]
				for _, n := range criMetricNames {
					if !found[n] && !mayLackDescriptor[n] && !mayLackValue[n] && !lacks[n] {
						missing = append(missing, n)
					}
				}
				return len(missing) == 0, fmt.Sprintf("missing %v", missing)
			})

			pms, err := e.d.RS.ListPodSandboxMetrics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			first := map[string]*runtimeapi.Metric{}
			var all []*runtimeapi.Metric
			for _, pm := range pms {
				all = append(all, pm.Metrics...)
				for _, cm := range pm.ContainerMetrics {
					all = append(all, cm.Metrics...)
				}
			}
			for _, m := range all {
				if first[m.Name] == nil {
					first[m.Name] = m
				}
				if _, ok := keys[m.Name]; !ok {
					t.Errorf("metric %s has no descriptor", m.Name)
				}
			}
			for name, n := range keys {
				if m := first[name]; m != nil && len(m.LabelValues) != n {
					t.Errorf("%s: first value has %d label values %v, descriptor %d keys", name, len(m.LabelValues), m.LabelValues, n)
				}
			}
			var absent []string
			for _, n := range criMetricNames {
				if first[n] == nil {
					absent = append(absent, n)
				}
			}
			sort.Strings(absent)
			t.Logf("%s: %d metric values; no value for: %s", handler, len(all), strings.Join(absent, " "))

			// The container's limits show as cAdvisor shows them.
			want := map[string]uint64{"container_spec_cpu_period": 100000, "container_spec_cpu_quota": 50000, "container_spec_memory_limit_bytes": 64 << 20}
			for _, m := range all {
				if w, ok := want[m.Name]; ok && m.LabelValues[1] == ctrID && m.Value.GetValue() != w {
					t.Errorf("%s = %d, want %d", m.Name, m.Value.GetValue(), w)
				}
			}
		})
	}
}

// podMetricValues names the metrics with a value with non-empty labels among the pod's
// metrics and those of its container ctrID.
func podMetricValues(e *containerEnv, podID, ctrID string) (map[string]bool, error) {
	pms, err := e.d.RS.ListPodSandboxMetrics(ctxT(e.t))
	if err != nil {
		return nil, err
	}
	found := map[string]bool{}
	add := func(ms []*runtimeapi.Metric) {
		for _, m := range ms {
			ok := len(m.LabelValues) > 0
			for _, v := range m.LabelValues {
				ok = ok && v != ""
			}
			if ok {
				found[m.Name] = true
			}
		}
	}
	for _, pm := range pms {
		if pm.PodSandboxId != podID {
			continue
		}
		add(pm.Metrics)
		for _, cm := range pm.ContainerMetrics {
			if cm.ContainerId == ctrID {
				add(cm.Metrics)
			}
		}
		return found, nil
	}
	return nil, fmt.Errorf("pod %s not in ListPodSandboxMetrics", podID[:12])
}
