package sandbox

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// Overhead is the overhead a pod was given and where its limits went: kept in its record
// and shown by PodSandboxStatus verbose.
type Overhead struct {
	// Source is "kubelet" (linux.overhead, from the RuntimeClass), "handler" (the row's
	// overhead) or "" (none).
	Source      string `json:"source,omitempty"`
	MemoryBytes int64  `json:"memory_bytes"`
	CPUQuota    int64  `json:"cpu_quota"` // per cpu_period of the pod's limits
	CPUShares   uint64 `json:"cpu_shares"`
	// Limits are the pod's limits plus the overhead (nil: the pod has none), less those
	// kubelet's pod cgroup does not have (see internal/cgroups/podcgroup): what bounds the pod.
	Limits *specs.LinuxResources `json:"limits,omitempty"`
	// PodCgroup is the pod's cgroup (cgroup_parent) given Limits; PodCgroupCreated says
	// rtshimd made it (and removes it with the pod). PodCgroupNote says why it was not.
	PodCgroup        string `json:"pod_cgroup,omitempty"`
	PodCgroupCreated bool   `json:"pod_cgroup_created,omitempty"`
	PodCgroupNote    string `json:"pod_cgroup_note,omitempty"`
	// PodCgroupSet is what was written there: on a cgroup that existed (kubelet's), only
	// the limits that raise its own.
	PodCgroupSet *specs.LinuxResources `json:"pod_cgroup_set,omitempty"`
	// SandboxContainer says the sandbox container got Limits too: its cgroup holds the
	// whole pod (gVisor's sandbox, a VM).
	SandboxContainer bool `json:"sandbox_container,omitempty"`
}

// declared says kubelet passed a RuntimeClass overhead. kubelet sends linux.overhead on
// every pod, empty where the pod has none (kuberuntime's convertOverheadToLinuxResources),
// so an empty one means "none declared" and the row's applies; only a non-nil check made
// every kubelet pod go without the row's overhead (a gVisor sandbox then OOM-killed as a
// whole in a pod of 35 MiB).
func declared(kube *runtimeapi.LinuxContainerResources) bool {
	return kube.GetMemoryLimitInBytes() != 0 || kube.GetCpuQuota() != 0 || kube.GetCpuShares() != 0
}

// defaultCPUPeriod is the CFS period kubelet uses.
const defaultCPUPeriod = 100000

// podOverhead works out a pod's overhead and its limits: the pod's own limits
// (linux.resources, the sum of its containers') plus the overhead kubelet passed from
// the RuntimeClass (linux.overhead) where it passed one, else the handler row's. Each
// limit the pod has grows by the overhead: memory and CPU quota where the pod is
// limited, CPU shares (its requests) where it has them. A pod with none gets none.
func podOverhead(cfg *runtimeapi.PodSandboxConfig, handler string, row config.Overhead) Overhead {
	res := cfg.GetLinux().GetResources()
	kube := cfg.GetLinux().GetOverhead()
	period := res.GetCpuPeriod()
	if period <= 0 {
		period = defaultCPUPeriod
	}
	var o Overhead
	rowQuota := row.MilliCPU * period / 1000
	rowShares := uint64(row.MilliCPU * 1024 / 1000)
	switch {
	case declared(kube):
		o = Overhead{Source: "kubelet", MemoryBytes: kube.GetMemoryLimitInBytes(), CPUQuota: kube.GetCpuQuota(), CPUShares: uint64(kube.GetCpuShares())}
		if (row.MemoryBytes != 0 || row.MilliCPU != 0) && (o.MemoryBytes != row.MemoryBytes || o.CPUQuota != rowQuota) {
			logrus.WithFields(logrus.Fields{
				"pod": cfg.GetMetadata().GetName(), "handler": handler,
				"kubelet_memory": o.MemoryBytes, "kubelet_cpu_quota": o.CPUQuota,
				"handler_memory": row.MemoryBytes, "handler_cpu_quota": rowQuota,
			}).Warn("the RuntimeClass overhead differs from the handler's; using the RuntimeClass's (update one of them: `rtshimd runtimeclasses` prints the handler's)")
		}
	case row.MemoryBytes != 0 || row.MilliCPU != 0:
		o = Overhead{Source: "handler", MemoryBytes: row.MemoryBytes, CPUQuota: rowQuota, CPUShares: rowShares}
	}
	if res == nil {
		return o
	}
	out := &specs.LinuxResources{}
	if mem := res.GetMemoryLimitInBytes(); mem > 0 {
		limit := mem + o.MemoryBytes
		out.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	cpu := &specs.LinuxCPU{}
	if quota := res.GetCpuQuota(); quota > 0 {
		q, p := quota+o.CPUQuota, uint64(period)
		cpu.Quota, cpu.Period = &q, &p
	}
	if shares := res.GetCpuShares(); shares > 0 {
		sh := uint64(shares) + o.CPUShares
		cpu.Shares = &sh
	}
	if cpu.Quota != nil || cpu.Shares != nil {
		out.CPU = cpu
	}
	if out.Memory != nil || out.CPU != nil {
		o.Limits = out
	}
	return o
}
