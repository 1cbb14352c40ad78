package cgstats

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// psiFixture is a {cpu,memory,io}.pressure file as the kernel writes it.
// psi is what psiFixture's lines read as.
func psi(some, full uint64) PSI {
	return PSI{SomeMicros: some, FullMicros: full, SomeAvg60: 0.12, SomeAvg300: 0.05}
}

func psiFixture(some, full string) string {
	return "some avg10=0.00 avg60=0.12 avg300=0.05 total=" + some + "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=" + full + "\n"
}

// A v1 host as this one: cpu and cpuacct, memory, pids and blkio hierarchies, hugetlb not
// mounted in v1, and the unified hierarchy of a hybrid mount with PSI files.
func TestReadV1(t *testing.T) {
	root := t.TempDir()
	p := "/kubepods/pod1/ctr"
	write(t, filepath.Join(root, "cpuacct", p, "cpuacct.usage"), "1500000000\n")
	write(t, filepath.Join(root, "cpuacct", p, "cpuacct.usage_user"), "1000000000\n")
	write(t, filepath.Join(root, "cpuacct", p, "cpuacct.usage_sys"), "500000000\n")
	write(t, filepath.Join(root, "cpu", p, "cpu.stat"), "nr_periods 40\nnr_throttled 12\nthrottled_time 2500000000\nnr_bursts 0\nburst_time 0\n")
	mem := filepath.Join(root, "memory", p)
	write(t, filepath.Join(mem, "memory.usage_in_bytes"), "104857600\n")
	write(t, filepath.Join(mem, "memory.limit_in_bytes"), "9223372036854771712\n")
	write(t, filepath.Join(mem, "memory.max_usage_in_bytes"), "110000000\n")
	write(t, filepath.Join(mem, "memory.failcnt"), "4\n")
	write(t, filepath.Join(mem, "memory.kmem.usage_in_bytes"), "2097152\n")
	write(t, filepath.Join(mem, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	write(t, filepath.Join(mem, "memory.stat"), "cache 10\nrss 5\nmapped_file 1\n"+
		"total_cache 41943040\ntotal_rss 52428800\ntotal_mapped_file 8192\ntotal_swap 4096\ntotal_inactive_file 20971520\ntotal_pgfault 300\ntotal_pgmajfault 2\n")
	pids := filepath.Join(root, "pids", p)
	write(t, filepath.Join(pids, "pids.current"), "3\n")
	write(t, filepath.Join(pids, "pids.max"), "1024\n")
	write(t, filepath.Join(pids, "cgroup.procs"), "101\n102\n")
	blkio := filepath.Join(root, "blkio", p)
	// The CFQ files exist but are empty (another scheduler): the throttle layer counts.
	write(t, filepath.Join(blkio, "blkio.io_service_bytes_recursive"), "Total 0\n")
	write(t, filepath.Join(blkio, "blkio.throttle.io_service_bytes_recursive"),
		"8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 12288\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 12288\n253:1 Read 512\n253:1 Write 0\nTotal 12800\n")
	write(t, filepath.Join(blkio, "blkio.throttle.io_serviced_recursive"),
		"8:0 Read 1\n8:0 Write 2\n8:0 Sync 3\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 3\n253:1 Read 1\n253:1 Write 0\nTotal 4\n")
	unified := filepath.Join(root, "unified", p)
	write(t, filepath.Join(unified, "cpu.pressure"), psiFixture("1500000", "900000"))
	write(t, filepath.Join(unified, "memory.pressure"), psiFixture("20", "10"))
	write(t, filepath.Join(unified, "io.pressure"), psiFixture("300", "200"))

	s, err := New(root).Read(p)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{
		CPUUsageNanos: 1500000000, MemoryUsage: 104857600, WorkingSet: 104857600 - 20971520, RSS: 52428800, PageFaults: 300, MajorPageFaults: 2, Processes: 3,
		CPUUserNanos: 1000000000, CPUSystemNanos: 500000000, CPUPeriods: 40, CPUThrottledPeriods: 12, CPUThrottledNanos: 2500000000,
		MemoryCache: 41943040, MemoryMappedFile: 8192, MemorySwap: 4096, MemoryKernel: 2097152, MemoryMaxUsage: 110000000, MemoryFailcnt: 4, OOMKills: 1,
		PidsLimit: 1024, Pids: []int{101, 102},
		Blkio: []BlkioDevice{
			{Major: 8, Minor: 0,
				Bytes: map[string]uint64{"Read": 4096, "Write": 8192, "Sync": 12288, "Async": 0, "Discard": 0, "Total": 12288},
				Ops:   map[string]uint64{"Read": 1, "Write": 2, "Sync": 3, "Async": 0, "Discard": 0, "Total": 3}},
			{Major: 253, Minor: 1, Bytes: map[string]uint64{"Read": 512, "Write": 0}, Ops: map[string]uint64{"Read": 1, "Write": 0}},
		},
		Pressure: &Pressure{CPU: psi(1500000, 900000), Memory: psi(20, 10), IO: psi(300, 200)},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("v1 =\n%+v\nwant\n%+v", s, want)
	}
	checkUsage(t, New(root), p, want, false)
	if _, err := New(root).Read("/gone"); err == nil {
		t.Error("a missing cgroup read without error")
	}
	if pids, err := New(root).Procs(p); err != nil || !reflect.DeepEqual(pids, []int{101, 102}) {
		t.Errorf("Procs = %v, %v", pids, err)
	}
	if pr := New(root).Pressure(p); pr == nil || pr.CPU.SomeMicros != 1500000 {
		t.Errorf("Pressure = %+v", pr)
	}
}

// An older v1 host: no cpuacct.usage_user (ticks in cpuacct.stat), swap from memsw, no
// unified hierarchy (no PSI), hugetlb mounted, a BFQ device.
func TestReadV1Fallbacks(t *testing.T) {
	root := t.TempDir()
	p := "/ctr"
	write(t, filepath.Join(root, "cpuacct", p, "cpuacct.usage"), "100\n")
	write(t, filepath.Join(root, "cpuacct", p, "cpuacct.stat"), "user 250\nsystem 30\n")
	mem := filepath.Join(root, "memory", p)
	write(t, filepath.Join(mem, "memory.usage_in_bytes"), "1000\n")
	write(t, filepath.Join(mem, "memory.memsw.usage_in_bytes"), "1500\n")
	write(t, filepath.Join(mem, "memory.stat"), "total_rss 10\n")
	write(t, filepath.Join(mem, "cgroup.procs"), "7\n")
	write(t, filepath.Join(root, "blkio", p, "blkio.bfq.io_service_bytes_recursive"), "8:16 Read 10\n8:16 Write 20\nTotal 30\n")
	hug := filepath.Join(root, "hugetlb", p)
	write(t, filepath.Join(hug, "hugetlb.2MB.usage_in_bytes"), "4194304\n")
	write(t, filepath.Join(hug, "hugetlb.2MB.max_usage_in_bytes"), "6291456\n")
	write(t, filepath.Join(hug, "hugetlb.1GB.usage_in_bytes"), "0\n")
	write(t, filepath.Join(hug, "hugetlb.1GB.max_usage_in_bytes"), "0\n")

	s, err := New(root).Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUUserNanos != 2500000000 || s.CPUSystemNanos != 300000000 {
		t.Errorf("cpu user/system from ticks = %d/%d", s.CPUUserNanos, s.CPUSystemNanos)
	}
	if s.MemorySwap != 500 || s.PidsLimit != 0 || !reflect.DeepEqual(s.Pids, []int{7}) || s.Pressure != nil {
		t.Errorf("swap %d pids.max %d pids %v pressure %v", s.MemorySwap, s.PidsLimit, s.Pids, s.Pressure)
	}
	if len(s.Blkio) != 1 || s.Blkio[0].Minor != 16 || s.Blkio[0].Bytes["Write"] != 20 || len(s.Blkio[0].Ops) != 0 {
		t.Errorf("blkio (bfq) = %+v", s.Blkio)
	}
	if want := []Hugetlb{{"1GB", 0, 0, true}, {"2MB", 4194304, 6291456, true}}; !reflect.DeepEqual(s.Hugetlb, want) {
		t.Errorf("hugetlb = %+v, want %+v", s.Hugetlb, want)
	}
}

func TestReadV2(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "cgroup.controllers"), "cpu memory pids io hugetlb\n")
	d := filepath.Join(root, "kubepods.slice", "ctr")
	write(t, filepath.Join(d, "cpu.stat"), "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 50\nnr_throttled 5\nthrottled_usec 750000\nnr_bursts 0\nburst_usec 0\n")
	write(t, filepath.Join(d, "memory.current"), "67108864\n")
	write(t, filepath.Join(d, "memory.max"), "134217728\n")
	write(t, filepath.Join(d, "memory.peak"), "70000000\n")
	write(t, filepath.Join(d, "memory.swap.current"), "8192\n")
	write(t, filepath.Join(d, "memory.swap.max"), "1048576\n")
	write(t, filepath.Join(d, "memory.events"), "low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\noom_group_kill 0\n")
	write(t, filepath.Join(d, "memory.stat"), "anon 33554432\nfile 1000\nkernel 3000\nkernel_stack 100\nslab 200\nfile_mapped 400\ninactive_file 4194304\npgfault 700\npgmajfault 7\n")
	write(t, filepath.Join(d, "pids.current"), "5\n")
	write(t, filepath.Join(d, "pids.max"), "max\n")
	write(t, filepath.Join(d, "cgroup.procs"), "1\n2\n3\n")
	write(t, filepath.Join(d, "io.stat"), "259:0 rbytes=1048576 wbytes=2097152 rios=16 wios=32 dbytes=0 dios=0\n8:0 rbytes=0 wbytes=4096 rios=0 wios=1 dbytes=0 dios=0\n")
	write(t, filepath.Join(d, "hugetlb.2MB.current"), "2097152\n")
	write(t, filepath.Join(d, "hugetlb.2MB.max"), "max\n")
	write(t, filepath.Join(d, "hugetlb.2MB.rsvd.current"), "0\n")
	write(t, filepath.Join(d, "cpu.pressure"), psiFixture("100", "50"))
	write(t, filepath.Join(d, "memory.pressure"), psiFixture("7", "3"))
	write(t, filepath.Join(d, "io.pressure"), psiFixture("11", "9"))
	s, err := New(root).Read("/kubepods.slice/ctr")
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{
		CPUUsageNanos: 2500000000, MemoryUsage: 67108864, MemoryLimit: 134217728, WorkingSet: 67108864 - 4194304, RSS: 33554432, PageFaults: 700, MajorPageFaults: 7, Processes: 5,
		CPUUserNanos: 2000000000, CPUSystemNanos: 500000000, CPUPeriods: 50, CPUThrottledPeriods: 5, CPUThrottledNanos: 750000000,
		MemoryCache: 1000, MemoryMappedFile: 400, MemorySwap: 8192, SwapKnown: true, SwapLimit: 1048576, MemoryKernel: 3000, MemoryMaxUsage: 70000000, MemoryFailcnt: 9, OOMKills: 1,
		Pids: []int{1, 2, 3},
		Blkio: []BlkioDevice{
			{Major: 8, Minor: 0, Bytes: map[string]uint64{"Read": 0, "Write": 4096, "Discard": 0}, Ops: map[string]uint64{"Read": 0, "Write": 1, "Discard": 0}},
			{Major: 259, Minor: 0, Bytes: map[string]uint64{"Read": 1048576, "Write": 2097152, "Discard": 0}, Ops: map[string]uint64{"Read": 16, "Write": 32, "Discard": 0}},
		},
		Hugetlb:  []Hugetlb{{Pagesize: "2MB", Usage: 2097152}},
		Pressure: &Pressure{CPU: psi(100, 50), Memory: psi(7, 3), IO: psi(11, 9)},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("v2 =\n%+v\nwant\n%+v", s, want)
	}
	checkUsage(t, New(root), "/kubepods.slice/ctr", want, true)
	if pids, err := New(root).Procs("/kubepods.slice/ctr"); err != nil || len(pids) != 3 {
		t.Errorf("Procs = %v, %v", pids, err)
	}
}

// Kernels before 5.18 have no "kernel" line in memory.stat: its parts add up.
func TestReadV2KernelParts(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "cgroup.controllers"), "cpu memory\n")
	d := filepath.Join(root, "ctr")
	write(t, filepath.Join(d, "cpu.stat"), "usage_usec 1\n")
	write(t, filepath.Join(d, "memory.stat"), "kernel_stack 100\nslab 200\nsock 30\npercpu 4\n")
	s, err := New(root).Read("/ctr")
	if err != nil {
		t.Fatal(err)
	}
	if s.MemoryKernel != 334 || s.Pressure != nil || s.Blkio != nil || s.Hugetlb != nil {
		t.Errorf("kernel %d pressure %v blkio %v hugetlb %v", s.MemoryKernel, s.Pressure, s.Blkio, s.Hugetlb)
	}
}

// checkUsage reads path in the Usage scope: the fields it covers as the full read has
// them, the others zero; a missing cgroup is an error there too.
func checkUsage(t *testing.T, r *Reader, path string, full Stats, v2 bool) {
	t.Helper()
	got, err := r.ReadScope(path, Usage)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{
		CPUUsageNanos: full.CPUUsageNanos, MemoryUsage: full.MemoryUsage, MemoryLimit: full.MemoryLimit, WorkingSet: full.WorkingSet,
		RSS: full.RSS, PageFaults: full.PageFaults, MajorPageFaults: full.MajorPageFaults, Processes: full.Processes,
	}
	// And what the CRI's stats carry beyond: PSI (v2's, or a hybrid host's unified
	// hierarchy's), and v2's swap.
	want.Pressure = full.Pressure
	if v2 {
		want.MemorySwap, want.SwapKnown, want.SwapLimit = full.MemorySwap, full.SwapKnown, full.SwapLimit
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("usage =\n%+v\nwant\n%+v", got, want)
	}
	if _, err := r.ReadScope("/gone", Usage); err == nil {
		t.Error("a missing cgroup read without error")
	}
}

// Files larger than readFile's buffer are read whole.
func TestReadFileLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	var b strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&b, "key%d %d\n", i, i)
	}
	write(t, path, b.String())
	kv := readKV(path)
	if len(kv) != 3000 || kv["key2999"] != 2999 {
		t.Errorf("read %d keys, key2999 = %d", len(kv), kv["key2999"])
	}
	if _, err := readUint(filepath.Join(t.TempDir(), "none")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v, want not-exist", err)
	}
}

func TestNetDev(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	write(t, path, `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
  eth0:    2048      10    1    3    0     0          0         0     4096      20    2    4    0     0       0          0
`)
	ifs, err := NetDev(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Interface{Name: "eth0", RxBytes: 2048, RxPackets: 10, RxErrors: 1, RxDropped: 3, TxBytes: 4096, TxPackets: 20, TxErrors: 2, TxDropped: 4}
	if len(ifs) != 1 || ifs[0] != want {
		t.Errorf("NetDev = %+v", ifs)
	}
}
