// Package cgstats reads a cgroup's CPU, memory and process counters straight from the
// cgroup filesystem, v1 (one hierarchy per controller) or v2 (unified), without forking.
// It knows nothing of containers or pods.
package cgstats

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stats are one reading of a cgroup.
type Stats struct {
	CPUUsageNanos   uint64
	MemoryUsage     uint64
	MemoryLimit     uint64 // 0: no limit
	WorkingSet      uint64 // usage minus inactive file cache, as kubelet computes it
	RSS             uint64
	PageFaults      uint64
	MajorPageFaults uint64
	Processes       uint64
}

// Reader reads cgroups under a root (normally /sys/fs/cgroup).
type Reader struct {
	Root string
	v2   bool
}

// New detects the cgroup version under root.
func New(root string) *Reader {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return &Reader{Root: root, v2: err == nil}
}

// Read reads the cgroup at path (a cgroupfs-style path such as /kubepods/pod1/abc).
func (r *Reader) Read(path string) (Stats, error) {
	if r.v2 {
		return readV2(filepath.Join(r.Root, path))
	}
	return readV1(r.Root, path)
}

func readV1(root, path string) (Stats, error) {
	var s Stats
	var err error
	if s.CPUUsageNanos, err = readUint(filepath.Join(root, "cpuacct", path, "cpuacct.usage")); err != nil {
		// A cgroup that is gone (the container exited) is an error to the caller.
		return s, err
	}
	mem := filepath.Join(root, "memory", path)
	s.MemoryUsage, _ = readUint(filepath.Join(mem, "memory.usage_in_bytes"))
	if limit, err := readUint(filepath.Join(mem, "memory.limit_in_bytes")); err == nil && limit < 1<<62 {
		s.MemoryLimit = limit
	}
	stat := readKV(filepath.Join(mem, "memory.stat"))
	s.RSS = stat["total_rss"]
	s.PageFaults, s.MajorPageFaults = stat["total_pgfault"], stat["total_pgmajfault"]
	s.WorkingSet = sub(s.MemoryUsage, stat["total_inactive_file"])
	s.Processes, _ = readUint(filepath.Join(root, "pids", path, "pids.current"))
	return s, nil
}

func readV2(dir string) (Stats, error) {
	var s Stats
	cpu := readKV(filepath.Join(dir, "cpu.stat"))
	if cpu == nil {
		return s, &os.PathError{Op: "read", Path: filepath.Join(dir, "cpu.stat"), Err: os.ErrNotExist}
	}
	s.CPUUsageNanos = cpu["usage_usec"] * 1000
	s.MemoryUsage, _ = readUint(filepath.Join(dir, "memory.current"))
	if limit, err := readUint(filepath.Join(dir, "memory.max")); err == nil {
		s.MemoryLimit = limit // "max" does not parse: no limit
	}
	stat := readKV(filepath.Join(dir, "memory.stat"))
	s.RSS = stat["anon"]
	s.PageFaults, s.MajorPageFaults = stat["pgfault"], stat["pgmajfault"]
	s.WorkingSet = sub(s.MemoryUsage, stat["inactive_file"])
	s.Processes, _ = readUint(filepath.Join(dir, "pids.current"))
	return s, nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// readKV parses "key value" lines; nil if the file cannot be read.
func readKV(path string) map[string]uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// Interface is one network interface's counters.
type Interface struct {
	Name                                 string
	RxBytes, RxErrors, TxBytes, TxErrors uint64
}

// NetDev parses /proc/<pid>/net/dev (the counters of that process's network namespace),
// leaving out lo.
func NetDev(path string) ([]Interface, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Interface
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		f := strings.Fields(rest)
		if name == "lo" || len(f) < 11 {
			continue
		}
		n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
		out = append(out, Interface{Name: name, RxBytes: n(0), RxErrors: n(2), TxBytes: n(8), TxErrors: n(10)})
	}
	return out, nil
}
