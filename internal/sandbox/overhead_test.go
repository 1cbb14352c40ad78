package sandbox

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

func TestPodOverhead(t *testing.T) {
	row := config.Overhead{MemoryBytes: 64 << 20, MilliCPU: 100}
	limited := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, CpuQuota: 50000, CpuPeriod: 100000, CpuShares: 512}
	pod := func(res, over *runtimeapi.LinuxContainerResources) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{Resources: res, Overhead: over}}
	}

	// The row's overhead, on every limit the pod has.
	o := podOverhead(pod(limited, nil), "h", row)
	if o.Source != "handler" || *o.Limits.Memory.Limit != (128+64)<<20 || *o.Limits.CPU.Quota != 60000 ||
		*o.Limits.CPU.Period != 100000 || *o.Limits.CPU.Shares != 512+102 {
		t.Errorf("row overhead: %+v limits %+v cpu %+v", o, o.Limits.Memory, o.Limits.CPU)
	}

	// kubelet's (from the RuntimeClass) wins over the row's.
	kube := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20, CpuQuota: 20000, CpuPeriod: 100000, CpuShares: 204}
	o = podOverhead(pod(limited, kube), "h", row)
	if o.Source != "kubelet" || *o.Limits.Memory.Limit != (128+32)<<20 || *o.Limits.CPU.Quota != 70000 || *o.Limits.CPU.Shares != 512+204 {
		t.Errorf("kubelet overhead: %+v", o)
	}

	// kubelet sends an empty linux.overhead for a pod whose RuntimeClass declares none:
	// the row's applies, as with none sent.
	o = podOverhead(pod(limited, &runtimeapi.LinuxContainerResources{}), "h", row)
	if o.Source != "handler" || *o.Limits.Memory.Limit != (128+64)<<20 || *o.Limits.CPU.Quota != 60000 {
		t.Errorf("empty kubelet overhead: %+v", o)
	}

	// A pod with requests but no limits: only its shares grow.
	o = podOverhead(pod(&runtimeapi.LinuxContainerResources{CpuShares: 256}, nil), "h", row)
	if o.Limits == nil || o.Limits.Memory != nil || o.Limits.CPU.Quota != nil || *o.Limits.CPU.Shares != 256+102 {
		t.Errorf("requests only: %+v", o.Limits)
	}

	// A pod with nothing: no limits, the overhead still said.
	o = podOverhead(pod(nil, nil), "h", row)
	if o.Limits != nil || o.Source != "handler" || o.MemoryBytes != 64<<20 {
		t.Errorf("no resources: %+v", o)
	}

	// No overhead anywhere: the pod's own limits.
	o = podOverhead(pod(limited, nil), "h", config.Overhead{})
	if o.Source != "" || *o.Limits.Memory.Limit != 128<<20 || *o.Limits.CPU.Quota != 50000 {
		t.Errorf("no overhead: %+v", o)
	}
}
