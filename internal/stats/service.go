// Package stats serves the CRI's stats and metrics calls (ContainerStats, ListContainerStats,
// PodSandboxStats, ListPodSandboxStats, ListPodSandboxMetrics) from both managers: the
// containers' usage through their runtimes, the pods' through their cgroups and network
// namespaces. It keeps the latest reading of every running container and ready pod, taken
// by a collector every stats.collection_period, and answers lists from them.
package stats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/protocache"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/stats/procstats"
	"github.com/rtshimd/rtshimd/internal/stats/statscache"
)

// Options wire a Service.
type Options struct {
	Containers *container.Manager
	Pods       *sandbox.Manager
	// Images gives a container's writable layer's usage; nil leaves it out (tests).
	Images       LayerUsage
	CgroupDriver string
	// Period is how often the collector reads every running container's and ready pod's
	// usage (stats.collection_period); 0 reads at each stats call.
	Period time.Duration
}

// LayerUsage is what stats take of the image service.
type LayerUsage interface {
	RootfsUsage(id string) (image.Usage, error)
}

// Service answers the stats calls.
type Service struct {
	opts Options

	// The cgroup reader, the latest readings of running containers and ready pods (each
	// with its CPU rate), and the collector that takes them.
	cgOnce    sync.Once
	cg        *cgstats.Reader
	ctrStats  statscache.Cache[sample]
	podStats  statscache.Cache[podSample]
	collector *statscache.Collector

	// encs is each running container's ContainerStats as ListContainerStats sends it,
	// kept per reading: with a collector, the lists between two readings send the same
	// bytes.
	encMu sync.Mutex
	encs  map[string]*protocache.Item[statsKey]
	// lastPrune is when a list last pruned the readings (no collector), in Unix ns.
	lastPrune atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New starts the service's collector. Close stops it.
func New(opts Options) *Service { return newService(opts, true) }

// newService is New; run false leaves the collector stopped (tests whose readings age).
func newService(opts Options, run bool) *Service {
	ctx, cancel := context.WithCancel(context.Background())
	svc := &Service{opts: opts, encs: map[string]*protocache.Item[statsKey]{}, cancel: cancel}
	svc.collector = statscache.NewCollector(0, svc.collectUnits, svc.collect)
	svc.SetPeriod(opts.Period)
	if run {
		svc.wg.Add(1)
		go func() {
			defer svc.wg.Done()
			svc.collector.Run(ctx)
		}()
	}
	return svc
}

// Close stops the collector.
func (svc *Service) Close() {
	svc.cancel()
	svc.wg.Wait()
}

// SetPeriod changes how often the collector reads every running container and ready pod
// (stats.collection_period; 0: read at each call). A reload applies it at once.
func (svc *Service) SetPeriod(d time.Duration) {
	svc.ctrStats.SetRateWindow(statscache.RateWindow(d))
	svc.podStats.SetRateWindow(statscache.RateWindow(d))
	svc.collector.SetPeriod(d)
}

// encoding is container id's kept encoding.
func (svc *Service) encoding(id string) *protocache.Item[statsKey] {
	svc.encMu.Lock()
	defer svc.encMu.Unlock()
	it := svc.encs[id]
	if it == nil {
		it = &protocache.Item[statsKey]{}
		svc.encs[id] = it
	}
	return it
}

func (svc *Service) cgroups() *cgstats.Reader {
	svc.cgOnce.Do(func() { svc.cg = cgstats.New("/sys/fs/cgroup") })
	return svc.cg
}

// staleAfter is the age past which a kept reading is not served but read again: one
// collection period and a tenth, room for the collector's own reading to be late.
func staleAfter(period time.Duration) time.Duration { return period + period/10 }

// collectUnits lists the pods the collector reads in a pass: the ready ones and those with
// a running container. The kept readings of containers that no longer run and of pods no
// longer ready are dropped here too.
func (svc *Service) collectUnits() []string {
	running := map[string]bool{}
	pods := map[string]bool{}
	for _, c := range svc.opts.Containers.All() {
		if c.Status().State == container.StateRunning {
			running[c.ID] = true
			pods[c.SandboxID] = true
		}
	}
	ready := map[string]bool{}
	for _, sb := range svc.opts.Pods.All() {
		if sb.Status().State == sandbox.StateReady {
			ready[sb.ID], pods[sb.ID] = true, true
		}
	}
	svc.ctrStats.Keep(func(id string) bool { return running[id] })
	svc.podStats.Keep(func(id string) bool { return ready[id] })
	svc.encMu.Lock()
	for id := range svc.encs {
		if !running[id] {
			delete(svc.encs, id)
		}
	}
	svc.encMu.Unlock()
	out := make([]string, 0, len(pods))
	for id := range pods {
		out = append(out, id)
	}
	return out
}

// pruneEvery bounds how often a list prunes without a collector: the pass walks every
// container and pod, and kubelet lists stats every few seconds.
var pruneEvery = 10 * time.Second

// pruneUncollected drops, where no collector runs, the readings of what no longer runs, at
// most once per pruneEvery: with a collector each of its passes does (collectUnits).
// Served readings are those of running containers and ready pods only, so this is about
// memory, not answers.
func (svc *Service) pruneUncollected() {
	if svc.collector.Period() != 0 {
		return
	}
	now := time.Now().UnixNano()
	last := svc.lastPrune.Load()
	if now-last < int64(pruneEvery) || !svc.lastPrune.CompareAndSwap(last, now) {
		return
	}
	svc.collectUnits()
}

// collect reads one pod for the collector: its running containers, then its own figures.
func (svc *Service) collect(sandboxID string) {
	var running []*container.Container
	for _, c := range svc.opts.Containers.OfSandbox(sandboxID) {
		if c.Status().State == container.StateRunning {
			running = append(running, c)
			svc.readContainer(c)
		}
	}
	sb, err := svc.opts.Pods.Get(sandboxID)
	if err != nil {
		svc.podStats.Delete(sandboxID)
		return
	}
	svc.readPod(sb, running)
}

func u64(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

// Stats reads container id's CPU and memory usage through its runtime (the cgroup, or
// the shim's metrics) and its writable layer's usage. A single container's stats are read
// at the call, collector or not; the reading becomes its latest.
func (svc *Service) ContainerStats(id string) (*runtimeapi.ContainerStats, error) {
	c, err := svc.opts.Containers.Get(id)
	if err != nil {
		return nil, err
	}
	return svc.statsOf(c, svc.readContainer(c)), nil
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
func (svc *Service) sample(c *container.Container, scope cgstats.Scope) sample {
	s := sample{at: time.Now()}
	if c.Status().State == container.StateRunning {
		cg, err := c.TaskRuntime().Stats(context.Background(), c.Task(), c.CgroupsPath, scope)
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
		if u, err := svc.layerUsage(c); err == nil {
			s.fs, s.fsOK = u, true
		}
	}
	return s
}

// readContainer reads c's usage now. The reading of a running container is kept as its
// latest (and its CPU rate measured from the one before); a container that does not run
// has no usage to keep.
func (svc *Service) readContainer(c *container.Container) statscache.Entry[sample] {
	s := svc.sample(c, cgstats.Usage)
	r := statscache.Reading[sample]{At: s.at, CPU: s.cg.CPUUsageNanos, HasCPU: s.cgOK, Value: s}
	if !s.cgOK {
		return statscache.Entry[sample]{Reading: r}
	}
	e := svc.ctrStats.Put(c.ID, r)
	// An exit or a removal recorded while this reading was taken deleted the kept one
	// before this Put: the state, set before that delete, says so.
	if c.Status().State != container.StateRunning {
		svc.ctrStats.Delete(c.ID)
	}
	return e
}

// cachedContainer is c's latest reading, when there is a collector, c runs and the reading
// is at most staleAfter old at now.
func (svc *Service) cachedContainer(c *container.Container, now time.Time) (statscache.Entry[sample], bool) {
	p := svc.collector.Period()
	if p == 0 || c.Status().State != container.StateRunning {
		return statscache.Entry[sample]{}, false
	}
	return svc.ctrStats.Fresh(c.ID, now, staleAfter(p))
}

// latestContainer is c's reading for a List answer: the kept one (cachedContainer), else
// (no collector, a container not read yet, a collector behind) one taken now.
func (svc *Service) latestContainer(c *container.Container, now time.Time) statscache.Entry[sample] {
	if e, ok := svc.cachedContainer(c, now); ok {
		return e
	}
	return svc.readContainer(c)
}

// statsOf is c's ContainerStats from a reading of it; its timestamps are the reading's.
// The writable layer's usage is the store walk's latest, with the walk's own time.
func (svc *Service) statsOf(c *container.Container, e statscache.Entry[sample]) *runtimeapi.ContainerStats {
	u, uerr := svc.layerUsage(c)
	return svc.statsFrom(c, e, u, uerr)
}

// layerUsage is c's writable layer's usage from the store walk's latest.
func (svc *Service) layerUsage(c *container.Container) (image.Usage, error) {
	if svc.opts.Images == nil { // unit tests
		return image.Usage{}, errNoImages
	}
	return svc.opts.Images.RootfsUsage(c.ID)
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
func (svc *Service) statsEncoded(c *container.Container, e statscache.Entry[sample]) []byte {
	u, uerr := svc.layerUsage(c)
	key := statsKey{at: e.At.UnixNano(), layerAt: u.Timestamp.UnixNano(), layerOK: uerr == nil,
		cgOK: e.Value.cgOK, cpu: e.Value.cg.CPUUsageNanos, workingSet: e.Value.cg.WorkingSet, rate: e.NanoCores}
	return svc.encoding(c.ID).Encoded(key, func() proto.Message { return svc.statsFrom(c, e, u, uerr) })
}

// statsFrom is statsOf with the writable layer's usage already read (uerr: none).
func (svc *Service) statsFrom(c *container.Container, e statscache.Entry[sample], u image.Usage, uerr error) *runtimeapi.ContainerStats {
	now, s := e.At, e.Value
	out := &runtimeapi.ContainerStats{
		Cpu:    &runtimeapi.CpuUsage{Timestamp: now.UnixNano()},
		Memory: &runtimeapi.MemoryUsage{Timestamp: now.UnixNano()},
	}
	// The attributes (the container's ID, metadata, labels and annotations) never change:
	// they go out as encoded once.
	protocache.SetField(out, "attributes", c.StatsAttributes())
	if s.cgOK {
		fillUsage(out.Cpu, out.Memory, s.cg, e.NanoCores, now)
		out.Swap = swapUsage(s.cg, now)
		if p := s.cg.Pressure; p != nil {
			out.Cpu.Psi, out.Memory.Psi = psiStats(p.CPU), psiStats(p.Memory)
			out.Io = &runtimeapi.IoUsage{Timestamp: now.UnixNano(), Psi: psiStats(p.IO)}
		}
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

// swapUsage is the container's swap, where its cgroup accounts it (cgroup v2); nil else.
// Available is the limit's remainder, where there is a limit (kubelet reads none as
// unknown).
func swapUsage(s cgstats.Stats, now time.Time) *runtimeapi.SwapUsage {
	if !s.SwapKnown {
		return nil
	}
	sw := &runtimeapi.SwapUsage{Timestamp: now.UnixNano(), SwapUsageBytes: u64(s.MemorySwap)}
	if s.SwapLimit > 0 {
		avail := uint64(0)
		if s.SwapLimit > s.MemorySwap {
			avail = s.SwapLimit - s.MemorySwap
		}
		sw.SwapAvailableBytes = u64(avail)
	}
	return sw
}

// psiStats is one resource's pressure as the CRI carries it: totals in microseconds,
// averages in percent, as the kernel writes them.
func psiStats(p cgstats.PSI) *runtimeapi.PsiStats {
	return &runtimeapi.PsiStats{
		Some: &runtimeapi.PsiData{Total: p.SomeMicros, Avg10: p.SomeAvg10, Avg60: p.SomeAvg60, Avg300: p.SomeAvg300},
		Full: &runtimeapi.PsiData{Total: p.FullMicros, Avg10: p.FullAvg10, Avg60: p.FullAvg60, Avg300: p.FullAvg300},
	}
}

// ListStats returns the stats of the containers that match filter (running ones, as
// kubelet expects, unless the filter names an id): with a collector, from its readings
// (cachedContainer); else read at the call. A filter that names an id (crictl stats ID;
// kubelet never sends one) is read at the call, as ContainerStats is: crictl takes two
// lists a second apart and refuses a reading that did not change.
func (svc *Service) ListStats(filter *runtimeapi.ContainerStatsFilter) []*runtimeapi.ContainerStats {
	picked, entries := svc.listReadings(filter)
	out := make([]*runtimeapi.ContainerStats, len(picked))
	for i, c := range picked {
		out[i] = svc.statsOf(c, entries[i])
	}
	return out
}

// ListStatsEncoded is ListStats' items in their wire encoding, for ListContainerStats to
// send as they are (protocache.SetRepeated): each is encoded once per reading, so with a
// collector a list between two of its readings copies bytes.
func (svc *Service) ListStatsEncoded(filter *runtimeapi.ContainerStatsFilter) [][]byte {
	picked, entries := svc.listReadings(filter)
	out := make([][]byte, len(picked))
	for i, c := range picked {
		out[i] = svc.statsEncoded(c, entries[i])
	}
	return out
}

// listReadings picks the containers of a stats list and their readings.
func (svc *Service) listReadings(filter *runtimeapi.ContainerStatsFilter) ([]*container.Container, []statscache.Entry[sample]) {
	svc.pruneUncollected()
	var picked []*container.Container
	for _, c := range svc.opts.Containers.All() {
		if f := filter.GetId(); f != "" && !strings.HasPrefix(c.ID, f) {
			continue
		}
		if f := filter.GetPodSandboxId(); f != "" && !strings.HasPrefix(c.SandboxID, f) {
			continue
		}
		if !sandbox.MatchLabels(filter.GetLabelSelector(), c.Config().Labels) {
			continue
		}
		if filter.GetId() == "" && c.Status().State != container.StateRunning {
			continue
		}
		picked = append(picked, c)
	}
	entries := make([]statscache.Entry[sample], len(picked))
	now := time.Now()
	// Kept readings cost no syscall: only those read now are spread.
	var miss []int
	for i, c := range picked {
		if e, ok := svc.cachedContainer(c, now); ok && filter.GetId() == "" {
			entries[i] = e
		} else {
			miss = append(miss, i)
		}
	}
	spread(len(miss), func(j int) { i := miss[j]; entries[i] = svc.readContainer(picked[i]) })
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

// PodStats reads a pod's usage at the call: its cgroup parent when the pod has one
// (kubelet's pod cgroup; for sandboxing runtimes it holds the sandbox), else the sum of
// its containers; its network interfaces from its namespace; its containers' stats.
func (svc *Service) PodStats(sandboxID string) (*runtimeapi.PodSandboxStats, error) {
	sb, err := svc.opts.Pods.Get(sandboxID)
	if err != nil {
		return nil, err
	}
	return svc.podStatsNow(sb, svc.opts.Containers.OfSandbox(sb.ID)), nil
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
func (svc *Service) readPod(sb *sandbox.Sandbox, running []*container.Container) statscache.Entry[podSample] {
	at := time.Now()
	var s podSample
	if parent := sb.PodConfig().GetLinux().GetCgroupParent(); parent != "" {
		if dir, err := cgpath.Parent(svc.opts.CgroupDriver == config.SystemdDriver, parent); err == nil {
			if cg, err := svc.cgroups().ReadScope(dir, cgstats.Usage); err == nil {
				s.cg, s.cgOK = cg, true
			}
		}
	}
	var pids []int
	if st := sb.Status(); st.ContainerPid > 0 && st.State == sandbox.StateReady {
		pids = append(pids, st.ContainerPid)
	}
	for _, c := range running {
		if st := c.Status(); st.State == container.StateRunning && st.Pid > 0 {
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
	return svc.podStats.Put(sb.ID, r)
}

// podStatsNow reads sb and its containers ctrs now.
func (svc *Service) podStatsNow(sb *sandbox.Sandbox, ctrs []*container.Container) *runtimeapi.PodSandboxStats {
	entries := make([]statscache.Entry[sample], len(ctrs))
	var running []*container.Container
	for i, c := range ctrs {
		entries[i] = svc.readContainer(c)
		if entries[i].Value.cgOK {
			running = append(running, c)
		}
	}
	return svc.podStatsOf(sb, ctrs, entries, svc.readPod(sb, running))
}

// cachedPod is sb's stats, with its containers ctrs, from their latest readings, when
// there is a collector and they are at most staleAfter old (a container not read yet is
// read now).
func (svc *Service) cachedPod(sb *sandbox.Sandbox, ctrs []*container.Container, now time.Time) (*runtimeapi.PodSandboxStats, bool) {
	p := svc.collector.Period()
	if p == 0 || sb.Status().State != sandbox.StateReady {
		return nil, false
	}
	pe, ok := svc.podStats.Fresh(sb.ID, now, staleAfter(p))
	if !ok {
		return nil, false
	}
	entries := make([]statscache.Entry[sample], len(ctrs))
	for i, c := range ctrs {
		entries[i] = svc.latestContainer(c, now)
	}
	return svc.podStatsOf(sb, ctrs, entries, pe), true
}

// podStatsOf is the pod's PodSandboxStats from readings of it and of its containers. Its
// own timestamps are its reading's. Its CPU and memory are its cgroup's, else the sum of
// its containers' (nano-cores too).
func (svc *Service) podStatsOf(sb *sandbox.Sandbox, ctrs []*container.Container, entries []statscache.Entry[sample], pe statscache.Entry[podSample]) *runtimeapi.PodSandboxStats {
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
		encs[i] = svc.statsEncoded(c, entries[i])
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
func netPid(sb *sandbox.Sandbox, running []*container.Container) int {
	if st := sb.Status(); st.ContainerPid > 0 && st.State == sandbox.StateReady {
		return st.ContainerPid
	}
	for _, c := range running {
		if st := c.Status(); st.State == container.StateRunning && st.Pid > 0 {
			return st.Pid
		}
	}
	return 0
}

// ListPodStats returns the stats of the ready pods that match filter, from the
// collector's readings (cachedPod), but for a filter that names an id (crictl statsp),
// read at the call as ListStats does; those read at the call are read as ListStats reads
// containers, a few at a time: the cgroup files are syscall-bound.
func (svc *Service) ListPodStats(filter *runtimeapi.PodSandboxStatsFilter) []*runtimeapi.PodSandboxStats {
	svc.pruneUncollected()
	var picked []*sandbox.Sandbox
	for _, sb := range svc.opts.Pods.All() {
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
	ctrs := make([][]*container.Container, len(picked))
	now := time.Now()
	var miss []int
	for i, sb := range picked {
		ctrs[i] = svc.opts.Containers.OfSandbox(sb.ID)
		if st, ok := svc.cachedPod(sb, ctrs[i], now); ok && filter.GetId() == "" {
			out[i] = st
		} else {
			miss = append(miss, i)
		}
	}
	spread(len(miss), func(j int) { i := miss[j]; out[i] = svc.podStatsNow(picked[i], ctrs[i]) })
	return out
}
