//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

func readCgroupInt(t *testing.T, controller, cgroup, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, cgroup, file))
	if err != nil {
		t.Errorf("read %s: %v", file, err)
		return -1
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// Every handler's overhead is added to the pod's cgroup (its cgroup_parent): the pod
// cgroup's limits are the pod's limits plus the overhead, on every kind of runtime;
// kubelet's linux.overhead (from the RuntimeClass) wins over the row's, and the
// difference is logged; PodSandboxStatus verbose shows what was applied; the pod cgroup
// rtshimd made goes with the pod.
func TestPodOverheadOnEveryHandler(t *testing.T) {
	overheads := map[string]struct{ mem, milli int64 }{"runc": {32 << 20, 250}, "runsc": {64 << 20, 100}, "runc-shim": {16 << 20, 50}}
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Handlers["runc"].Overhead = config.Overhead{Memory: "32Mi", CPU: "250m"}
		c.Handlers["runc-shim"].Overhead = config.Overhead{Memory: "16Mi", CPU: "50m"}
	}))
	d := e.d
	ctx := ctxT(t)
	const mem, quota, period, shares = 128 << 20, 50000, 100000, 512
	resources := func() *runtimeapi.LinuxContainerResources {
		return &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: mem, CpuQuota: quota, CpuPeriod: period, CpuShares: shares}
	}
	check := func(name, handler string, over *runtimeapi.LinuxContainerResources, wantMem, wantMilli int64, wantSource string) {
		t.Helper()
		cfg := podConfig(name, runtimeapi.NamespaceMode_CONTAINER)
		cfg.LogDirectory = filepath.Join(e.logs, name)
		cfg.Linux.Resources = resources()
		cfg.Linux.Overhead = over
		cgroup := cfg.Linux.CgroupParent
		id, err := d.RS.RunPodSandbox(ctx, cfg, handler)
		if err != nil {
			t.Fatalf("%s: RunPodSandbox: %v", name, err)
		}
		ctr := e.run(id, cfg, e.ctrConfig("c", "sleep", "1000"))
		if got := readCgroupInt(t, "memory", cgroup, "memory.limit_in_bytes"); got != mem+wantMem {
			t.Errorf("%s: pod cgroup memory limit %d, want pod limit %d + overhead %d", name, got, mem, wantMem)
		}
		if got := readCgroupInt(t, "cpu", cgroup, "cpu.cfs_quota_us"); got != quota+wantMilli*period/1000 {
			t.Errorf("%s: pod cgroup cpu quota %d, want %d + %d", name, got, quota, wantMilli*period/1000)
		}
		if got := readCgroupInt(t, "cpu", cgroup, "cpu.shares"); got != shares+wantMilli*1024/1000 {
			t.Errorf("%s: pod cgroup cpu shares %d, want %d + %d", name, got, shares, wantMilli*1024/1000)
		}
		if out, _ := e.exec(ctr, "echo", "ok"); out != "ok" {
			t.Errorf("%s: exec in the limited pod: %q", name, out)
		}
		st, err := d.RS.PodSandboxStatus(ctx, id, true)
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Metadata struct {
				OverheadApplied struct {
					Source           string `json:"source"`
					MemoryBytes      int64  `json:"memory_bytes"`
					PodCgroup        string `json:"pod_cgroup"`
					PodCgroupCreated bool   `json:"pod_cgroup_created"`
				} `json:"overhead_applied"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
			t.Fatal(err)
		}
		oa := info.Metadata.OverheadApplied
		if oa.Source != wantSource || oa.MemoryBytes != wantMem || oa.PodCgroup != cgroup || !oa.PodCgroupCreated {
			t.Errorf("%s: verbose overhead_applied = %+v, want source %s, %d bytes, cgroup %s made by rtshimd", name, oa, wantSource, wantMem, cgroup)
		}
		if err := d.RS.StopPodSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := d.RS.RemovePodSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", cgroup)); err == nil {
			t.Errorf("%s: the pod cgroup rtshimd made outlived the pod", name)
		}
	}
	for _, h := range suiteHandlers {
		o := overheads[h]
		check("overhead-"+h, h, nil, o.mem, o.milli, "handler")
	}
	// kubelet passes the RuntimeClass's overhead: that one counts, and the mismatch is logged.
	kube := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 8 << 20, CpuQuota: 2000, CpuPeriod: period, CpuShares: 20}
	check("overhead-kubelet", "runc", kube, 8<<20, 20, "kubelet")
	if !strings.Contains(d.Log(), "the RuntimeClass overhead differs from the handler's") {
		t.Error("the mismatch of the RuntimeClass's and the handler's overhead was not logged")
	}

	// A pod cgroup kubelet made: a Burstable pod whose sidecar has no limit sends the sum
	// of the limits there are, but its cgroup has no memory limit, and keeps none; a lower
	// CPU share is raised by the overhead. It stays when the pod goes: it is kubelet's.
	for _, h := range []string{"runc", "runsc"} {
		cfg := podConfig("overhead-kubelet-cgroup-"+h, runtimeapi.NamespaceMode_CONTAINER)
		cfg.Linux.Resources = resources()
		cgroup := cfg.Linux.CgroupParent
		for _, c := range []string{"memory", "cpu"} {
			if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", c, cgroup), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join("/sys/fs/cgroup/cpu", cgroup, "cpu.shares"), []byte("512"), 0o644); err != nil {
			t.Fatal(err)
		}
		id, err := d.RS.RunPodSandbox(ctx, cfg, h)
		if err != nil {
			t.Fatal(err)
		}
		if got := readCgroupInt(t, "memory", cgroup, "memory.limit_in_bytes"); got < 1<<50 {
			t.Errorf("%s: kubelet's unlimited pod cgroup was given a memory limit: %d", h, got)
		}
		if got := readCgroupInt(t, "cpu", cgroup, "cpu.cfs_quota_us"); got != -1 {
			t.Errorf("%s: kubelet's unlimited pod cgroup was given a CPU quota: %d", h, got)
		}
		if want := shares + overheads[h].milli*1024/1000; readCgroupInt(t, "cpu", cgroup, "cpu.shares") != want {
			t.Errorf("%s: kubelet's pod cgroup cpu shares %d, want raised to %d", h, readCgroupInt(t, "cpu", cgroup, "cpu.shares"), want)
		}
		if h == "runsc" {
			// Nor does the sandbox container get the limit the pod cgroup does not have.
			st, err := d.RS.PodSandboxStatus(ctx, id, true)
			if err != nil {
				t.Fatal(err)
			}
			sbCg := decodeInfo(t, st.Info).Metadata.CgroupsPath
			if got := readCgroupInt(t, "memory", sbCg, "memory.limit_in_bytes"); got < 1<<50 {
				t.Errorf("runsc sandbox container under kubelet's unlimited pod cgroup has a memory limit: %d", got)
			}
		}
		if err := d.RS.RemovePodSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", cgroup)); err != nil {
			t.Errorf("%s: the pod cgroup kubelet made was removed with the pod: %v", h, err)
		}
	}
}
