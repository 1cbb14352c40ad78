package cgpath_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// With the systemd driver a container's cgroup is a scope under its pod's expanded slice;
// no systemd runs here, so fixture trees laid out as runc's systemd driver lays them out
// (cgroup v1 and v2) stand in, read through the same path the stats and OOM code use.
func TestSystemdLayoutIsRead(t *testing.T) {
	spec := "kubepods-burstable-pod1.slice:rtshimd:abc"
	dir, err := cgpath.Dir(spec)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := cgpath.Parent(true, "kubepods-burstable-pod1.slice")
	if err != nil {
		t.Fatal(err)
	}

	v1 := t.TempDir()
	for _, d := range []string{dir, pod} {
		write(t, filepath.Join(v1, "cpuacct", d, "cpuacct.usage"), "2000000000\n")
		write(t, filepath.Join(v1, "memory", d, "memory.usage_in_bytes"), "1048576\n")
		write(t, filepath.Join(v1, "memory", d, "memory.stat"), "total_rss 4096\ntotal_inactive_file 0\n")
		write(t, filepath.Join(v1, "memory", d, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	}
	v2 := t.TempDir()
	write(t, filepath.Join(v2, "cgroup.controllers"), "cpu memory pids\n")
	for _, d := range []string{dir, pod} {
		write(t, filepath.Join(v2, d, "cpu.stat"), "usage_usec 2000000\nuser_usec 1000000\nsystem_usec 1000000\n")
		write(t, filepath.Join(v2, d, "memory.current"), "1048576\n")
		write(t, filepath.Join(v2, d, "memory.stat"), "anon 4096\ninactive_file 0\n")
		write(t, filepath.Join(v2, d, "memory.events"), "max 0\noom 1\noom_kill 1\n")
	}
	for name, root := range map[string]string{"v1": v1, "v2": v2} {
		for _, d := range []string{dir, pod} {
			s, err := cgstats.New(root).Read(d)
			if err != nil {
				t.Errorf("%s %s: %v", name, d, err)
				continue
			}
			if s.CPUUsageNanos != 2000000000 || s.MemoryUsage != 1048576 || s.OOMKills != 1 {
				t.Errorf("%s %s: cpu %d memory %d oom kills %d", name, d, s.CPUUsageNanos, s.MemoryUsage, s.OOMKills)
			}
		}
	}
}
