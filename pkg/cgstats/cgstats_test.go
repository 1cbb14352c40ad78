package cgstats

import (
	"os"
	"path/filepath"
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

func TestReadV1(t *testing.T) {
	root := t.TempDir()
	p := "/kubepods/pod1/ctr"
	write(t, filepath.Join(root, "cpuacct", p, "cpuacct.usage"), "1500000000\n")
	write(t, filepath.Join(root, "memory", p, "memory.usage_in_bytes"), "104857600\n")
	write(t, filepath.Join(root, "memory", p, "memory.limit_in_bytes"), "9223372036854771712\n")
	write(t, filepath.Join(root, "memory", p, "memory.stat"), "cache 10\nrss 5\ntotal_rss 52428800\ntotal_inactive_file 20971520\ntotal_pgfault 300\ntotal_pgmajfault 2\n")
	write(t, filepath.Join(root, "pids", p, "pids.current"), "3\n")
	s, err := New(root).Read(p)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{CPUUsageNanos: 1500000000, MemoryUsage: 104857600, WorkingSet: 104857600 - 20971520, RSS: 52428800, PageFaults: 300, MajorPageFaults: 2, Processes: 3}
	if s != want {
		t.Errorf("v1 = %+v, want %+v", s, want)
	}
	if _, err := New(root).Read("/gone"); err == nil {
		t.Error("a missing cgroup read without error")
	}
}

func TestReadV2(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "cgroup.controllers"), "cpu memory pids\n")
	d := filepath.Join(root, "kubepods.slice", "ctr")
	write(t, filepath.Join(d, "cpu.stat"), "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
	write(t, filepath.Join(d, "memory.current"), "67108864\n")
	write(t, filepath.Join(d, "memory.max"), "134217728\n")
	write(t, filepath.Join(d, "memory.stat"), "anon 33554432\nfile 1000\ninactive_file 4194304\npgfault 700\npgmajfault 7\n")
	write(t, filepath.Join(d, "pids.current"), "5\n")
	s, err := New(root).Read("/kubepods.slice/ctr")
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{CPUUsageNanos: 2500000000, MemoryUsage: 67108864, MemoryLimit: 134217728, WorkingSet: 67108864 - 4194304, RSS: 33554432, PageFaults: 700, MajorPageFaults: 7, Processes: 5}
	if s != want {
		t.Errorf("v2 = %+v, want %+v", s, want)
	}
}

func TestNetDev(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	write(t, path, `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
  eth0:    2048      10    1    0    0     0          0         0     4096      20    2    0    0     0       0          0
`)
	ifs, err := NetDev(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 1 || ifs[0] != (Interface{Name: "eth0", RxBytes: 2048, RxErrors: 1, TxBytes: 4096, TxErrors: 2}) {
		t.Errorf("NetDev = %+v", ifs)
	}
}
