package cgcontrollers

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

// This host's /proc/cgroups: hugetlb, net_cls and perf_event not mounted.
const procCgroups = `#subsys_name	hierarchy	num_cgroups	enabled
cpuset	3	1	1
cpu	1	1	1
cpuacct	2	1	1
blkio	7	1	1
memory	4	5	1
devices	5	1	1
freezer	6	1	1
net_cls	0	1	1
perf_event	0	1	1
net_prio	0	1	1
hugetlb	0	1	1
pids	8	0	0
`

func full() *specs.LinuxResources {
	return &specs.LinuxResources{
		CPU:            &specs.LinuxCPU{Shares: u64(2), Quota: i64(1000), Period: u64(100000), Cpus: "0"},
		Memory:         &specs.LinuxMemory{Limit: i64(1 << 20)},
		Pids:           &specs.LinuxPids{Limit: i64(10)}, // a pointer since runtime-spec 1.3
		HugepageLimits: []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 0}, {Pagesize: "1GB", Limit: 0}},
		Network:        &specs.LinuxNetwork{ClassID: func() *uint32 { v := uint32(1); return &v }()},
		Devices:        []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
		Unified:        map[string]string{"memory.high": "1000", "hugetlb.2MB.max": "0", "cgroup.freeze": "0"},
	}
}

func TestTrimV1(t *testing.T) {
	dir := t.TempDir()
	procs := filepath.Join(dir, "cgroups")
	if err := os.WriteFile(procs, []byte(procCgroups), 0o644); err != nil {
		t.Fatal(err)
	}
	n := &Node{root: dir, procs: procs}
	res := full()
	dropped := n.Trim(res, "/kubepods/pod1/c1")
	if want := []string{"pids", "hugetlb", "net_cls"}; !reflect.DeepEqual(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
	if res.HugepageLimits != nil || res.Pids != nil || res.Network != nil {
		t.Errorf("limits of missing controllers kept: %+v", res)
	}
	if res.CPU == nil || res.CPU.Shares == nil || res.CPU.Cpus != "0" || res.Memory == nil || len(res.Devices) != 1 {
		t.Errorf("limits of present controllers lost: %+v", res)
	}
	if len(res.Unified) != 3 {
		t.Errorf("unified keys are for the runtime to judge on v1: %v", res.Unified)
	}
}

func TestTrimV2NearestAncestor(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	write("kubepods/cgroup.controllers", "cpu memory pids\n")
	n := New(root)
	if !n.v2 {
		t.Fatal("v2 not detected")
	}
	res := full()
	// The pod cgroup does not exist yet: the nearest existing ancestor is /kubepods.
	dropped := n.Trim(res, "/kubepods/pod1/c1")
	if want := []string{"cpuset", "hugetlb", "net_cls"}; !reflect.DeepEqual(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
	if res.CPU.Cpus != "" || res.CPU.Shares == nil || res.Pids == nil || res.Memory == nil {
		t.Errorf("cpu/pids/memory: %+v", res)
	}
	if want := map[string]string{"memory.high": "1000", "cgroup.freeze": "0"}; !reflect.DeepEqual(res.Unified, want) {
		t.Errorf("unified = %v, want %v", res.Unified, want)
	}
	// Under the root itself hugetlb is there.
	res = full()
	if dropped := n.Trim(res, "/rtshimd/abc"); !reflect.DeepEqual(dropped, []string{"net_cls"}) {
		t.Errorf("dropped at root = %v", dropped)
	}
	if len(res.HugepageLimits) != 2 {
		t.Errorf("hugepages lost where hugetlb exists: %+v", res.HugepageLimits)
	}
}

func TestTrimNil(t *testing.T) {
	if d := Default().Trim(nil, "/x"); d != nil {
		t.Errorf("nil resources: %v", d)
	}
}
