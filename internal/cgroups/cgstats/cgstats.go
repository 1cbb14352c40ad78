// Package cgstats reads a cgroup's CPU, memory, block I/O and process counters straight
// from the cgroup filesystem, v1 (one hierarchy per controller, with the unified one of a
// hybrid host for pressure) or v2 (unified), without forking. It knows nothing of
// containers or pods.
package cgstats

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Stats are one reading of a cgroup. Fields a source cannot give stay zero (nil for the
// slices and Pressure).
type Stats struct {
	CPUUsageNanos   uint64
	MemoryUsage     uint64
	MemoryLimit     uint64 // 0: no limit
	WorkingSet      uint64 // usage minus inactive file cache, as kubelet computes it
	RSS             uint64
	PageFaults      uint64
	MajorPageFaults uint64
	Processes       uint64

	// CPU time split by mode, and CFS bandwidth control.
	CPUUserNanos, CPUSystemNanos uint64
	CPUPeriods                   uint64
	CPUThrottledPeriods          uint64
	CPUThrottledNanos            uint64

	// Memory beyond usage, in bytes unless named.
	MemoryCache      uint64 // page cache
	MemoryMappedFile uint64
	MemorySwap       uint64
	// SwapKnown: MemorySwap was read from the cgroup's own swap account (v2's
	// memory.swap.current), and SwapLimit is its memory.swap.max (0: none).
	SwapKnown      bool
	SwapLimit      uint64
	MemoryKernel   uint64
	MemoryMaxUsage uint64 // peak usage (v2: memory.peak, kernels 5.19 and later)
	MemoryFailcnt  uint64 // times usage hit the limit
	OOMKills       uint64 // processes the OOM killer ended in the cgroup

	PidsLimit uint64 // 0: no limit

	Blkio   []BlkioDevice
	Hugetlb []Hugetlb
	// Pressure is nil where the kernel has no PSI files for the cgroup (a v1-only host).
	Pressure *Pressure
	// Pids are the host processes in the cgroup (cgroup.procs), nil where unknown.
	Pids []int
}

// BlkioDevice is one block device's I/O by operation ("Read", "Write", and what else the
// kernel reports: "Sync", "Async", "Discard", "Total" on v1, "Discard" on v2).
type BlkioDevice struct {
	Major, Minor uint64
	Bytes        map[string]uint64
	Ops          map[string]uint64 // I/O requests
}

// Hugetlb is one huge page size's usage. HasMax is false on v2, which keeps no peak.
type Hugetlb struct {
	Pagesize        string // as the kernel names it: "2MB", "1GB"
	Usage, MaxUsage uint64
	HasMax          bool
}

// PSI is one resource's pressure stall totals, in microseconds: Some is time at least one
// task waited on it, Full time all non-idle tasks were stalled at once.
type PSI struct {
	SomeMicros, FullMicros uint64
	// The kernel's running averages, percent of the last 10, 60 and 300 seconds.
	SomeAvg10, SomeAvg60, SomeAvg300 float64
	FullAvg10, FullAvg60, FullAvg300 float64
}

// Pressure is a cgroup's pressure stall information.
type Pressure struct {
	CPU, Memory, IO PSI
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

// Scope is how much of a cgroup a reading covers.
type Scope int

const (
	// Full is every counter Stats has: what cAdvisor-style metrics (PodMetrics) need.
	Full Scope = iota
	// Usage is what the CRI's stats carry: CPU time, memory usage, limit, working set,
	// RSS and page faults, and the process count. Five files where Full reads twenty or
	// more: kubelet asks for it for every container every few seconds.
	Usage
)

// ReadScope reads the cgroup at path, as much of it as scope says.
func (r *Reader) ReadScope(path string, scope Scope) (Stats, error) {
	if scope == Full {
		return r.Read(path)
	}
	if r.v2 {
		return readV2Usage(filepath.Join(r.Root, path))
	}
	return readV1Usage(r.Root, path)
}

// V2 says whether the root is a unified (cgroup v2) hierarchy.
func (r *Reader) V2() bool { return r.v2 }

// OOMKills reads only the OOM-kill count of the cgroup at path (one file, where Read reads
// them all): what a container's exit needs.
func (r *Reader) OOMKills(path string) uint64 {
	if r.v2 {
		return readKV(filepath.Join(r.Root, path, "memory.events"))["oom_kill"]
	}
	return readKV(filepath.Join(r.Root, "memory", path, "memory.oom_control"))["oom_kill"]
}

// Procs lists the processes in the cgroup at path.
func (r *Reader) Procs(path string) ([]int, error) {
	return readProcs(filepath.Join(r.procsDir(), path, "cgroup.procs"))
}

func (r *Reader) procsDir() string {
	if r.v2 {
		return r.Root
	}
	return filepath.Join(r.Root, "pids")
}

// Pressure reads the cgroup's PSI files: v2's, or on a v1 host the unified hierarchy's
// of a hybrid mount (where runc places containers too); nil where there are none.
func (r *Reader) Pressure(path string) *Pressure {
	if r.v2 {
		return readPressure(filepath.Join(r.Root, path))
	}
	return readPressure(filepath.Join(r.Root, "unified", path))
}

func readV1(root, path string) (Stats, error) {
	var s Stats
	var err error
	acct := filepath.Join(root, "cpuacct", path)
	if s.CPUUsageNanos, err = readUint(filepath.Join(acct, "cpuacct.usage")); err != nil {
		// A cgroup that is gone (the container exited) is an error to the caller.
		return s, err
	}
	user, uerr := readUint(filepath.Join(acct, "cpuacct.usage_user"))
	sys, serr := readUint(filepath.Join(acct, "cpuacct.usage_sys"))
	if uerr == nil && serr == nil {
		s.CPUUserNanos, s.CPUSystemNanos = user, sys
	} else if st := readKV(filepath.Join(acct, "cpuacct.stat")); st != nil {
		// Kernels before 4.7: clock ticks of USER_HZ, 100 on every architecture Linux
		// exports to user space.
		s.CPUUserNanos, s.CPUSystemNanos = st["user"]*1e7, st["system"]*1e7
	}
	cpu := readKV(filepath.Join(root, "cpu", path, "cpu.stat"))
	s.CPUPeriods, s.CPUThrottledPeriods, s.CPUThrottledNanos = cpu["nr_periods"], cpu["nr_throttled"], cpu["throttled_time"]

	mem := filepath.Join(root, "memory", path)
	s.MemoryUsage, _ = readUint(filepath.Join(mem, "memory.usage_in_bytes"))
	if limit, err := readUint(filepath.Join(mem, "memory.limit_in_bytes")); err == nil && limit < 1<<62 {
		s.MemoryLimit = limit
	}
	stat := readKV(filepath.Join(mem, "memory.stat"))
	s.RSS = stat["total_rss"]
	s.PageFaults, s.MajorPageFaults = stat["total_pgfault"], stat["total_pgmajfault"]
	s.WorkingSet = sub(s.MemoryUsage, stat["total_inactive_file"])
	s.MemoryCache, s.MemoryMappedFile = stat["total_cache"], stat["total_mapped_file"]
	if swap, ok := stat["total_swap"]; ok {
		s.MemorySwap = swap
	} else if memsw, err := readUint(filepath.Join(mem, "memory.memsw.usage_in_bytes")); err == nil {
		s.MemorySwap = sub(memsw, s.MemoryUsage)
	}
	s.MemoryKernel, _ = readUint(filepath.Join(mem, "memory.kmem.usage_in_bytes"))
	s.MemoryMaxUsage, _ = readUint(filepath.Join(mem, "memory.max_usage_in_bytes"))
	s.MemoryFailcnt, _ = readUint(filepath.Join(mem, "memory.failcnt"))
	s.OOMKills = readKV(filepath.Join(mem, "memory.oom_control"))["oom_kill"]

	pids := filepath.Join(root, "pids", path)
	s.Processes, _ = readUint(filepath.Join(pids, "pids.current"))
	s.PidsLimit, _ = readUint(filepath.Join(pids, "pids.max")) // "max" does not parse: no limit
	if s.Pids, err = readProcs(filepath.Join(pids, "cgroup.procs")); err != nil {
		s.Pids, _ = readProcs(filepath.Join(mem, "cgroup.procs")) // no pids controller
	}

	s.Blkio = readBlkioV1(filepath.Join(root, "blkio", path))
	s.Hugetlb = readHugetlb(filepath.Join(root, "hugetlb", path), "usage_in_bytes", "max_usage_in_bytes")
	unified := filepath.Join(root, "unified", path)
	if s.Hugetlb == nil { // hybrid hosts may bind hugetlb to the unified hierarchy
		s.Hugetlb = readHugetlb(unified, "current", "")
	}
	s.Pressure = readPressure(unified)
	return s, nil
}

// readV1Usage is readV1's Usage scope: the same values for the fields it sets.
func readV1Usage(root, path string) (Stats, error) {
	var s Stats
	var err error
	if s.CPUUsageNanos, err = readUint(filepath.Join(root, "cpuacct", path, "cpuacct.usage")); err != nil {
		return s, err
	}
	mem := filepath.Join(root, "memory", path)
	s.MemoryUsage, _ = readUint(filepath.Join(mem, "memory.usage_in_bytes"))
	if limit, err := readUint(filepath.Join(mem, "memory.limit_in_bytes")); err == nil && limit < 1<<62 {
		s.MemoryLimit = limit
	}
	var inactiveFile uint64
	_ = readFile(filepath.Join(mem, "memory.stat"), func(b []byte) {
		eachKV(b, func(k []byte, v uint64) {
			switch string(k) {
			case "total_rss":
				s.RSS = v
			case "total_pgfault":
				s.PageFaults = v
			case "total_pgmajfault":
				s.MajorPageFaults = v
			case "total_inactive_file":
				inactiveFile = v
			}
		})
	})
	s.WorkingSet = sub(s.MemoryUsage, inactiveFile)
	s.Processes, _ = readUint(filepath.Join(root, "pids", path, "pids.current"))
	// The CRI's stats carry PSI, as on v2: a hybrid host has it in the unified hierarchy.
	s.Pressure = readPressure(filepath.Join(root, "unified", path))
	return s, nil
}

// readV2Usage is readV2's Usage scope.
func readV2Usage(dir string) (Stats, error) {
	var s Stats
	err := readFile(filepath.Join(dir, "cpu.stat"), func(b []byte) {
		eachKV(b, func(k []byte, v uint64) {
			if string(k) == "usage_usec" {
				s.CPUUsageNanos = v * 1000
			}
		})
	})
	if err != nil {
		return s, err
	}
	s.MemoryUsage, _ = readUint(filepath.Join(dir, "memory.current"))
	if limit, err := readUint(filepath.Join(dir, "memory.max")); err == nil {
		s.MemoryLimit = limit
	}
	var inactiveFile uint64
	_ = readFile(filepath.Join(dir, "memory.stat"), func(b []byte) {
		eachKV(b, func(k []byte, v uint64) {
			switch string(k) {
			case "anon":
				s.RSS = v
			case "pgfault":
				s.PageFaults = v
			case "pgmajfault":
				s.MajorPageFaults = v
			case "inactive_file":
				inactiveFile = v
			}
		})
	})
	s.WorkingSet = sub(s.MemoryUsage, inactiveFile)
	s.Processes, _ = readUint(filepath.Join(dir, "pids.current"))
	readV2Swap(dir, &s)
	// The CRI's stats carry PSI (kubelet's summary API, KubeletPSI).
	s.Pressure = readPressure(dir)
	return s, nil
}

// readV2Swap reads the cgroup's swap usage and limit, where the kernel accounts swap.
func readV2Swap(dir string, s *Stats) {
	sw, err := readUint(filepath.Join(dir, "memory.swap.current"))
	if err != nil {
		return
	}
	s.MemorySwap, s.SwapKnown = sw, true
	if limit, err := readUint(filepath.Join(dir, "memory.swap.max")); err == nil && limit < 1<<62 {
		s.SwapLimit = limit
	}
}

func readV2(dir string) (Stats, error) {
	var s Stats
	cpu := readKV(filepath.Join(dir, "cpu.stat"))
	if cpu == nil {
		return s, &os.PathError{Op: "read", Path: filepath.Join(dir, "cpu.stat"), Err: os.ErrNotExist}
	}
	s.CPUUsageNanos = cpu["usage_usec"] * 1000
	s.CPUUserNanos, s.CPUSystemNanos = cpu["user_usec"]*1000, cpu["system_usec"]*1000
	s.CPUPeriods, s.CPUThrottledPeriods, s.CPUThrottledNanos = cpu["nr_periods"], cpu["nr_throttled"], cpu["throttled_usec"]*1000

	s.MemoryUsage, _ = readUint(filepath.Join(dir, "memory.current"))
	if limit, err := readUint(filepath.Join(dir, "memory.max")); err == nil {
		s.MemoryLimit = limit // "max" does not parse: no limit
	}
	stat := readKV(filepath.Join(dir, "memory.stat"))
	s.RSS = stat["anon"]
	s.PageFaults, s.MajorPageFaults = stat["pgfault"], stat["pgmajfault"]
	s.WorkingSet = sub(s.MemoryUsage, stat["inactive_file"])
	s.MemoryCache, s.MemoryMappedFile = stat["file"], stat["file_mapped"]
	if k, ok := stat["kernel"]; ok { // 5.18 and later
		s.MemoryKernel = k
	} else {
		s.MemoryKernel = stat["kernel_stack"] + stat["slab"] + stat["sock"] + stat["percpu"] + stat["vmalloc"]
	}
	readV2Swap(dir, &s)
	s.MemoryMaxUsage, _ = readUint(filepath.Join(dir, "memory.peak"))
	events := readKV(filepath.Join(dir, "memory.events"))
	s.MemoryFailcnt, s.OOMKills = events["max"], events["oom_kill"]

	s.Processes, _ = readUint(filepath.Join(dir, "pids.current"))
	s.PidsLimit, _ = readUint(filepath.Join(dir, "pids.max"))
	s.Pids, _ = readProcs(filepath.Join(dir, "cgroup.procs"))

	s.Blkio = readIOStat(filepath.Join(dir, "io.stat"))
	s.Hugetlb = readHugetlb(dir, "current", "")
	s.Pressure = readPressure(dir)
	return s, nil
}

// readBlkioV1 reads the first blkio policy with entries: the I/O schedulers' files (BFQ,
// then CFQ's) and the throttle layer's; which one counts depends on the kernel and the
// device's scheduler.
func readBlkioV1(dir string) []BlkioDevice {
	for _, prefix := range []string{"blkio.bfq.", "blkio.", "blkio.throttle."} {
		devs := Devices{}
		readBlkioFile(filepath.Join(dir, prefix+"io_service_bytes_recursive"), devs, func(d *BlkioDevice) map[string]uint64 { return d.Bytes })
		if len(devs) == 0 {
			continue
		}
		readBlkioFile(filepath.Join(dir, prefix+"io_serviced_recursive"), devs, func(d *BlkioDevice) map[string]uint64 { return d.Ops })
		return devs.List()
	}
	return nil
}

// readBlkioFile parses "major:minor Op value" lines (and skips the closing "Total n").
func readBlkioFile(path string, devs Devices, into func(*BlkioDevice) map[string]uint64) {
	b, err := readString(path)
	if err != nil {
		return
	}
	for _, line := range strings.Split(b, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		major, minor, ok := parseDevice(f[0])
		v, err := strconv.ParseUint(f[2], 10, 64)
		if !ok || err != nil {
			continue
		}
		into(devs.Get(major, minor))[f[1]] = v
	}
}

// readIOStat parses v2's io.stat: "major:minor rbytes=n wbytes=n rios=n wios=n dbytes=n dios=n".
func readIOStat(path string) []BlkioDevice {
	b, err := readString(path)
	if err != nil {
		return nil
	}
	devs := Devices{}
	for _, line := range strings.Split(b, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		major, minor, ok := parseDevice(f[0])
		if !ok {
			continue
		}
		d := devs.Get(major, minor)
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "rbytes":
				d.Bytes["Read"] = n
			case "wbytes":
				d.Bytes["Write"] = n
			case "dbytes":
				d.Bytes["Discard"] = n
			case "rios":
				d.Ops["Read"] = n
			case "wios":
				d.Ops["Write"] = n
			case "dios":
				d.Ops["Discard"] = n
			}
		}
	}
	return devs.List()
}

func parseDevice(s string) (major, minor uint64, ok bool) {
	a, b, found := strings.Cut(s, ":")
	if !found {
		return 0, 0, false
	}
	major, err1 := strconv.ParseUint(a, 10, 64)
	minor, err2 := strconv.ParseUint(b, 10, 64)
	return major, minor, err1 == nil && err2 == nil
}

// Devices gathers block I/O counters by device, whoever reads them (cgroup files, a
// shim's metrics, a sandbox runtime's events).
type Devices map[[2]uint64]*BlkioDevice

// Get returns the device's counters, made on first use.
func (devs Devices) Get(major, minor uint64) *BlkioDevice {
	k := [2]uint64{major, minor}
	if d, ok := devs[k]; ok {
		return d
	}
	d := &BlkioDevice{Major: major, Minor: minor, Bytes: map[string]uint64{}, Ops: map[string]uint64{}}
	devs[k] = d
	return d
}

// List is the devices in (major, minor) order, so that series come out in the same order
// every time; nil when there are none.
func (devs Devices) List() []BlkioDevice {
	if len(devs) == 0 {
		return nil
	}
	out := make([]BlkioDevice, 0, len(devs))
	for _, d := range devs {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Major < out[j].Major || (out[i].Major == out[j].Major && out[i].Minor < out[j].Minor)
	})
	return out
}

// readHugetlb reads hugetlb.<size>.<usage> (and .<max> where the version keeps a peak)
// for every page size the cgroup has files for.
func readHugetlb(dir, usage, max string) []Hugetlb {
	matches, _ := filepath.Glob(filepath.Join(dir, "hugetlb.*."+usage))
	var out []Hugetlb
	for _, m := range matches {
		size := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "hugetlb."), "."+usage)
		if strings.Contains(size, ".") { // hugetlb.2MB.rsvd.current and the like
			continue
		}
		h := Hugetlb{Pagesize: size}
		var err error
		if h.Usage, err = readUint(m); err != nil {
			continue
		}
		if max != "" {
			h.MaxUsage, err = readUint(filepath.Join(dir, "hugetlb."+size+"."+max))
			h.HasMax = err == nil
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pagesize < out[j].Pagesize })
	return out
}

// readPressure reads {cpu,memory,io}.pressure; nil unless at least one is there. The
// kernel makes the three together: without cpu.pressure (a v1-only host, whose CRI stats
// ask at every call) the others are not looked for.
func readPressure(dir string) *Pressure {
	var p Pressure
	found := false
	for i, f := range []struct {
		name string
		into *PSI
	}{{"cpu.pressure", &p.CPU}, {"memory.pressure", &p.Memory}, {"io.pressure", &p.IO}} {
		psi, ok := readPSI(filepath.Join(dir, f.name))
		if ok {
			*f.into, found = psi, true
		} else if i == 0 {
			return nil
		}
	}
	if !found {
		return nil
	}
	return &p
}

// readPSI parses "some avg10=0.00 avg60=0.00 avg300=0.00 total=123" and its "full" line.
func readPSI(path string) (PSI, bool) {
	b, err := readString(path)
	if err != nil {
		return PSI{}, false
	}
	var p PSI
	for _, line := range strings.Split(b, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var total uint64
		var avg [3]float64
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "total":
				total, _ = strconv.ParseUint(v, 10, 64)
			case "avg10":
				avg[0], _ = strconv.ParseFloat(v, 64)
			case "avg60":
				avg[1], _ = strconv.ParseFloat(v, 64)
			case "avg300":
				avg[2], _ = strconv.ParseFloat(v, 64)
			}
		}
		switch f[0] {
		case "some":
			p.SomeMicros = total
			p.SomeAvg10, p.SomeAvg60, p.SomeAvg300 = avg[0], avg[1], avg[2]
		case "full":
			p.FullMicros = total
			p.FullAvg10, p.FullAvg60, p.FullAvg300 = avg[0], avg[1], avg[2]
		}
	}
	return p, true
}

func readProcs(path string) ([]int, error) {
	var out []int
	err := readFile(path, func(b []byte) {
		for _, f := range bytes.Fields(b) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, pid)
			}
		}
	})
	return out, err
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// Interface is one network interface's counters.
type Interface struct {
	Name                                    string
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
}

// NetDev parses /proc/<pid>/net/dev (the counters of that process's network namespace),
// leaving out lo.
func NetDev(path string) ([]Interface, error) {
	b, err := readString(path)
	if err != nil {
		return nil, err
	}
	var out []Interface
	for _, line := range strings.Split(b, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		f := strings.Fields(rest)
		if name == "lo" || len(f) < 12 {
			continue
		}
		n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
		out = append(out, Interface{
			Name:    name,
			RxBytes: n(0), RxPackets: n(1), RxErrors: n(2), RxDropped: n(3),
			TxBytes: n(8), TxPackets: n(9), TxErrors: n(10), TxDropped: n(11),
		})
	}
	return out, nil
}
