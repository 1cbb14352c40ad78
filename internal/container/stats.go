package container

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/protocache"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/stats/procstats"
	"github.com/rtshimd/rtshimd/internal/stats/statscache"
)

// staleAfter is the age past which a kept reading is not served but read again: one
// collection period and a tenth, room for the collector's own reading to be late.
func staleAfter(period time.Duration) time.Duration { return period + period/10 }

// SetStatsPeriod changes how often the collector reads every running container and ready
// pod (stats.collection_period; 0: read at each call). A reload applies it at once.
func (m *Manager) SetStatsPeriod(d time.Duration) {
	m.ctrStats.SetRateWindow(statscache.RateWindow(d))
	m.podStats.SetRateWindow(statscache.RateWindow(d))
	m.collector.SetPeriod(d)
}

// collectUnits lists the pods the collector reads in a pass: the ready ones and those with
// a running container. The kept readings of containers that no longer run and of pods no
// longer ready are dropped here too (each is also dropped as it stops).
func (m *Manager) collectUnits() []string {
	running := map[string]bool{}
	pods := map[string]bool{}
	for _, c := range m.snapshot() {
		if c.Status().State == StateRunning {
			running[c.ID] = true
			pods[c.SandboxID] = true
		}
	}
	ready := map[string]bool{}
	for _, sb := range m.opts.Sandboxes.All() {
		if sb.Status().State == sandbox.StateReady {
			ready[sb.ID], pods[sb.ID] = true, true
		}
	}
	m.ctrStats.Keep(func(id string) bool { return running[id] })
	m.podStats.Keep(func(id string) bool { return ready[id] })
	out := make([]string, 0, len(pods))
	for id := range pods {
		out = append(out, id)
	}
	return out
}

// collect reads one pod for the collector: its running containers, then its own figures.
func (m *Manager) collect(sandboxID string) {
	var running []*Container
	for _, c := range m.ofSandbox(sandboxID) {
		if c.Status().State == StateRunning {
			running = append(running, c)
			m.readContainer(c)
		}
	}
	sb, err := m.opts.Sandboxes.Get(sandboxID)
	if err != nil {
		m.podStats.Delete(sandboxID)
		return
	}
	m.readPod(sb, running)
}

func (m *Manager) cgroups() *cgstats.Reader {
	m.cgOnce.Do(func() { m.cg = cgstats.New("/sys/fs/cgroup") })
	return m.cg
}

func u64(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

// Stats reads container id's CPU and memory usage through its runtime (the cgroup, or
// the shim's metrics) and its writable layer's usage. A single container's stats are read
// at the call, collector or not; the reading becomes its latest.
func (m *Manager) Stats(id string) (*runtimeapi.ContainerStats, error) {
	c, err := m.Get(id)
	if err != nil {
		return nil, err
	}
	return m.statsOf(c, m.readContainer(c)), nil
}

// sample is one reading of a container: its runtime's counters (cgOK false where the
// container does not run or the runtime could not say), and for a Full reading its
// processes' counts from /proc (where its runtime names them) and its writable layer's
// usage.
type sample struct {
	at     time.Time
	cg     cgstats.Stats
	cgOK   bool
	proc   procstats.Counts
	procOK bool
	fs     image.Usage
	fsOK   bool
}

// sample reads c, as much as scope says: the CRI's stats take cgstats.Usage, metrics Full.
func (m *Manager) sample(c *Container, scope cgstats.Scope) sample {
	s := sample{at: time.Now()}
	if c.Status().State == StateRunning {
		cg, err := c.rt.Stats(context.Background(), c.task(), c.CgroupsPath, scope)
		if err == nil {
			s.cg, s.cgOK = cg, true
			if scope == cgstats.Full && cg.Pids != nil {
				s.proc, s.procOK = procstats.Read("/proc", cg.Pids), true
			}
		} else {
			logrus.WithFields(logrus.Fields{"container": c.ID, "handler": c.Handler}).WithError(err).Debug("container stats unreadable")
		}
	}
	if scope == cgstats.Full {
		if u, err := m.opts.Images.RootfsUsage(c.ID); err == nil {
			s.fs, s.fsOK = u, true
		}
	}
	return s
}

// readContainer reads c's usage now. The reading of a running container is kept as its
// latest (and its CPU rate measured from the one before); a container that does not run
// has no usage to keep.
func (m *Manager) readContainer(c *Container) statscache.Entry[sample] {
	s := m.sample(c, cgstats.Usage)
	r := statscache.Reading[sample]{At: s.at, CPU: s.cg.CPUUsageNanos, HasCPU: s.cgOK, Value: s}
	if !s.cgOK {
		return statscache.Entry[sample]{Reading: r}
	}
	e := m.ctrStats.Put(c.ID, r)
	// An exit or a removal recorded while this reading was taken deleted the kept one
	// before this Put: the state, set before that delete, says so.
	if c.Status().State != StateRunning {
		m.ctrStats.Delete(c.ID)
	}
	return e
}

// cachedContainer is c's latest reading, when there is a collector, c runs and the reading
// is at most staleAfter old at now.
func (m *Manager) cachedContainer(c *Container, now time.Time) (statscache.Entry[sample], bool) {
	p := m.collector.Period()
	if p == 0 || c.Status().State != StateRunning {
		return statscache.Entry[sample]{}, false
	}
	return m.ctrStats.Fresh(c.ID, now, staleAfter(p))
}

// latestContainer is c's reading for a List answer: the kept one (cachedContainer), else
// (no collector, a container not read yet, a collector behind) one taken now.
func (m *Manager) latestContainer(c *Container, now time.Time) statscache.Entry[sample] {
	if e, ok := m.cachedContainer(c, now); ok {
		return e
	}
	return m.readContainer(c)
}

// statsOf is c's ContainerStats from a reading of it; its timestamps are the reading's.
// The writable layer's usage is the store walk's latest, with the walk's own time.
func (m *Manager) statsOf(c *Container, e statscache.Entry[sample]) *runtimeapi.ContainerStats {
	u, uerr := m.layerUsage(c)
	return m.statsFrom(c, e, u, uerr)
}

// layerUsage is c's writable layer's usage from the store walk's latest.
func (m *Manager) layerUsage(c *Container) (image.Usage, error) {
	if m.opts.Images == nil { // unit tests
		return image.Usage{}, errNoImages
	}
	return m.opts.Images.RootfsUsage(c.ID)
}

var errNoImages = errors.New("no image service")

// statsKey is what an encoded ContainerStats was built from: a reading (its values and
// CPU rate come with its time) and the store walk that gave the writable layer's usage.
type statsKey struct {
	at, layerAt int64
	layerOK     bool
	// The reading's own figures too: two readings a coarse clock gives one time are
	// still told apart.
	cgOK                  bool
	cpu, workingSet, rate uint64
}

// statsEncoded is statsOf's wire encoding, built once per statsKey.
func (m *Manager) statsEncoded(c *Container, e statscache.Entry[sample]) []byte {
	u, uerr := m.layerUsage(c)
	key := statsKey{at: e.At.UnixNano(), layerAt: u.Timestamp.UnixNano(), layerOK: uerr == nil,
		cgOK: e.Value.cgOK, cpu: e.Value.cg.CPUUsageNanos, workingSet: e.Value.cg.WorkingSet, rate: e.NanoCores}
	return c.statsEnc.Encoded(key, func() proto.Message { return m.statsFrom(c, e, u, uerr) })
}

// statsFrom is statsOf with the writable layer's usage already read (uerr: none).
func (m *Manager) statsFrom(c *Container, e statscache.Entry[sample], u image.Usage, uerr error) *runtimeapi.ContainerStats {
	now, s := e.At, e.Value
	out := &runtimeapi.ContainerStats{
		Cpu:    &runtimeapi.CpuUsage{Timestamp: now.UnixNano()},
		Memory: &runtimeapi.MemoryUsage{Timestamp: now.UnixNano()},
	}
	// The attributes (the container's ID, metadata, labels and annotations) never change:
	// they go out as encoded once.
	protocache.SetField(out, "attributes", c.statsAttributes())
	if s.cgOK {
		fillUsage(out.Cpu, out.Memory, s.cg, e.NanoCores, now)
	}
	if uerr == nil {
		out.WritableLayer = &runtimeapi.FilesystemUsage{
			Timestamp: u.Timestamp.UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: u.Mountpoint},
			UsedBytes: u64(u.Bytes), InodesUsed: u64(u.Inodes),
		}
	}
	return out
}

func fillUsage(cpu *runtimeapi.CpuUsage, mem *runtimeapi.MemoryUsage, s cgstats.Stats, nanoCores uint64, now time.Time) {
	cpu.UsageCoreNanoSeconds = u64(s.CPUUsageNanos)
	cpu.UsageNanoCores = u64(nanoCores)
	mem.UsageBytes, mem.WorkingSetBytes, mem.RssBytes = u64(s.MemoryUsage), u64(s.WorkingSet), u64(s.RSS)
	mem.PageFaults, mem.MajorPageFaults = u64(s.PageFaults), u64(s.MajorPageFaults)
	if s.MemoryLimit > 0 {
		avail := uint64(0)
		if s.MemoryLimit > s.WorkingSet {
			avail = s.MemoryLimit - s.WorkingSet
		}
		mem.AvailableBytes = u64(avail)
	}
}

// ListStats returns the stats of the containers that match filter (running ones, as
// kubelet expects, unless the filter names an id): with a collector, from its readings
// (cachedContainer); else read at the call. A filter that names an id (crictl stats ID;
// kubelet never sends one) is read at the call, as ContainerStats is: crictl takes two
// lists a second apart and refuses a reading that did not change.
func (m *Manager) ListStats(filter *runtimeapi.ContainerStatsFilter) []*runtimeapi.ContainerStats {
	picked, entries := m.listReadings(filter)
	out := make([]*runtimeapi.ContainerStats, len(picked))
	for i, c := range picked {
		out[i] = m.statsOf(c, entries[i])
	}
	return out
}

// ListStatsEncoded is ListStats' items in their wire encoding, for ListContainerStats to
// send as they are (protocache.SetRepeated): each is encoded once per reading, so with a
// collector a list between two of its readings copies bytes.
func (m *Manager) ListStatsEncoded(filter *runtimeapi.ContainerStatsFilter) [][]byte {
	picked, entries := m.listReadings(filter)
	out := make([][]byte, len(picked))
	for i, c := range picked {
		out[i] = m.statsEncoded(c, entries[i])
	}
	return out
}

// listReadings picks the containers of a stats list and their readings.
func (m *Manager) listReadings(filter *runtimeapi.ContainerStatsFilter) ([]*Container, []statscache.Entry[sample]) {
	var picked []*Container
	for _, c := range m.snapshot() {
		if f := filter.GetId(); f != "" && !strings.HasPrefix(c.ID, f) {
			continue
		}
		if f := filter.GetPodSandboxId(); f != "" && !strings.HasPrefix(c.SandboxID, f) {
			continue
		}
		if !sandbox.MatchLabels(filter.GetLabelSelector(), c.config.Labels) {
			continue
		}
		if filter.GetId() == "" && c.Status().State != StateRunning {
			continue
		}
		picked = append(picked, c)
	}
	entries := make([]statscache.Entry[sample], len(picked))
	now := time.Now()
	// Kept readings cost no syscall: only those read now are spread.
	var miss []int
	for i, c := range picked {
		if e, ok := m.cachedContainer(c, now); ok && filter.GetId() == "" {
			entries[i] = e
		} else {
			miss = append(miss, i)
		}
	}
	spread(len(miss), func(j int) { i := miss[j]; entries[i] = m.readContainer(picked[i]) })
	return picked, entries
}

// spread runs f(0..n-1) on a few goroutines: reading cgroup files is syscall-bound
// (memory.stat is computed by the kernel on each read).
func spread(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < min(4, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

func (m *Manager) snapshot() []*Container {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Container, 0, len(m.containers))
	for _, c := range m.containers {
		out = append(out, c)
	}
	return out
}

// PodStats reads a pod's usage at the call: its cgroup parent when the pod has one
// (kubelet's pod cgroup; for sandboxing runtimes it holds the sandbox), else the sum of
// its containers; its network interfaces from its namespace; its containers' stats.
func (m *Manager) PodStats(sandboxID string) (*runtimeapi.PodSandboxStats, error) {
	sb, err := m.opts.Sandboxes.Get(sandboxID)
	if err != nil {
		return nil, err
	}
	return m.podStatsNow(sb, m.ofSandbox(sb.ID)), nil
}

// podSample is one reading of a pod's own figures: its cgroup parent's usage (cgOK false
// where it has none or it could not be read), its network interfaces and its process count.
type podSample struct {
	cg    cgstats.Stats
	cgOK  bool
	ifs   []cgstats.Interface
	ifsOK bool
	procs uint64 // the pod cgroup's, else the sandbox container's and running containers' processes
}

// readPod reads sb's own figures now (running: its running containers); the reading of a
// ready pod is kept as its latest.
func (m *Manager) readPod(sb *sandbox.Sandbox, running []*Container) statscache.Entry[podSample] {
	at := time.Now()
	var s podSample
	if parent := sb.PodConfig().GetLinux().GetCgroupParent(); parent != "" {
		if dir, err := cgpath.Parent(m.opts.CgroupDriver == config.SystemdDriver, parent); err == nil {
			if cg, err := m.cgroups().ReadScope(dir, cgstats.Usage); err == nil {
				s.cg, s.cgOK = cg, true
			}
		}
	}
	var pids []int
	if st := sb.Status(); st.ContainerPid > 0 && st.State == sandbox.StateReady {
		pids = append(pids, st.ContainerPid)
	}
	for _, c := range running {
		if st := c.Status(); st.State == StateRunning && st.Pid > 0 {
			pids = append(pids, st.Pid)
		}
	}
	s.procs = uint64(len(pids))
	if s.cgOK && s.cg.Processes > 0 {
		s.procs = s.cg.Processes
	}
	if sb.NetNS != "" && len(pids) > 0 {
		if ifs, err := netDev(pids[0]); err == nil {
			s.ifs, s.ifsOK = ifs, true
		}
	}
	r := statscache.Reading[podSample]{At: at, CPU: s.cg.CPUUsageNanos, HasCPU: s.cgOK, Value: s}
	if sb.Status().State != sandbox.StateReady {
		return statscache.Entry[podSample]{Reading: r}
	}
	return m.podStats.Put(sb.ID, r)
}

// podStatsNow reads sb and its containers ctrs now.
func (m *Manager) podStatsNow(sb *sandbox.Sandbox, ctrs []*Container) *runtimeapi.PodSandboxStats {
	entries := make([]statscache.Entry[sample], len(ctrs))
	var running []*Container
	for i, c := range ctrs {
		entries[i] = m.readContainer(c)
		if entries[i].Value.cgOK {
			running = append(running, c)
		}
	}
	return m.podStatsOf(sb, ctrs, entries, m.readPod(sb, running))
}

// cachedPod is sb's stats, with its containers ctrs, from their latest readings, when
// there is a collector and they are at most staleAfter old (a container not read yet is
// read now).
func (m *Manager) cachedPod(sb *sandbox.Sandbox, ctrs []*Container, now time.Time) (*runtimeapi.PodSandboxStats, bool) {
	p := m.collector.Period()
	if p == 0 || sb.Status().State != sandbox.StateReady {
		return nil, false
	}
	pe, ok := m.podStats.Fresh(sb.ID, now, staleAfter(p))
	if !ok {
		return nil, false
	}
	entries := make([]statscache.Entry[sample], len(ctrs))
	for i, c := range ctrs {
		entries[i] = m.latestContainer(c, now)
	}
	return m.podStatsOf(sb, ctrs, entries, pe), true
}

// podStatsOf is the pod's PodSandboxStats from readings of it and of its containers. Its
// own timestamps are its reading's. Its CPU and memory are its cgroup's, else the sum of
// its containers' (nano-cores too).
func (m *Manager) podStatsOf(sb *sandbox.Sandbox, ctrs []*Container, entries []statscache.Entry[sample], pe statscache.Entry[podSample]) *runtimeapi.PodSandboxStats {
	now, ps := pe.At, pe.Value
	linux := &runtimeapi.LinuxPodSandboxStats{
		Cpu:     &runtimeapi.CpuUsage{Timestamp: now.UnixNano()},
		Memory:  &runtimeapi.MemoryUsage{Timestamp: now.UnixNano()},
		Process: &runtimeapi.ProcessUsage{Timestamp: now.UnixNano()},
	}
	var sum cgstats.Stats
	var rate uint64
	// The containers go out as ListContainerStats sends them, encoded once per reading.
	encs := make([][]byte, len(ctrs))
	for i, c := range ctrs {
		encs[i] = m.statsEncoded(c, entries[i])
		if e := entries[i]; e.Value.cgOK {
			cg := e.Value.cg
			sum.CPUUsageNanos += cg.CPUUsageNanos
			sum.MemoryUsage += cg.MemoryUsage
			sum.WorkingSet += cg.WorkingSet
			sum.RSS += cg.RSS
			sum.PageFaults += cg.PageFaults
			sum.MajorPageFaults += cg.MajorPageFaults
			rate += e.NanoCores
		}
	}
	protocache.SetRepeated(linux, "containers", encs)
	if ps.cgOK {
		sum, rate = ps.cg, pe.NanoCores
	}
	fillUsage(linux.Cpu, linux.Memory, sum, rate, now)
	linux.Process.ProcessCount = u64(ps.procs)
	if ps.ifsOK {
		nu := &runtimeapi.NetworkUsage{Timestamp: now.UnixNano()}
		for _, i := range ps.ifs {
			iu := &runtimeapi.NetworkInterfaceUsage{Name: i.Name, RxBytes: u64(i.RxBytes), RxErrors: u64(i.RxErrors), TxBytes: u64(i.TxBytes), TxErrors: u64(i.TxErrors)}
			nu.Interfaces = append(nu.Interfaces, iu)
			if i.Name == "eth0" {
				nu.DefaultInterface = iu
			}
		}
		linux.Network = nu
	}
	out := &runtimeapi.PodSandboxStats{Linux: linux}
	protocache.SetField(out, "attributes", sb.StatsAttributes()) // encoded once
	return out
}

// netDev reads the interfaces of pid's network namespace: a pod's, through a process in it.
func netDev(pid int) ([]cgstats.Interface, error) {
	return cgstats.NetDev(fmt.Sprintf("/proc/%d/net/dev", pid))
}

// netPid is a process in the pod's network namespace: the sandbox container's process, else a running
// container's; 0 if none.
func netPid(sb *sandbox.Sandbox, running []*Container) int {
	if st := sb.Status(); st.ContainerPid > 0 && st.State == sandbox.StateReady {
		return st.ContainerPid
	}
	for _, c := range running {
		if st := c.Status(); st.State == StateRunning && st.Pid > 0 {
			return st.Pid
		}
	}
	return 0
}

// ListPodStats returns the stats of the ready pods that match filter, from the
// collector's readings (cachedPod), but for a filter that names an id (crictl statsp),
// read at the call as ListStats does; those read at the call are read as ListStats reads
// containers, a few at a time: the cgroup files are syscall-bound.
func (m *Manager) ListPodStats(filter *runtimeapi.PodSandboxStatsFilter) []*runtimeapi.PodSandboxStats {
	var picked []*sandbox.Sandbox
	for _, sb := range m.opts.Sandboxes.All() {
		if f := filter.GetId(); f != "" && !strings.HasPrefix(sb.ID, f) {
			continue
		}
		if filter.GetId() == "" && sb.Status().State != sandbox.StateReady {
			continue
		}
		if !sandbox.MatchLabels(filter.GetLabelSelector(), sb.PodConfig().GetLabels()) {
			continue
		}
		picked = append(picked, sb)
	}
	out := make([]*runtimeapi.PodSandboxStats, len(picked))
	ctrs := make([][]*Container, len(picked))
	now := time.Now()
	var miss []int
	for i, sb := range picked {
		ctrs[i] = m.ofSandbox(sb.ID)
		if st, ok := m.cachedPod(sb, ctrs[i], now); ok && filter.GetId() == "" {
			out[i] = st
		} else {
			miss = append(miss, i)
		}
	}
	spread(len(miss), func(j int) { i := miss[j]; out[i] = m.podStatsNow(picked[i], ctrs[i]) })
	return out
}

// RunningByHandler counts running containers by handler.
func (m *Manager) RunningByHandler() map[string]int {
	out := map[string]int{}
	for _, c := range m.snapshot() {
		if c.Status().State == StateRunning {
			out[c.Handler]++
		}
	}
	return out
}
