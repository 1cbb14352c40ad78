package podcgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestRaiseOnly(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: i64(192 << 20)},
		CPU:    &specs.LinuxCPU{Quota: i64(60000), Period: u64(100000), Shares: u64(614)},
	}
	// kubelet's Burstable pod cgroup: no memory or CPU limit. Nothing is tightened; the
	// shares, lower there, are raised.
	out, eff := raiseOnly(limits{memory: -1, quota: -1, shares: 512}, res)
	if out == nil || out.Memory != nil || out.CPU.Quota != nil || *out.CPU.Shares != 614 {
		t.Errorf("unlimited cgroup: %+v", out)
	}
	if eff == nil || eff.Memory != nil || eff.CPU.Quota != nil || *eff.CPU.Shares != 614 {
		t.Errorf("unlimited cgroup, effective: %+v", eff)
	}
	// Limits below ours are raised; the same values are not written again.
	out, eff = raiseOnly(limits{memory: 128 << 20, quota: 60000, shares: 614}, res)
	if out == nil || *out.Memory.Limit != 192<<20 || out.CPU != nil {
		t.Errorf("lower memory limit: %+v", out)
	}
	if eff == nil || *eff.Memory.Limit != 192<<20 || *eff.CPU.Quota != 60000 || *eff.CPU.Shares != 614 {
		t.Errorf("lower memory limit, effective: %+v", eff)
	}
	// Everything already as high: nothing to do.
	if out, _ := raiseOnly(limits{memory: 256 << 20, quota: 80000, shares: 1024}, res); out != nil {
		t.Errorf("higher limits: %+v", out)
	}
}

// RemoveLeft removes a task's cgroup, and empty ones below it, from every hierarchy (the
// unified one of a hybrid host too); only one named for the task.
func TestRemoveLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	id := fmt.Sprintf("rtshimd-removeleft-%d", os.Getpid())
	name := "/" + id
	roots := hierarchies()
	for _, r := range roots {
		if err := os.MkdirAll(filepath.Join(r, name, "child"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, r := range roots {
			_ = os.Remove(filepath.Join(r, name, "child"))
			_ = os.Remove(filepath.Join(r, name))
		}
	}()
	if err := RemoveLeft(name, "another-task"); err != nil {
		t.Fatal(err)
	}
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, name)); err != nil {
			t.Errorf("a cgroup not named for the task was removed from %s", r)
		}
	}
	if err := RemoveLeft(name, id); err != nil {
		t.Fatal(err)
	}
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, name)); err == nil {
			t.Errorf("left in %s", r)
		}
	}
	if err := RemoveLeft(name, id); err != nil {
		t.Errorf("removing it again: %v", err)
	}
	if err := RemoveLeft("kubepods.slice:cri-containerd:abc", "abc"); err != nil {
		t.Errorf("systemd path: %v", err)
	}
}

func TestRemoveChildren(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	name := fmt.Sprintf("/rtshimd-removechildren-%d", os.Getpid())
	roots := hierarchies()
	for _, r := range roots {
		for _, c := range []string{"a/deeper", "b"} {
			if err := os.MkdirAll(filepath.Join(r, name, c), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer func() {
		for _, r := range roots {
			for _, c := range []string{"a/deeper", "a", "b", ""} {
				_ = os.Remove(filepath.Join(r, name, c))
			}
		}
	}()
	if err := RemoveChildren(name); err != nil {
		t.Fatal(err)
	}
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, name)); err != nil {
			t.Errorf("the cgroup itself was removed from %s", r)
		}
		if ents, _ := os.ReadDir(filepath.Join(r, name)); dirCount(ents) > 0 {
			t.Errorf("children left in %s: %d", r, dirCount(ents))
		}
	}
	// A child that holds a process stays, and says so.
	r := roots[0]
	busy := filepath.Join(r, name, "busy")
	if err := os.Mkdir(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.Remove(busy) }()
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveChildren(name); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Errorf("a child with a process: %v, want an error naming it", err)
	}
	// What keeps the pod's cgroup: the child; and in the child, the process.
	if h := Holders(name); !strings.Contains(h, "child cgroups busy") {
		t.Errorf("Holders(%s) = %q, want the child named", name, h)
	}
	if h := Holders(name + "/busy"); !strings.Contains(h, fmt.Sprintf("processes %d sleep S", cmd.Process.Pid)) {
		t.Errorf("Holders(busy) = %q, want pid %d sleep S", h, cmd.Process.Pid)
	}
	if h := Holders(name + "/gone"); h != "" {
		t.Errorf("Holders of a missing cgroup = %q", h)
	}
	if err := RemoveChildren("kubepods.slice:cri-containerd:abc"); err != nil {
		t.Errorf("systemd path: %v", err)
	}
}

func dirCount(ents []os.DirEntry) int {
	n := 0
	for _, e := range ents {
		if e.IsDir() {
			n++
		}
	}
	return n
}

// A pod cgroup's weight read back as shares converts to the same weight, so raising it to
// what the pod asks compares like with like; kubelet's 512 shares are not read as more.
func TestSharesOfWeight(t *testing.T) {
	for _, s := range []uint64{2, 3, 100, 256, 512, 614, 1024, 1126, 4096, 100000, 262144} {
		w := cgroup2.ConvertCPUSharesToCgroupV2Value(s)
		got := sharesOfWeight(w)
		if cgroup2.ConvertCPUSharesToCgroupV2Value(got) != w || got > s {
			t.Errorf("shares %d -> weight %d -> shares %d (weight %d)", s, w, got, cgroup2.ConvertCPUSharesToCgroupV2Value(got))
		}
	}
	if w := cgroup2.ConvertCPUSharesToCgroupV2Value(512); sharesOfWeight(w) >= 512+102 {
		t.Errorf("kubelet's 512 shares (weight %d) read as %d: an overhead of 102 would not be added", w, sharesOfWeight(w))
	}
}
