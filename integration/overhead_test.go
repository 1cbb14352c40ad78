//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

func readCgroupInt(t *testing.T, controller, cgroup, file string) int64 {
	t.Helper()
	path := filepath.Join("/sys/fs/cgroup", controller, cgroup, file)
	if unifiedCgroups {
		// The v2 file that holds the same limit, in v1's units: memory.max ("max" is v1's
		// unlimited), cpu.max's quota ("max" is -1), cpu.weight (not in shares: cpuSharesAre).
		v2 := map[string]string{"memory.limit_in_bytes": "memory.max", "cpu.cfs_quota_us": "cpu.max", "cpu.shares": "cpu.weight"}[file]
		if v2 == "" {
			t.Fatalf("no cgroup v2 reading for %s", file)
		}
		path = filepath.Join("/sys/fs/cgroup", cgroup, v2)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read %s: %v", file, err)
		return -1
	}
	f := strings.Fields(string(b)) // cpu.max: "QUOTA PERIOD", the quota first
	if len(f) == 0 {
		t.Errorf("read %s: %q", path, b)
		return -1
	}
	switch {
	case f[0] != "max":
	case file == "memory.limit_in_bytes":
		return math.MaxInt64 &^ 4095
	default:
		return -1
	}
	v, _ := strconv.ParseInt(f[0], 10, 64)
	return v
}

// unifiedCgroups: the host has cgroup v2 only (a lent machine: hack/v2-host).
var unifiedCgroups = func() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}()

// cpuSharesAre reports the cgroup's CPU weight and whether it is want shares: cpu.shares on
// v1; on v2 cpu.weight, which runtimes convert shares into by one of two formulas
// (opencontainers/cgroups' quadratic one, which kubelet and containerd's cgroup2 use; runc
// 1.1's and gVisor's linear one), either accepted.
func cpuSharesAre(t *testing.T, cgroup string, want int64) (string, bool) {
	t.Helper()
	got := readCgroupInt(t, "cpu", cgroup, "cpu.shares")
	if !unifiedCgroups {
		return strconv.FormatInt(got, 10), got == want
	}
	quad := int64(cgroup2.ConvertCPUSharesToCgroupV2Value(uint64(want)))
	lin := 1 + (want-2)*9999/262142
	return fmt.Sprintf("cpu.weight %d", got), got == quad || got == lin
}

// writeCPUShares sets a cgroup's CPU weight as kubelet would from shares.
func writeCPUShares(t *testing.T, cgroup string, shares int64) {
	t.Helper()
	path, v := filepath.Join("/sys/fs/cgroup/cpu", cgroup, "cpu.shares"), strconv.FormatInt(shares, 10)
	if unifiedCgroups {
		path, v = filepath.Join("/sys/fs/cgroup", cgroup, "cpu.weight"), strconv.FormatUint(cgroup2.ConvertCPUSharesToCgroupV2Value(uint64(shares)), 10)
	}
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

// makeCgroup makes the cgroup in the memory and cpu hierarchies (v1) or the unified one,
// with those controllers enabled for it (v2), as kubelet makes a pod's.
func makeCgroup(t *testing.T, cgroup string) {
	t.Helper()
	if !unifiedCgroups {
		for _, c := range []string{"memory", "cpu"} {
			if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", c, cgroup), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	dir := "/sys/fs/cgroup"
	for _, part := range strings.Split(strings.Trim(cgroup, "/"), "/") {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+cpu +memory"), 0o644); err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
}

// cgroupExists reports whether the cgroup is there (v1: in the memory hierarchy).
func cgroupExists(cgroup string) error {
	dir := filepath.Join("/sys/fs/cgroup/memory", cgroup)
	if unifiedCgroups {
		dir = filepath.Join("/sys/fs/cgroup", cgroup)
	}
	_, err := os.Stat(dir)
	return err
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
		if got, ok := cpuSharesAre(t, cgroup, shares+wantMilli*1024/1000); !ok {
			t.Errorf("%s: pod cgroup cpu shares %s, want %d + %d", name, got, shares, wantMilli*1024/1000)
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
		if cgroupExists(cgroup) == nil {
			t.Errorf("%s: the pod cgroup rtshimd made outlived the pod", name)
		}
	}
	for _, h := range suiteHandlers {
		o := overheads[h]
		check("overhead-"+h, h, nil, o.mem, o.milli, "handler")
	}
	// kubelet sends an empty linux.overhead for a RuntimeClass without one (over gRPC an empty
	// message arrives set, not nil): the row's counts, as with none sent.
	check("overhead-empty", "runc", &runtimeapi.LinuxContainerResources{}, 32<<20, 250, "handler")
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
		makeCgroup(t, cgroup)
		writeCPUShares(t, cgroup, 512)
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
		want := shares + overheads[h].milli*1024/1000
		if got, ok := cpuSharesAre(t, cgroup, want); !ok {
			t.Errorf("%s: kubelet's pod cgroup cpu shares %s, want raised to %d", h, got, want)
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
		if err := cgroupExists(cgroup); err != nil {
			t.Errorf("%s: the pod cgroup kubelet made was removed with the pod: %v", h, err)
		}
	}
}
