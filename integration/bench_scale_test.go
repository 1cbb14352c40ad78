//go:build integration

package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// BenchmarkScale runs RTSHIMD_BENCH_PODS pods (default 1000; development runs use 100),
// each one busybox `sleep` on runc, BestEffort, on a CNI bridge, started with the calls and
// configs kubelet sends; and at 0, 100 and all of them it times what kubelet calls every
// second or so (the List RPCs, the stats lists, the status of one pod and one container),
// the start of one more pod, the bare gRPC round trip (Version), and measures the daemon's
// RSS and the monitors' PSS per pod. Every figure at the top is also reported as a ratio
// to the same figure at 100 and at 0 pods, measured in the same run. Nothing is asserted
// about speed.
//
// RTSHIMD_BENCH_CNI=0 runs the pods without a network. RTSHIMD_BENCH_PROFILE=DIR serves
// pprof from the daemon and writes CPU and allocation profiles, taken while the List and
// stats loops run at the top count, and a CPU profile taken while more pods start there,
// into DIR, with the daemon's log. RTSHIMD_BENCH_LOG_LEVEL=debug has the daemon log the
// steps of every pod's and container's start with their durations ("... timing").
// RTSHIMD_BENCH_STATS_PERIOD sets stats.collection_period ("0": stats read at each call;
// unset: the default); the daemon's CPU while nothing calls it (daemon-idle-cpu-ms/s, over
// 10 s at each level) shows what the collector costs.
func BenchmarkScale(b *testing.B) {
	top := 1000
	if v := os.Getenv("RTSHIMD_BENCH_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("RTSHIMD_BENCH_PODS=%q: want a positive number of pods", v)
		}
		top = n
	}
	levels := []int{0}
	if top > 100 {
		levels = append(levels, 100)
	}
	levels = append(levels, top)
	withCNI := os.Getenv("RTSHIMD_BENCH_CNI") != "0"
	profileDir := os.Getenv("RTSHIMD_BENCH_PROFILE")

	reg := startRegistry(b, nil)
	layer := busyboxLayer(b)
	reg.Push(b, "bench/busybox", "1", ImageSpec{Layers: []Layer{layer}}, nil)
	ref := reg.Ref("bench/busybox", "1")
	opts := []daemonOption{forBenchmark(), withRegistries(reg.Addr)}
	pprofSock := ""
	if profileDir != "" {
		pprofSock = filepath.Join(b.TempDir(), "pprof.sock")
		opts = append(opts, withConfig(func(_ *Daemon, c *config.Config) { c.Debug.PprofSocket = pprofSock }))
	}
	statsPeriod := "0 (the default: read at each call)"
	if v := os.Getenv("RTSHIMD_BENCH_STATS_PERIOD"); v != "" {
		p, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("RTSHIMD_BENCH_STATS_PERIOD %q: %v", v, err)
		}
		statsPeriod = v
		opts = append(opts, withConfig(func(_ *Daemon, c *config.Config) { c.Stats.CollectionPeriod.Duration = p }))
	}
	b.Logf("stats.collection_period = %s", statsPeriod)
	d := newDaemon(b, opts...)
	// RTSHIMD_BENCH_DAEMON_LOG=FILE keeps the daemon's log there (with
	// RTSHIMD_BENCH_LOG_LEVEL=debug: every start's steps).
	if path := os.Getenv("RTSHIMD_BENCH_DAEMON_LOG"); path != "" {
		// Registered after the daemon's cleanup, so it runs first, while the log is there.
		b.Cleanup(func() { _ = os.WriteFile(path, []byte(d.Log()), 0o644) })
	}
	if profileDir != "" {
		// Registered after the daemon's cleanup, so it runs first, while the log is there.
		b.Cleanup(func() { _ = os.WriteFile(filepath.Join(profileDir, "daemon.log"), []byte(d.Log()), 0o644) })
	}
	b.Cleanup(func() { removeTestCgroups(b) })
	ctx := b.Context()
	if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
		b.Fatal(err)
	}
	if withCNI {
		scaleNetwork(b, d, top)
	}
	s := &scaleRun{b: b, d: d, ref: ref, logs: b.TempDir(), ctx: ctx, floor: newFloor(b, layer), pprofSock: pprofSock, profileDir: profileDir}

	// One pod started and removed before anything is timed: the first runc, CNI plugin
	// and overlay mount of a run pay for caches the rest find warm.
	s.removePods([]scalePod{s.mustStart("warm-up")})

	b.ResetTimer()
	figs := map[string]map[int]float64{}
	var order []string
	put := func(name string, level int, v float64) {
		if figs[name] == nil {
			figs[name] = map[int]float64{}
			order = append(order, name)
		}
		figs[name][level] = v
	}
	var pods []scalePod
	var startRate, removeRate float64
	for _, level := range levels {
		s.profileStarts = profileDir != "" && level == top
		if n := level - len(pods); n > 0 {
			begin := time.Now()
			pods = append(pods, s.startPods(len(pods), n)...)
			startRate = float64(n) / time.Since(begin).Seconds()
			b.Logf("%d pods running (%d started in %v, %.1f pods/s)", len(pods), n, time.Since(begin).Round(time.Millisecond), startRate)
		}
		s.measure(level, pods, put)
		if profileDir != "" && level == top {
			s.profile(pprofSock, profileDir)
		}
		if level == top {
			s.hold()
		}
	}
	begin := time.Now()
	s.removePods(pods)
	removeRate = float64(len(pods)) / time.Since(begin).Seconds()
	b.StopTimer()

	mid := levels[len(levels)-2]
	if len(levels) == 3 {
		mid = levels[1]
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-34s", "figure")
	for _, l := range levels {
		fmt.Fprintf(&table, " %12s", fmt.Sprintf("%d pods", l))
	}
	if mid != 0 {
		fmt.Fprintf(&table, " %10s", fmt.Sprintf("x vs %d", mid))
	}
	fmt.Fprintf(&table, " %10s\n", "x vs 0")
	for _, name := range order {
		v := figs[name]
		for _, l := range levels {
			b.ReportMetric(v[l], fmt.Sprintf("%s@%d", name, l))
		}
		fmt.Fprintf(&table, "%-34s", name)
		for _, l := range levels {
			fmt.Fprintf(&table, " %12.3f", v[l])
		}
		ratio := func(base int) float64 {
			if v[base] == 0 {
				return 0
			}
			return v[top] / v[base]
		}
		if mid != 0 {
			b.ReportMetric(ratio(mid), fmt.Sprintf("%s-x%d", name, mid))
			fmt.Fprintf(&table, " %10.2f", ratio(mid))
		}
		b.ReportMetric(ratio(0), name+"-x0")
		fmt.Fprintf(&table, " %10.2f\n", ratio(0))
	}
	growth := (figs["daemon-rss-MiB"][top] - figs["daemon-rss-MiB"][0]) / float64(top)
	b.ReportMetric(growth*1024, "daemon-rss-growth-KiB/pod")
	b.ReportMetric(startRate, "start-pods/s")
	b.ReportMetric(removeRate, "remove-pods/s")
	// On stdout, not b.Log, which keeps a benchmark's first ten lines only; `make bench`
	// shows the lines that start with "scale:".
	summary := fmt.Sprintf("%d pods, CNI %v, %d workers starting them, stats.collection_period %s:\n%sdaemon RSS growth %.1f KiB/pod; last batch started at %.1f pods/s, all removed at %.1f pods/s\n",
		top, withCNI, scaleWorkers, statsPeriod, table.String(), growth*1024, startRate, removeRate)
	fmt.Print("scale: " + strings.ReplaceAll(strings.TrimSuffix(summary, "\n"), "\n", "\nscale: ") + "\n")
}

// scaleWorkers start and remove pods at once: kubelet's pod workers run in parallel.
const scaleWorkers = 4

// scaleSamples is how many one-more pods are started at each level; each is timed. Eleven,
// not five: the medians of five moved by a third between runs on this machine (one more
// pod at 1,000 pods came out 1.58x to 2.31x its time at 0 in four runs of the same code).
// They fit the bridge's 1,024 ports beside 1,000 pods.
const scaleSamples = 11

type scaleRun struct {
	b    *testing.B
	d    *Daemon
	ref  string
	logs string
	ctx  context.Context

	floor *floor // runc by hand, beside one more pod

	pprofSock, profileDir string
	profileStarts         bool // profile the one-more-pod starts at this level
}

type scalePod struct{ pod, ctr string }

// scaleNetwork writes a bridge network with room for every pod (a /20) into the daemon's
// CNI dir: bridge and host-local, and portmap as kubelet nodes have it.
func scaleNetwork(b *testing.B, d *Daemon, pods int) {
	var r [2]byte
	_, _ = rand.Read(r[:])
	if pods > 4000 {
		b.Fatalf("%d pods do not fit the benchmark's /20", pods)
	}
	bridge := "rtsc" + hex.EncodeToString(r[:])
	subnet := fmt.Sprintf("10.214.%d.0/20", int(r[0])%16*16)
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "rtshimd-bench",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`, bridge, filepath.Join(d.Dir, "ipam"), subnet)
	if err := os.WriteFile(filepath.Join(d.Dir, "cni", "10-bench.conflist"), []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = exec.Command("ip", "link", "delete", bridge).Run() })
	waitNetworkReady(b, d, true)
}

// podConfig is the sandbox config kubelet sends for a BestEffort pod: its labels and
// annotations, a log directory, DNS, and a pod cgroup of its own.
func (s *scaleRun) podConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name, runtimeapi.NamespaceMode_CONTAINER)
	uid := cfg.Metadata.Uid
	cfg.Labels = map[string]string{
		"app": name, "pod-template-hash": "5d8f7c9b6d",
		"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "rtshimd-test", "io.kubernetes.pod.uid": uid,
	}
	cfg.Annotations = map[string]string{
		"kubernetes.io/config.seen": "2025-01-01T00:00:00.000000000Z", "kubernetes.io/config.source": "api",
		"kubernetes.io/config.hash": uid,
	}
	cfg.LogDirectory = filepath.Join(s.logs, "rtshimd-test_"+name+"_"+uid)
	cfg.Linux.CgroupParent = "/" + cgroupRoot + "/pod" + uid
	return cfg
}

func (s *scaleRun) ctrConfig(pod *runtimeapi.PodSandboxConfig) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
		Image:    imgSpec(s.ref),
		Command:  []string{"/bin/sleep", "100000"},
		LogPath:  "sleep/0.log",
		Labels: map[string]string{
			"io.kubernetes.container.name": "sleep", "io.kubernetes.pod.name": pod.Metadata.Name,
			"io.kubernetes.pod.namespace": pod.Metadata.Namespace, "io.kubernetes.pod.uid": pod.Metadata.Uid,
		},
		Annotations: map[string]string{
			"io.kubernetes.container.hash": "6f5d3a21", "io.kubernetes.container.restartCount": "0",
			"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
			"io.kubernetes.container.terminationMessagePolicy": "File", "io.kubernetes.pod.terminationGracePeriod": "30",
		},
		Linux: &runtimeapi.LinuxContainerConfig{
			// BestEffort: the least CPU shares and the first to go on OOM.
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, OomScoreAdj: 1000},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			},
		},
	}
}

// start runs one pod: RunPodSandbox, CreateContainer, StartContainer, as kubelet calls them.
func (s *scaleRun) start(name string) (scalePod, time.Duration, error) {
	cfg := s.podConfig(name)
	begin := time.Now()
	pod, err := s.d.RS.RunPodSandbox(s.ctx, cfg, "runc")
	if err != nil {
		return scalePod{}, 0, err
	}
	ctr, err := s.d.RS.CreateContainer(s.ctx, pod, s.ctrConfig(cfg), cfg)
	if err == nil {
		err = s.d.RS.StartContainer(s.ctx, ctr)
	}
	return scalePod{pod, ctr}, time.Since(begin), err
}

func (s *scaleRun) mustStart(name string) scalePod {
	p, _, err := s.start(name)
	if err != nil {
		s.b.Fatalf("start %s: %v", name, err)
	}
	return p
}

// startPods starts n pods named from first on, scaleWorkers at a time.
func (s *scaleRun) startPods(first, n int) []scalePod {
	out := make([]scalePod, n)
	var mu sync.Mutex
	var failed error
	parallel(s.b, n, scaleWorkers, func(i int) time.Duration {
		p, dt, err := s.start(fmt.Sprintf("scale-%d", first+i))
		if err != nil {
			mu.Lock()
			failed = err
			mu.Unlock()
		}
		out[i] = p
		return dt
	})
	if failed != nil {
		s.b.Fatal(failed)
	}
	return out
}

// removePods stops and removes pods, scaleWorkers at a time, as kubelet does.
func (s *scaleRun) removePods(pods []scalePod) {
	parallel(s.b, len(pods), scaleWorkers, func(i int) time.Duration {
		if err := s.d.RS.StopPodSandbox(s.ctx, pods[i].pod); err != nil {
			s.b.Error(err)
		}
		if err := s.d.RS.RemovePodSandbox(s.ctx, pods[i].pod); err != nil {
			s.b.Error(err)
		}
		return 0
	})
}

// timeCalls calls f n times (after one untimed call) and returns its p50 and p99 in ms.
func (s *scaleRun) timeCalls(what string, n int, f func() error) (p50, p99 float64) {
	var ds []time.Duration
	for i := 0; i <= n; i++ {
		begin := time.Now()
		if err := f(); err != nil {
			s.b.Fatalf("%s: %v", what, err)
		}
		if i > 0 {
			ds = append(ds, time.Since(begin))
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return ms(pct(ds, 50)), ms(pct(ds, 99))
}

// measure takes every figure with the given pods running.
func (s *scaleRun) measure(level int, pods []scalePod, put func(string, int, float64)) {
	b, rs, ctx := s.b, s.d.RS, s.ctx
	want := func(what string, got int) error {
		if got != level {
			return fmt.Errorf("%s: %d items, want %d", what, got, level)
		}
		return nil
	}
	// One more pod, started serially scaleSamples times; the status calls are timed on
	// these (every level has them), then they go.
	var extra []scalePod
	var starts []time.Duration
	for i := 0; i < scaleSamples; i++ {
		p, dt, err := s.start(fmt.Sprintf("extra-%d-%d", level, i))
		if err != nil {
			b.Fatal(err)
		}
		extra, starts = append(extra, p), append(starts, dt)
	}
	put("one-more-pod-start-ms", level, float64(pct(starts, 50).Microseconds())/1000)
	// The floor at this level, in the same mount table and on the same busy node: the
	// busybox rootfs mounted and run by `runc create` + `runc start` with runc's default
	// spec, no CRI and no network (BenchmarkPodStart's floor). What grows in it with the
	// pods is runc's, not the daemon's.
	var floors []time.Duration
	for i := 0; i < scaleSamples; i++ {
		floors = append(floors, s.floor.run(b, level*scaleSamples+i))
	}
	s.floor.cleanup(b)
	put("floor-start-ms", level, float64(pct(floors, 50).Microseconds())/1000)
	put("one-more-pod-per-floor", level, float64(pct(starts, 50))/float64(pct(floors, 50)))
	if s.profileStarts {
		extra = append(extra, s.profileStart(level)...)
	}
	i := 0
	p50, p99 := s.timeCalls("PodSandboxStatus", 200, func() error {
		i++
		_, err := rs.PodSandboxStatus(ctx, extra[i%len(extra)].pod, false)
		return err
	})
	put("pod-status-p50-ms", level, p50)
	put("pod-status-p99-ms", level, p99)
	p50, p99 = s.timeCalls("ContainerStatus", 200, func() error {
		i++
		_, err := rs.ContainerStatus(ctx, extra[i%len(extra)].ctr, false)
		return err
	})
	put("ctr-status-p50-ms", level, p50)
	put("ctr-status-p99-ms", level, p99)
	pss := s.monitorPSSPerPod(extra)
	s.removePods(extra)

	if level > 0 {
		// The population's monitors, a sample of up to 100 pods: PSS shares a page among
		// the processes that map it, so more monitors each count less of the binary.
		step := max(1, len(pods)/100)
		var sample []scalePod
		for j := 0; j < len(pods); j += step {
			sample = append(sample, pods[j])
		}
		pss = s.monitorPSSPerPod(sample)
	}
	put("monitor-pss-KiB/pod", level, pss)

	calls := []struct {
		name string
		n    int
		f    func() error
	}{
		{"list-pods", 200, func() error {
			l, err := rs.ListPodSandbox(ctx, nil)
			return errors.Join(err, want("ListPodSandbox", len(l)))
		}},
		{"list-ctrs", 200, func() error {
			l, err := rs.ListContainers(ctx, nil)
			return errors.Join(err, want("ListContainers", len(l)))
		}},
		{"list-ctr-stats", 40, func() error {
			l, err := rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
			return errors.Join(err, want("ListContainerStats", len(l)))
		}},
		{"list-pod-stats", 20, func() error {
			l, err := rs.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{})
			return errors.Join(err, want("ListPodSandboxStats", len(l)))
		}},
		{"version", 200, func() error { _, err := rs.Version(ctx, "v1"); return err }},
	}
	for _, c := range calls {
		p50, p99 := s.timeCalls(c.name, c.n, c.f)
		put(c.name+"-p50-ms", level, p50)
		put(c.name+"-p99-ms", level, p99)
	}
	// The client's share of a list: decoding the answer, which kubelet pays as this
	// process does and the daemon cannot make cheaper.
	podList, _ := rs.ListPodSandbox(ctx, nil)
	ctrList, _ := rs.ListContainers(ctx, nil)
	put("list-pods-decode-p50-ms", level, decodeTime(b, &runtimeapi.ListPodSandboxResponse{Items: podList}))
	// The same answers from a server that does nothing but send them (listFloor).
	floor, stopFloor := startListFloor(b, podList, ctrList)
	defer stopFloor()
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"list-pods-floor", func() error {
			l, err := floor.ListPodSandbox(ctx, nil)
			return errors.Join(err, want("ListPodSandbox (floor)", len(l)))
		}},
		{"list-ctrs-floor", func() error {
			l, err := floor.ListContainers(ctx, nil)
			return errors.Join(err, want("ListContainers (floor)", len(l)))
		}},
		{"version-floor", func() error { _, err := floor.Version(ctx, "v1"); return err }},
	} {
		p50, _ := s.timeCalls(c.name, 200, c.f)
		put(c.name+"-p50-ms", level, p50)
	}
	put("list-ctrs-decode-p50-ms", level, decodeTime(b, &runtimeapi.ListContainersResponse{Containers: ctrList}))
	ctrStats, _ := rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
	podStats, _ := rs.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{})
	put("list-ctr-stats-decode-p50-ms", level, decodeTime(b, &runtimeapi.ListContainerStatsResponse{Stats: ctrStats}))
	put("list-pod-stats-decode-p50-ms", level, decodeTime(b, &runtimeapi.ListPodSandboxStatsResponse{Stats: podStats}))
	put("daemon-rss-MiB", level, float64(procStatusKiB(b, s.d.cmd.Process.Pid, "VmRSS"))/1024)
	put("daemon-idle-cpu-ms/s", level, s.idleCPU(10*time.Second))
	b.Logf("measured at %d pods", level)
}

// idleCPU is the daemon's CPU time, in ms per second, over window while nothing calls it:
// its background work (the stats collector, the store's disk-usage walk, CNI config
// re-reads).
func (s *scaleRun) idleCPU(window time.Duration) float64 {
	before, begin := processCPU(s.b, s.d.cmd.Process.Pid), time.Now()
	time.Sleep(window)
	return float64((processCPU(s.b, s.d.cmd.Process.Pid) - before).Milliseconds()) / time.Since(begin).Seconds()
}

// processCPU is the user and system CPU time pid has used (its own, not its children's).
func processCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// After the command's closing parenthesis: utime and stime are fields 14 and 15.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
}

// decodeTime is the p50, in ms, of decoding msg's encoding in this process.
func decodeTime(b *testing.B, msg proto.Message) float64 {
	raw, err := proto.Marshal(msg)
	if err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for i := 0; i < 50; i++ {
		out := msg.ProtoReflect().New().Interface()
		begin := time.Now()
		if err := proto.Unmarshal(raw, out); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(begin))
	}
	return float64(pct(ds, 50)) / 1e6
}

// monitorPSSPerPod is the PSS, in KiB, of the monitors of pods (the sandbox's, where its
// pod has one, and the container's), per pod.
func (s *scaleRun) monitorPSSPerPod(pods []scalePod) float64 {
	var total float64
	for _, p := range pods {
		var pids []int
		ps, err := s.d.RS.PodSandboxStatus(s.ctx, p.pod, true)
		if err != nil {
			s.b.Fatal(err)
		}
		cs, err := s.d.RS.ContainerStatus(s.ctx, p.ctr, true)
		if err != nil {
			s.b.Fatal(err)
		}
		for _, info := range []string{ps.Info["info"], cs.Info["info"]} {
			var v struct {
				Status struct {
					MonitorPid int `json:"monitor_pid"`
				} `json:"status"`
			}
			_ = json.Unmarshal([]byte(info), &v)
			if v.Status.MonitorPid > 0 {
				pids = append(pids, v.Status.MonitorPid)
			}
		}
		for _, pid := range pids {
			total += smapsPss(s.b, pid)
		}
	}
	return total / float64(len(pods))
}

// smapsPss is a process's proportional set size in KiB.
func smapsPss(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		b.Fatalf("monitor %d: %v", pid, err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "Pss:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb
		}
	}
	return 0
}

// procStatusKiB reads a "Name:   123 kB" line of /proc/<pid>/status.
func procStatusKiB(b *testing.B, pid int, name string) uint64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}

// hold keeps the pods running for RTSHIMD_BENCH_HOLD (a duration), for measuring the
// node by hand at the top count: the floor of a pod start (runc and the CNI plugins run
// by hand), perf. The daemon's directory is logged; the hold ends early once a file
// named "release" appears in it.
func (s *scaleRun) hold() {
	v := os.Getenv("RTSHIMD_BENCH_HOLD")
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		s.b.Fatalf("RTSHIMD_BENCH_HOLD=%q: %v", v, err)
	}
	fmt.Printf("scale: holding for %v; daemon dir %s (touch release there to go on)\n", d, s.d.Dir)
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		if _, err := os.Stat(filepath.Join(s.d.Dir, "release")); err == nil {
			return
		}
	}
}

// profileStart takes a CPU profile of the daemon while one more pod after another
// starts, serially, and returns the pods.
func (s *scaleRun) profileStart(level int) []scalePod {
	var pods []scalePod
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.pprofFetch("/debug/pprof/profile?seconds=10", "start-cpu.pprof")
	}()
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		default:
			pods = append(pods, s.mustStart(fmt.Sprintf("profiled-%d-%d", level, len(pods))))
		}
	}
	s.b.Logf("start profile in %s: %d pods started in 10 s", s.profileDir, len(pods))
	return pods
}

// pprofFetch saves the daemon's pprof answer at path as file in the profile dir.
func (s *scaleRun) pprofFetch(path, file string) {
	b := s.b
	if err := os.MkdirAll(s.profileDir, 0o755); err != nil {
		b.Fatal(err)
	}
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.pprofSock)
	}}}
	resp, err := c.Get("http://pprof" + path)
	if err != nil {
		b.Errorf("pprof %s: %v", path, err)
		return
	}
	defer resp.Body.Close()
	out, err := os.Create(filepath.Join(s.profileDir, file))
	if err != nil {
		b.Error(err)
		return
	}
	defer out.Close()
	if _, err := io.Copy(out, resp.Body); err != nil {
		b.Error(err)
	}
}

// profile takes a CPU profile of the daemon while kubelet's List and stats calls run in a
// loop, then its allocation and heap profiles, into dir.
func (s *scaleRun) profile(sock, dir string) {
	b, rs, ctx := s.b, s.d.RS, s.ctx
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	fetch := func(path, file string) {
		resp, err := c.Get("http://pprof" + path)
		if err != nil {
			b.Fatalf("pprof %s: %v", path, err)
		}
		defer resp.Body.Close()
		out, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		if _, err := io.Copy(out, resp.Body); err != nil {
			b.Fatal(err)
		}
	}
	fetch("/debug/pprof/allocs", "allocs-before.pprof")
	done := make(chan struct{})
	go func() {
		defer close(done)
		fetch("/debug/pprof/profile?seconds=20", "cpu.pprof")
	}()
	rounds := 0
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		default:
			_, _ = rs.ListPodSandbox(ctx, nil)
			_, _ = rs.ListContainers(ctx, nil)
			_, _ = rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
			_, _ = rs.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{})
			rounds++
		}
	}
	fetch("/debug/pprof/allocs", "allocs.pprof")
	fetch("/debug/pprof/heap", "heap.pprof")
	b.Logf("profiles in %s: %d rounds of ListPodSandbox, ListContainers, ListContainerStats, ListPodSandboxStats in 20 s", dir, rounds)
}
