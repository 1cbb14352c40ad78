package container

import (
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cAdvisor-style metrics for kubelet (PodAndContainerStatsFromCRI), built from the same
// cgroup readings as the stats. Values are integers, as the CRI carries them (seconds
// are whole seconds, as CRI-O reports them).
var (
	containerLabels = []string{"container", "id", "image", "name", "namespace", "pod"}
	networkLabels   = []string{"interface", "namespace", "pod"}

	metricDescriptors = []*runtimeapi.MetricDescriptor{
		{Name: "container_cpu_usage_seconds_total", Help: "Cumulative CPU time consumed, in seconds.", LabelKeys: containerLabels},
		{Name: "container_memory_usage_bytes", Help: "Current memory usage, including all memory regardless of when it was accessed.", LabelKeys: containerLabels},
		{Name: "container_memory_working_set_bytes", Help: "Current working set, in bytes.", LabelKeys: containerLabels},
		{Name: "container_memory_rss", Help: "Size of RSS, in bytes.", LabelKeys: containerLabels},
		{Name: "container_network_receive_bytes_total", Help: "Cumulative count of bytes received.", LabelKeys: networkLabels},
		{Name: "container_network_transmit_bytes_total", Help: "Cumulative count of bytes transmitted.", LabelKeys: networkLabels},
	}
)

// MetricDescriptors describes the metrics PodMetrics returns.
func MetricDescriptors() []*runtimeapi.MetricDescriptor { return metricDescriptors }

// PodMetrics returns the metrics of every ready pod and its containers.
func (m *Manager) PodMetrics() []*runtimeapi.PodSandboxMetrics {
	var out []*runtimeapi.PodSandboxMetrics
	for _, ps := range m.ListPodStats(nil) {
		attr := ps.GetAttributes()
		pod, ns := attr.GetMetadata().GetName(), attr.GetMetadata().GetNamespace()
		now := time.Now().UnixNano()
		pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: attr.GetId()}
		for _, i := range ps.GetLinux().GetNetwork().GetInterfaces() {
			labels := []string{i.Name, ns, pod}
			pm.Metrics = append(pm.Metrics,
				metric("container_network_receive_bytes_total", runtimeapi.MetricType_COUNTER, now, labels, i.GetRxBytes().GetValue()),
				metric("container_network_transmit_bytes_total", runtimeapi.MetricType_COUNTER, now, labels, i.GetTxBytes().GetValue()))
		}
		for _, cs := range ps.GetLinux().GetContainers() {
			ca := cs.GetAttributes()
			image := ""
			if c, err := m.Get(ca.GetId()); err == nil {
				image = c.ImageRef
			}
			labels := []string{ca.GetMetadata().GetName(), ca.GetId(), image, ca.GetMetadata().GetName(), ns, pod}
			mem := cs.GetMemory()
			pm.ContainerMetrics = append(pm.ContainerMetrics, &runtimeapi.ContainerMetrics{
				ContainerId: ca.GetId(),
				Metrics: []*runtimeapi.Metric{
					metric("container_cpu_usage_seconds_total", runtimeapi.MetricType_COUNTER, now, labels, cs.GetCpu().GetUsageCoreNanoSeconds().GetValue()/uint64(time.Second)),
					metric("container_memory_usage_bytes", runtimeapi.MetricType_GAUGE, now, labels, mem.GetUsageBytes().GetValue()),
					metric("container_memory_working_set_bytes", runtimeapi.MetricType_GAUGE, now, labels, mem.GetWorkingSetBytes().GetValue()),
					metric("container_memory_rss", runtimeapi.MetricType_GAUGE, now, labels, mem.GetRssBytes().GetValue()),
				},
			})
		}
		out = append(out, pm)
	}
	return out
}

func metric(name string, t runtimeapi.MetricType, ts int64, labels []string, v uint64) *runtimeapi.Metric {
	return &runtimeapi.Metric{Name: name, Timestamp: ts, MetricType: t, LabelValues: labels, Value: u64(v)}
}
