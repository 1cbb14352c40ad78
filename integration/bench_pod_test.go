//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	serialPods = 30
	burstPods  = 50
	burstWidth = 10
)

// BenchmarkPodStart measures pod start — RunPodSandbox + CreateContainer + StartContainer
// of a busybox `sleep` on runc — serially and as a burst, beside the floor measured in the
// same run with no CRI at all: overlay mount + `runc create` + `runc start` of the same
// rootfs with runc's own default spec. It also measures the supervision memory (PSS of the monitor processes) per
// running container.
//
// RTSHIMD_BENCH_BASELINE=REV also runs the daemon of commit REV (built from the history),
// its serial starts interleaved with this one's and the floor's and its burst after this
// one's, so a change is measured against the code before it on the same machine at the
// same moment (baseline-* figures).
func BenchmarkPodStart(b *testing.B) {
	reg := startRegistry(b, nil)
	layer := busyboxLayer(b)
	reg.Push(b, "bench/busybox", "1", ImageSpec{Layers: []Layer{layer}}, nil)
	ref := reg.Ref("bench/busybox", "1")
	// RTSHIMD_BENCH_DAEMON_LOG=FILE keeps the daemon's log there.
	d := newDaemon(b, forBenchmark(), withRegistries(reg.Addr))
	if path := os.Getenv("RTSHIMD_BENCH_DAEMON_LOG"); path != "" {
		// Registered after the daemon's cleanup, so it runs first, while the log is there.
		b.Cleanup(func() { _ = os.WriteFile(path, []byte(d.Log()), 0o644) })
	}
	ctx := b.Context()
	if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
		b.Fatal(err)
	}
	var base *Daemon
	if rev := os.Getenv("RTSHIMD_BENCH_BASELINE"); rev != "" {
		out, err := exec.Command("git", "rev-parse", "--verify", rev+"^{commit}").Output()
		if err != nil {
			b.Fatalf("RTSHIMD_BENCH_BASELINE %s: %v", rev, err)
		}
		bin := earlierDaemon(b, strings.TrimSpace(string(out)))
		// The baseline's binary from its first start: the state root is its own.
		base = newDaemon(b, forBenchmark(), withRegistries(reg.Addr), withBin(bin))
		if _, err := base.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	f := newFloor(b, layer)
	b.Cleanup(func() { removeTestCgroups(b) })

	var phaseMu sync.Mutex
	phases := map[string][]time.Duration{}
	mark := func(name string, since time.Time) time.Time {
		now := time.Now()
		phaseMu.Lock()
		phases[name] = append(phases[name], now.Sub(since))
		phaseMu.Unlock()
		return now
	}
	startOn := func(on *Daemon, i int) (time.Duration, string, error) {
		cfg := podConfig(fmt.Sprintf("bench-%d", i), runtimeapi.NamespaceMode_CONTAINER)
		cfg.Linux.CgroupParent = "/" + cgroupRoot + "/bench"
		mark := mark
		if on != d { // the baseline's steps are not this daemon's
			mark = func(string, time.Time) time.Time { return time.Now() }
		}
		start := time.Now()
		pod, err := on.RS.RunPodSandbox(ctx, cfg, "runc")
		if err != nil {
			return 0, "", err
		}
		t := mark("run", start)
		ctr, err := on.RS.CreateContainer(ctx, pod, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
			Image:    imgSpec(ref),
			Command:  []string{"/bin/sleep", "100000"},
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			}},
		}, cfg)
		t = mark("create", t)
		if err == nil {
			err = on.RS.StartContainer(ctx, ctr)
		}
		mark("start", t)
		return time.Since(start), ctr, err
	}
	startPod := func(i int) (time.Duration, string, error) { return startOn(d, i) }
	removeAll := func() {
		for _, d := range []*Daemon{d, base} {
			if d == nil {
				continue
			}
			pods, _ := d.RS.ListPodSandbox(ctx, nil)
			for _, p := range pods {
				if err := d.RS.RemovePodSandbox(ctx, p.Id); err != nil {
					b.Error(err)
				}
			}
		}
	}

	b.ResetTimer()
	// Serial, interleaved with the floor so both see the same machine.
	var ours, floor, baseSerial []time.Duration
	var ctrs []string
	for i := 0; i < serialPods; i++ {
		dt, ctr, err := startPod(i)
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, dt)
		ctrs = append(ctrs, ctr)
		floor = append(floor, f.run(b, i))
		if base != nil {
			dt, _, err := startOn(base, i)
			if err != nil {
				b.Fatalf("baseline: %v", err)
			}
			baseSerial = append(baseSerial, dt)
		}
	}
	pss := monitorPSS(b, d, ctrs)
	f.cleanup(b)
	removeAll()

	// Burst: 50 pods, 10 in flight; then the floor the same way.
	burstStart, burstCPU := time.Now(), processCPU(b, d.cmd.Process.Pid)
	burst := parallel(b, burstPods, burstWidth, func(i int) time.Duration {
		dt, _, err := startPod(1000 + i)
		if err != nil {
			b.Error(err)
		}
		return dt
	})
	burstWall := time.Since(burstStart)
	// The daemon's own CPU per pod of the burst (runc's and the monitors' are theirs).
	burstCPU = processCPU(b, d.cmd.Process.Pid) - burstCPU
	// kubelet polls ListContainerStats every few seconds: time it with the burst's pods
	// running (the first call fills the writable-layer cache).
	var listStats []time.Duration
	for i := 0; i < 51; i++ {
		start := time.Now()
		st, err := d.RS.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
		if err != nil || len(st) != burstPods {
			b.Fatalf("ListContainerStats: %d stats, %v", len(st), err)
		}
		if i > 0 {
			listStats = append(listStats, time.Since(start))
		}
	}
	removeAll()
	var baseBurst []time.Duration
	var baseBurstWall, baseBurstCPU time.Duration
	if base != nil {
		start, cpu := time.Now(), processCPU(b, base.cmd.Process.Pid)
		baseBurst = parallel(b, burstPods, burstWidth, func(i int) time.Duration {
			dt, _, err := startOn(base, 1000+i)
			if err != nil {
				b.Error(err)
			}
			return dt
		})
		baseBurstWall = time.Since(start)
		baseBurstCPU = processCPU(b, base.cmd.Process.Pid) - cpu
		removeAll()
	}
	burstFloorStart := time.Now()
	burstFloor := parallel(b, burstPods, burstWidth, func(i int) time.Duration { return f.run(b, 1000+i) })
	burstFloorWall := time.Since(burstFloorStart)
	f.cleanup(b)
	b.StopTimer()

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(pct(ours, 50)), "serial-p50-ms")
	b.ReportMetric(ms(pct(ours, 99)), "serial-p99-ms")
	b.ReportMetric(ms(pct(floor, 50)), "floor-p50-ms")
	b.ReportMetric(ms(pct(floor, 99)), "floor-p99-ms")
	b.ReportMetric(float64(pct(ours, 50))/float64(pct(floor, 50)), "serial-p50-ratio")
	b.ReportMetric(ms(pct(burst, 50)), "burst-p50-ms")
	b.ReportMetric(ms(pct(burst, 99)), "burst-p99-ms")
	b.ReportMetric(ms(pct(burstFloor, 50)), "burst-floor-p50-ms")
	b.ReportMetric(float64(pct(burst, 50))/float64(pct(burstFloor, 50)), "burst-p50-ratio")
	// Throughput of the whole burst, as the table gives it (pods/s).
	b.ReportMetric(burstPods/burstWall.Seconds(), "burst-pods/s")
	b.ReportMetric(burstPods/burstFloorWall.Seconds(), "burst-floor-pods/s")
	b.ReportMetric(pss, "monitor-pss-KiB/ctr")
	b.ReportMetric(float64(burstCPU.Microseconds())/1000/burstPods, "burst-daemon-cpu-ms/pod")
	b.ReportMetric(ms(pct(listStats, 50)), "list-container-stats-50-p50-ms")
	if base != nil {
		b.ReportMetric(ms(pct(baseSerial, 50)), "baseline-serial-p50-ms")
		b.ReportMetric(float64(pct(baseSerial, 50))/float64(pct(floor, 50)), "baseline-serial-p50-ratio")
		b.ReportMetric(burstPods/baseBurstWall.Seconds(), "baseline-burst-pods/s")
		b.ReportMetric(ms(pct(baseBurst, 50)), "baseline-burst-p50-ms")
		b.ReportMetric(float64(baseBurstCPU.Microseconds())/1000/burstPods, "baseline-burst-daemon-cpu-ms/pod")
	}
	for _, name := range []string{"run", "create", "start"} {
		b.ReportMetric(ms(pct(phases[name][:serialPods], 50)), "serial-"+name+"-p50-ms")
	}
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	idx := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, idx-1))]
}

func parallel(b *testing.B, n, width int, f func(int) time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = f(i)
		}()
	}
	wg.Wait()
	return out
}

// monitorPSS is the mean proportional set size, in KiB, of the monitors of ctrs.
func monitorPSS(b *testing.B, d *Daemon, ctrs []string) float64 {
	var total float64
	for _, id := range ctrs {
		resp, err := d.RS.ContainerStatus(b.Context(), id, true)
		if err != nil {
			b.Fatal(err)
		}
		var info struct {
			Status struct {
				MonitorPid int `json:"monitor_pid"`
			} `json:"status"`
		}
		_ = json.Unmarshal([]byte(resp.Info["info"]), &info)
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", info.Status.MonitorPid))
		if err != nil {
			b.Fatalf("monitor of %s: %v", id, err)
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(l, "Pss:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				total += kb
			}
		}
	}
	return total / float64(len(ctrs))
}

// floor starts containers the cheapest way there is: overlay mount of the image's rootfs
// and runc create + start, no CRI, no daemon.
type floor struct {
	dir    string
	lower  string
	mu     sync.Mutex
	mounts []string
	ids    []string
	// defaultSpec is `runc spec`'s output.
	defaultSpec []byte
}

func newFloor(b *testing.B, layer Layer) *floor {
	dir := b.TempDir()
	f := &floor{dir: dir, lower: filepath.Join(dir, "lower")}
	// runc's state in a tmpfs, as its default root /run/runc is (and the daemon's run root).
	mountTmpfs(b, filepath.Join(dir, "runc"))
	// Registered after the tmpfs, so it runs before the unmount, even after a Fatal.
	b.Cleanup(func() { f.cleanup(b) })
	tr := tar.NewReader(bytes.NewReader(layerTar(b, layer)))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		p := filepath.Join(f.lower, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			_ = os.MkdirAll(p, os.FileMode(h.Mode))
		case tar.TypeSymlink:
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			_ = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			data, _ := io.ReadAll(tr)
			if err := os.WriteFile(p, data, os.FileMode(h.Mode)); err != nil {
				b.Fatal(err)
			}
		}
	}
	return f
}

func (f *floor) run(b *testing.B, i int) time.Duration {
	id := fmt.Sprintf("rtshimd-floor-%d-%d", os.Getpid(), i)
	base := filepath.Join(f.dir, id)
	for _, d := range []string{"upper", "work", "rootfs"} {
		_ = os.MkdirAll(filepath.Join(base, d), 0o755)
	}
	// The floor is raw runc with its own default spec (`runc spec`), as a person would
	// run it: the same mounts, masked paths and devices a container needs, no CRI.
	spec := f.spec(b)
	spec.Process.Args = []string{"/bin/sleep", "100000"}
	spec.Process.Terminal = false
	spec.Root = &specs.Root{Path: "rootfs"}
	spec.Linux.CgroupsPath = "/" + cgroupRoot + "/floor/" + id
	cfg, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(base, "config.json"), cfg, 0o644); err != nil {
		b.Fatal(err)
	}
	root := filepath.Join(f.dir, "runc")
	start := time.Now()
	rootfs := filepath.Join(base, "rootfs")
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", f.lower, filepath.Join(base, "upper"), filepath.Join(base, "work"))
	if err := syscall.Mount("overlay", rootfs, "overlay", 0, opts); err != nil {
		b.Fatal(err)
	}
	devnull, _ := os.Open(os.DevNull)
	create := exec.Command("runc", "--root", root, "create", "--bundle", base, id)
	create.Stdin, create.Stdout, create.Stderr = devnull, devnull, devnull
	if err := create.Run(); err != nil {
		b.Fatalf("runc create: %v", err)
	}
	if out, err := exec.Command("runc", "--root", root, "start", id).CombinedOutput(); err != nil {
		b.Fatalf("runc start: %v %s", err, out)
	}
	dt := time.Since(start)
	devnull.Close()
	f.mu.Lock()
	f.mounts, f.ids = append(f.mounts, rootfs), append(f.ids, id)
	f.mu.Unlock()
	return dt
}

// spec returns a fresh copy of `runc spec`'s default configuration.
func (f *floor) spec(b *testing.B) *specs.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.defaultSpec == nil {
		dir := filepath.Join(f.dir, "runc-spec")
		_ = os.MkdirAll(dir, 0o755)
		cmd := exec.Command("runc", "spec")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("runc spec: %v %s", err, out)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			b.Fatal(err)
		}
		f.defaultSpec = raw
	}
	var s specs.Spec
	if err := json.Unmarshal(f.defaultSpec, &s); err != nil {
		b.Fatal(err)
	}
	return &s
}

func (f *floor) cleanup(b *testing.B) {
	root := filepath.Join(f.dir, "runc")
	for _, id := range f.ids {
		_ = exec.Command("runc", "--root", root, "delete", "--force", id).Run()
	}
	for _, m := range f.mounts {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	f.ids, f.mounts = nil, nil
}
