package stats

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/stats/procstats"
)

// cAdvisor-style metrics for kubelet (PodAndContainerStatsFromCRI), named and labelled as
// cAdvisor names them, built from the same readings as the stats: the runtime's cgroup
// counters (or its own, for runsc and shims), /proc of the cgroup's processes, the
// writable layer's usage and its filesystem, the recorded resources. Every call reads
// afresh; only the writable layer's walk (image.Service) and block device names are
// cached. Values are integers, as the CRI carries them: seconds are whole seconds, as
// CRI-O reports them.
//
// A metric is sent only where its reading exists: pressure needs PSI files (cgroup v2, or
// the unified hierarchy of a hybrid v1 host); hugetlb needs the controller on the
// container's cgroup (not mounted on v1 here, not enabled in the unified one), and v2
// keeps no hugetlb peak; blkio needs the kernel to account the device's I/O; process
// counts need host processes (a sandbox runtime's live inside it); spec_cpu_quota needs a
// quota.
var (
	containerLabels = []string{"container", "id", "image", "name", "namespace", "pod"}
	networkLabels   = []string{"interface", "namespace", "pod"}

	counter, gauge = runtimeapi.MetricType_COUNTER, runtimeapi.MetricType_GAUGE
)

type metricDef struct {
	name, help string
	typ        runtimeapi.MetricType
	keys       []string
}

// ctrKeys are the container's label keys followed by extra ones.
func ctrKeys(extra ...string) []string {
	return append(append([]string(nil), containerLabels...), extra...)
}

var metricDefs = []metricDef{
	{"container_cpu_usage_seconds_total", "Cumulative CPU time consumed, in seconds.", counter, ctrKeys()},
	{"container_cpu_user_seconds_total", "Cumulative user CPU time consumed, in seconds.", counter, ctrKeys()},
	{"container_cpu_system_seconds_total", "Cumulative system CPU time consumed, in seconds.", counter, ctrKeys()},
	{"container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", counter, ctrKeys()},
	{"container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", counter, ctrKeys()},
	{"container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled, in seconds.", counter, ctrKeys()},

	{"container_memory_usage_bytes", "Current memory usage, including all memory regardless of when it was accessed.", gauge, ctrKeys()},
	{"container_memory_working_set_bytes", "Current working set, in bytes.", gauge, ctrKeys()},
	{"container_memory_rss", "Size of RSS, in bytes.", gauge, ctrKeys()},
	{"container_memory_cache", "Number of bytes of page cache memory.", gauge, ctrKeys()},
	{"container_memory_mapped_file", "Size of memory mapped files, in bytes.", gauge, ctrKeys()},
	{"container_memory_swap", "Container swap usage, in bytes.", gauge, ctrKeys()},
	{"container_memory_kernel_usage", "Size of kernel memory allocated, in bytes.", gauge, ctrKeys()},
	{"container_memory_max_usage_bytes", "Maximum memory usage recorded, in bytes.", gauge, ctrKeys()},
	{"container_memory_failcnt", "Number of memory usage hits limits.", counter, ctrKeys()},
	{"container_memory_failures_total", "Cumulative count of memory allocation failures.", counter, ctrKeys("failure_type", "scope")},
	{"container_oom_events_total", "Count of out of memory events observed for the container.", counter, ctrKeys()},

	{"container_processes", "Number of processes running inside the container.", gauge, ctrKeys()},
	{"container_threads", "Number of threads running inside the container.", gauge, ctrKeys()},
	{"container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero.", gauge, ctrKeys()},
	{"container_file_descriptors", "Number of open file descriptors for the container.", gauge, ctrKeys()},
	{"container_sockets", "Number of open sockets for the container.", gauge, ctrKeys()},
	{"container_ulimits_soft", "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice.", gauge, ctrKeys("ulimit")},

	{"container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", gauge, ctrKeys("device")},
	{"container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", gauge, ctrKeys("device")},
	{"container_fs_inodes_free", "Number of available inodes.", gauge, ctrKeys("device")},
	{"container_fs_inodes_total", "Number of inodes.", gauge, ctrKeys("device")},
	{"container_fs_reads_bytes_total", "Cumulative count of bytes read.", counter, ctrKeys("device")},
	{"container_fs_writes_bytes_total", "Cumulative count of bytes written.", counter, ctrKeys("device")},
	{"container_fs_reads_total", "Cumulative count of reads completed.", counter, ctrKeys("device")},
	{"container_fs_writes_total", "Cumulative count of writes completed.", counter, ctrKeys("device")},
	{"container_blkio_device_usage_total", "Blkio device bytes usage.", counter, ctrKeys("device", "major", "minor", "operation")},

	{"container_hugetlb_usage_bytes", "Current hugepage usage, in bytes.", gauge, ctrKeys("pagesize")},
	{"container_hugetlb_max_usage_bytes", "Maximum hugepage usage recorded, in bytes.", gauge, ctrKeys("pagesize")},

	{"container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion.", counter, ctrKeys()},
	{"container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion.", counter, ctrKeys()},
	{"container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion.", counter, ctrKeys()},
	{"container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion.", counter, ctrKeys()},
	{"container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to IO congestion.", counter, ctrKeys()},
	{"container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to IO congestion.", counter, ctrKeys()},

	{"container_spec_cpu_period", "CPU period of the container.", gauge, ctrKeys()},
	{"container_spec_cpu_quota", "CPU quota of the container.", gauge, ctrKeys()},
	{"container_spec_cpu_shares", "CPU share of the container.", gauge, ctrKeys()},
	{"container_spec_memory_limit_bytes", "Memory limit for the container.", gauge, ctrKeys()},
	{"container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.", gauge, ctrKeys()},
	{"container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", gauge, ctrKeys()},
	{"container_start_time_seconds", "Start time of the container since unix epoch in seconds.", gauge, ctrKeys()},
	{"container_last_seen", "Last time a container was seen by the exporter.", gauge, ctrKeys()},

	{"container_network_receive_bytes_total", "Cumulative count of bytes received.", counter, networkLabels},
	{"container_network_receive_packets_total", "Cumulative count of packets received.", counter, networkLabels},
	{"container_network_receive_errors_total", "Cumulative count of errors encountered while receiving.", counter, networkLabels},
	{"container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving.", counter, networkLabels},
	{"container_network_transmit_bytes_total", "Cumulative count of bytes transmitted.", counter, networkLabels},
	{"container_network_transmit_packets_total", "Cumulative count of packets transmitted.", counter, networkLabels},
	{"container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting.", counter, networkLabels},
	{"container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting.", counter, networkLabels},
}

var (
	metricDescriptors []*runtimeapi.MetricDescriptor
	metricTypes       = map[string]runtimeapi.MetricType{}
)

func init() {
	for _, d := range metricDefs {
		metricDescriptors = append(metricDescriptors, &runtimeapi.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: d.keys})
		metricTypes[d.name] = d.typ
	}
}

// MetricDescriptors describes the metrics PodMetrics returns.
func MetricDescriptors() []*runtimeapi.MetricDescriptor { return metricDescriptors }

// PodMetrics returns the metrics of every ready pod and its running containers.
func (svc *Service) PodMetrics() []*runtimeapi.PodSandboxMetrics {
	type ctr struct {
		pod int
		c   *container.Container
		s   sample
	}
	var (
		out  []*runtimeapi.PodSandboxMetrics
		pods []*sandbox.Sandbox
		ctrs []*ctr
	)
	for _, p := range svc.opts.Pods.List(&runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}) {
		sb, err := svc.opts.Pods.Get(p.Id)
		if err != nil {
			continue
		}
		for _, c := range svc.opts.Containers.OfSandbox(sb.ID) {
			if c.Status().State == container.StateRunning {
				ctrs = append(ctrs, &ctr{pod: len(pods), c: c})
			}
		}
		pods = append(pods, sb)
	}
	// Every reading, /proc walks included, is taken a few at a time (spread), before the
	// answer is built.
	spread(len(ctrs), func(i int) { ctrs[i].s = svc.sample(ctrs[i].c, cgstats.Full) })

	fsInfo := map[string]*unix.Statfs_t{} // by mountpoint: one statfs per call
	for i, sb := range pods {
		meta := sb.PodConfig().GetMetadata()
		pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: sb.ID}
		var running []*container.Container
		for _, c := range ctrs {
			if c.pod == i {
				running = append(running, c.c)
			}
		}
		if pid := netPid(sb, running); sb.NetNS != "" && pid > 0 {
			if ifs, err := netDev(pid); err == nil {
				pm.Metrics = networkMetrics(ifs, time.Now().UnixNano(), meta.GetNamespace(), meta.GetName())
			} else {
				logrus.WithFields(logrus.Fields{"sandbox": sb.ID, "pid": pid}).WithError(err).Debug("pod network counters unreadable")
			}
		}
		for _, c := range ctrs {
			if c.pod != i {
				continue
			}
			if c.s.fsOK && fsInfo[c.s.fs.Mountpoint] == nil {
				var st unix.Statfs_t
				if err := unix.Statfs(c.s.fs.Mountpoint, &st); err == nil {
					fsInfo[c.s.fs.Mountpoint] = &st
				}
			}
			labels := []string{c.c.Config().GetMetadata().GetName(), c.c.ID, c.c.ImageRef, c.c.Config().GetMetadata().GetName(), meta.GetNamespace(), meta.GetName()}
			pm.ContainerMetrics = append(pm.ContainerMetrics, &runtimeapi.ContainerMetrics{
				ContainerId: c.c.ID,
				Metrics:     containerMetrics(c.c.Status(), c.s, fsInfo[c.s.fs.Mountpoint], labels),
			})
		}
		out = append(out, pm)
	}
	return out
}

func networkMetrics(ifs []cgstats.Interface, ts int64, ns, pod string) []*runtimeapi.Metric {
	var out []*runtimeapi.Metric
	for _, i := range ifs {
		b := &metricSet{ts: ts, labels: []string{i.Name, ns, pod}}
		b.add("container_network_receive_bytes_total", i.RxBytes)
		b.add("container_network_receive_packets_total", i.RxPackets)
		b.add("container_network_receive_errors_total", i.RxErrors)
		b.add("container_network_receive_packets_dropped_total", i.RxDropped)
		b.add("container_network_transmit_bytes_total", i.TxBytes)
		b.add("container_network_transmit_packets_total", i.TxPackets)
		b.add("container_network_transmit_errors_total", i.TxErrors)
		b.add("container_network_transmit_packets_dropped_total", i.TxDropped)
		out = append(out, b.out...)
	}
	return out
}

// containerMetrics are one container's metrics from its status and one sample; fs is the
// writable layer's filesystem (nil if unknown).
func containerMetrics(st container.Status, s sample, fs *unix.Statfs_t, labels []string) []*runtimeapi.Metric {
	b := &metricSet{ts: s.at.UnixNano(), labels: labels}
	if s.cgOK {
		var proc *procstats.Counts
		if s.procOK {
			proc = &s.proc
		}
		cgMetrics(b, s.cg, proc)
	}
	if s.fsOK {
		dev := s.fs.Mountpoint // the store's graph root: where the writable layer lives
		b.add("container_fs_usage_bytes", s.fs.Bytes, dev)
		if fs != nil {
			b.add("container_fs_limit_bytes", fs.Blocks*uint64(fs.Bsize), dev)
			b.add("container_fs_inodes_total", fs.Files, dev)
			b.add("container_fs_inodes_free", fs.Ffree, dev)
		}
	}
	specMetrics(b, st.Resources)
	if st.StartedAt > 0 {
		b.add("container_start_time_seconds", uint64(st.StartedAt/int64(time.Second)))
	}
	b.add("container_last_seen", uint64(s.at.Unix()))
	return b.out
}

// cgMetrics are a cgroup reading's metrics; proc is its processes' counts from /proc, nil
// where the runtime named none.
func cgMetrics(b *metricSet, cg cgstats.Stats, proc *procstats.Counts) {
	sec := func(nanos uint64) uint64 { return nanos / uint64(time.Second) }
	b.add("container_cpu_usage_seconds_total", sec(cg.CPUUsageNanos))
	b.add("container_cpu_user_seconds_total", sec(cg.CPUUserNanos))
	b.add("container_cpu_system_seconds_total", sec(cg.CPUSystemNanos))
	b.add("container_cpu_cfs_periods_total", cg.CPUPeriods)
	b.add("container_cpu_cfs_throttled_periods_total", cg.CPUThrottledPeriods)
	b.add("container_cpu_cfs_throttled_seconds_total", sec(cg.CPUThrottledNanos))

	b.add("container_memory_usage_bytes", cg.MemoryUsage)
	b.add("container_memory_working_set_bytes", cg.WorkingSet)
	b.add("container_memory_rss", cg.RSS)
	b.add("container_memory_cache", cg.MemoryCache)
	b.add("container_memory_mapped_file", cg.MemoryMappedFile)
	b.add("container_memory_swap", cg.MemorySwap)
	b.add("container_memory_kernel_usage", cg.MemoryKernel)
	b.add("container_memory_max_usage_bytes", cg.MemoryMaxUsage)
	b.add("container_memory_failcnt", cg.MemoryFailcnt)
	// The fault counts read are the cgroup's and its children's (v1's total_*, v2's
	// hierarchical memory.stat): cAdvisor's "hierarchy" scope.
	b.add("container_memory_failures_total", cg.PageFaults, "pgfault", "hierarchy")
	b.add("container_memory_failures_total", cg.MajorPageFaults, "pgmajfault", "hierarchy")
	b.add("container_oom_events_total", cg.OOMKills)

	b.add("container_threads_max", cg.PidsLimit)
	if p := proc; p != nil {
		b.add("container_processes", p.Processes)
		b.add("container_threads", p.Threads)
		b.add("container_file_descriptors", p.FDs)
		b.add("container_sockets", p.Sockets)
		if p.OpenFilesKnown {
			b.add("container_ulimits_soft", p.OpenFilesSoft, "max_open_files")
		}
	} else if cg.Processes > 0 { // the runtime's own count (runsc: gVisor's tasks)
		b.add("container_processes", cg.Processes)
	}

	for _, d := range cg.Blkio {
		dev := cgstats.BlockDeviceName(d.Major, d.Minor)
		if dev == "" {
			dev = fmt.Sprintf("%d:%d", d.Major, d.Minor)
		}
		major, minor := strconv.FormatUint(d.Major, 10), strconv.FormatUint(d.Minor, 10)
		ops := make([]string, 0, len(d.Bytes))
		for op := range d.Bytes {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			b.add("container_blkio_device_usage_total", d.Bytes[op], dev, major, minor, op)
		}
		// Where the kernel counts the operation: blkio accounting may be partial.
		for _, f := range []struct {
			name, op string
			from     map[string]uint64
		}{
			{"container_fs_reads_bytes_total", "Read", d.Bytes}, {"container_fs_writes_bytes_total", "Write", d.Bytes},
			{"container_fs_reads_total", "Read", d.Ops}, {"container_fs_writes_total", "Write", d.Ops},
		} {
			if n, ok := f.from[f.op]; ok {
				b.add(f.name, n, dev)
			}
		}
	}
	for _, h := range cg.Hugetlb {
		b.add("container_hugetlb_usage_bytes", h.Usage, h.Pagesize)
		if h.HasMax {
			b.add("container_hugetlb_max_usage_bytes", h.MaxUsage, h.Pagesize)
		}
	}
	if p := cg.Pressure; p != nil {
		sec := func(micros uint64) uint64 { return micros / 1e6 }
		b.add("container_pressure_cpu_waiting_seconds_total", sec(p.CPU.SomeMicros))
		b.add("container_pressure_cpu_stalled_seconds_total", sec(p.CPU.FullMicros))
		b.add("container_pressure_memory_waiting_seconds_total", sec(p.Memory.SomeMicros))
		b.add("container_pressure_memory_stalled_seconds_total", sec(p.Memory.FullMicros))
		b.add("container_pressure_io_waiting_seconds_total", sec(p.IO.SomeMicros))
		b.add("container_pressure_io_stalled_seconds_total", sec(p.IO.FullMicros))
	}
}

// The kernel's defaults, which a cgroup without a setting has (cAdvisor reads them there).
const (
	defaultCPUPeriod = 100000 // µs
	defaultCPUShares = 1024
)

// specMetrics are the limits last applied to the container (its recorded resources);
// 0 is "no limit", as in cAdvisor.
func specMetrics(b *metricSet, raw json.RawMessage) {
	var r specs.LinuxResources
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &r) // written by us from the same type
	}
	period, shares := uint64(defaultCPUPeriod), uint64(defaultCPUShares)
	if c := r.CPU; c != nil {
		if c.Period != nil && *c.Period > 0 {
			period = *c.Period
		}
		if c.Shares != nil && *c.Shares > 0 {
			shares = *c.Shares
		}
		if c.Quota != nil && *c.Quota > 0 {
			b.add("container_spec_cpu_quota", uint64(*c.Quota))
		}
	}
	b.add("container_spec_cpu_period", period)
	b.add("container_spec_cpu_shares", shares)
	var limit, reservation, swap uint64
	if mem := r.Memory; mem != nil {
		limit, reservation, swap = positive(mem.Limit), positive(mem.Reservation), positive(mem.Swap)
	}
	b.add("container_spec_memory_limit_bytes", limit)
	b.add("container_spec_memory_reservation_limit_bytes", reservation)
	b.add("container_spec_memory_swap_limit_bytes", swap)
}

// positive is *v where set and positive (-1 is "unlimited" in the OCI spec), else 0.
func positive(v *int64) uint64 {
	if v == nil || *v <= 0 {
		return 0
	}
	return uint64(*v)
}

// metricSet builds metrics sharing a timestamp and leading label values.
type metricSet struct {
	ts     int64
	labels []string
	out    []*runtimeapi.Metric
}

// add appends name's value with the set's labels and extra ones after them; the type is
// the descriptor's.
func (b *metricSet) add(name string, v uint64, extra ...string) {
	labels := append(append(make([]string, 0, len(b.labels)+len(extra)), b.labels...), extra...)
	b.out = append(b.out, &runtimeapi.Metric{Name: name, Timestamp: b.ts, MetricType: metricTypes[name], LabelValues: labels, Value: u64(v)})
}
