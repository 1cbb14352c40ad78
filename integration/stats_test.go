//go:build integration

package integration

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// A container that burns CPU and holds memory shows it in its stats and its pod's, read
// from the cgroups (v1 on this machine; the v2 parser is unit-tested).
func TestContainerAndPodStats(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	podID, hog, idle := hogAndIdle(e, "stats", "runc")

	st, err := e.d.RS.ContainerStats(ctx, hog)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetCpu().GetUsageCoreNanoSeconds().GetValue(); got < uint64(time.Second) {
		t.Errorf("hog CPU usage %v, want at least 1s after 3s of a busy loop", time.Duration(got))
	}
	if ws := st.GetMemory().GetWorkingSetBytes().GetValue(); ws < 35<<20 {
		t.Errorf("hog working set %d bytes, want at least 35 MiB", ws)
	}
	if st.GetWritableLayer().GetInodesUsed() == nil || st.GetAttributes().GetId() != hog {
		t.Errorf("hog stats: %v", st)
	}
	// PSI, as kubelet's summary API takes it from the runtime: this host's kernel has it
	// in the unified hierarchy of its hybrid mount, where runc places containers too.
	psi := func(st *runtimeapi.ContainerStats) [3]*runtimeapi.PsiStats {
		return [3]*runtimeapi.PsiStats{st.GetCpu().GetPsi(), st.GetMemory().GetPsi(), st.GetIo().GetPsi()}
	}
	before := psi(st)
	for i, p := range before {
		if p.GetSome() == nil || p.GetFull() == nil {
			t.Errorf("hog stats: %s PSI %v, want some and full", [3]string{"CPU", "memory", "IO"}[i], p)
		}
	}
	// A second reading gives a rate: about one core (the busy loop), at least half of one.
	time.Sleep(time.Second)
	st, _ = e.d.RS.ContainerStats(ctx, hog)
	if nc := st.GetCpu().GetUsageNanoCores().GetValue(); nc < 5e8 {
		t.Errorf("hog nano-cores %d, want at least half a core", nc)
	}
	for i, p := range psi(st) {
		if p.GetSome().GetTotal() < before[i].GetSome().GetTotal() {
			t.Errorf("%s PSI went back: some total %d after %d", [3]string{"CPU", "memory", "IO"}[i], p.GetSome().GetTotal(), before[i].GetSome().GetTotal())
		}
	}
	all, err := e.d.RS.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{PodSandboxId: podID})
	if err != nil || len(all) != 2 {
		t.Fatalf("ListContainerStats(pod): %d, %v", len(all), err)
	}
	one, _ := e.d.RS.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"ctr": "idle"}})
	if len(one) != 1 || one[0].GetAttributes().GetId() != idle {
		t.Errorf("ListContainerStats(label ctr=idle) = %v", one)
	}

	ps, err := e.d.RS.PodSandboxStats(ctx, podID)
	if err != nil {
		t.Fatal(err)
	}
	l := ps.GetLinux()
	if l.GetCpu().GetUsageCoreNanoSeconds().GetValue() < uint64(time.Second) || l.GetMemory().GetWorkingSetBytes().GetValue() < 35<<20 {
		t.Errorf("pod stats do not include the hog: cpu %v mem %v", l.GetCpu(), l.GetMemory())
	}
	if len(l.GetContainers()) != 2 || l.GetProcess().GetProcessCount().GetValue() < 2 {
		t.Errorf("pod containers %d processes %v", len(l.GetContainers()), l.GetProcess())
	}
	pods, err := e.d.RS.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{})
	if err != nil || len(pods) != 1 || pods[0].GetAttributes().GetId() != podID {
		t.Fatalf("ListPodSandboxStats: %v, %v", pods, err)
	}
	// The pod's containers, each as ListContainerStats has it (sent as encoded for it).
	inPod := map[string]*runtimeapi.ContainerStats{}
	for _, cs := range pods[0].GetLinux().GetContainers() {
		inPod[cs.GetAttributes().GetId()] = cs
	}
	if len(inPod) != 2 || inPod[idle] == nil || inPod[hog].GetMemory().GetWorkingSetBytes().GetValue() < 35<<20 ||
		inPod[hog].GetCpu().GetUsageCoreNanoSeconds().GetValue() < uint64(time.Second) || inPod[hog].GetAttributes().GetMetadata().GetName() == "" {
		t.Errorf("ListPodSandboxStats' containers: %v", pods[0].GetLinux().GetContainers())
	}

	// The same readings as cAdvisor-style metrics for kubelet.
	descs, err := e.d.RS.ListMetricDescriptors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for _, d := range descs {
		keys[d.Name] = len(d.LabelKeys)
	}
	pms, err := e.d.RS.ListPodSandboxMetrics(ctx)
	if err != nil || len(pms) != 1 || pms[0].PodSandboxId != podID || len(pms[0].ContainerMetrics) != 2 {
		t.Fatalf("ListPodSandboxMetrics: %v, %v", pms, err)
	}
	for _, cm := range pms[0].ContainerMetrics {
		for _, m := range cm.Metrics {
			if n, ok := keys[m.Name]; !ok || n != len(m.LabelValues) {
				t.Errorf("metric %s: %d label values, descriptor has %d (known %v)", m.Name, len(m.LabelValues), n, ok)
			}
			if cm.ContainerId == hog && m.Name == "container_memory_working_set_bytes" && m.Value.GetValue() < 35<<20 {
				t.Errorf("hog working set metric %d", m.Value.GetValue())
			}
			if cm.ContainerId == hog && m.Name == "container_cpu_usage_seconds_total" && m.Value.GetValue() < 1 {
				t.Errorf("hog cpu seconds metric %d", m.Value.GetValue())
			}
		}
	}

	crictl := toolPath(t, "crictl")
	for _, args := range [][]string{{"stats", "--id", hog}, {"statsp", "--id", podID}, {"info"}} {
		out, err := exec.Command(crictl, append([]string{"--runtime-endpoint", "unix://" + e.d.Socket}, args...)...).CombinedOutput()
		want := map[string]string{"stats": hog[:13], "statsp": podID[:13], "info": "handlers"}[args[0]]
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("crictl %v: %v\n%s", args, err, out)
		}
	}
	if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
}

// runsc's containers have no host processes of their own; their usage comes from gVisor
// (`runsc events --stats`), per container: the busy one shows its CPU, the idle one next
// to it does not; both have a memory reading.
func TestRunscContainerStats(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	_, hog, idle := hogAndIdle(e, "stats-runsc", "runsc")
	hs, err := e.d.RS.ContainerStats(ctx, hog)
	if err != nil {
		t.Fatal(err)
	}
	if got := hs.GetCpu().GetUsageCoreNanoSeconds().GetValue(); got < uint64(time.Second) {
		t.Errorf("runsc hog CPU usage %v, want at least 1s after 3s of a busy loop", time.Duration(got))
	}
	// gVisor accounts memory in its own kernel (its per-container memory cgroup), which
	// does not count what the host sees (here ~7 MiB for a shell holding 40 MB): only a
	// reading is asserted.
	if ws := hs.GetMemory().GetWorkingSetBytes().GetValue(); ws == 0 {
		t.Errorf("runsc hog working set %d bytes, want gVisor's reading", ws)
	}
	is, err := e.d.RS.ContainerStats(ctx, idle)
	if err != nil {
		t.Fatal(err)
	}
	if got, hog := is.GetCpu().GetUsageCoreNanoSeconds().GetValue(), hs.GetCpu().GetUsageCoreNanoSeconds().GetValue(); got > hog/4 {
		t.Errorf("runsc idle container CPU usage %v next to the hog's %v, want its own (little or none), not the pod's", time.Duration(got), time.Duration(hog))
	}
	if ws := is.GetMemory().GetWorkingSetBytes().GetValue(); ws == 0 {
		t.Errorf("runsc idle container working set %d bytes, want gVisor's reading", ws)
	}
}

// hogAndIdle runs a pod with two containers and lets them run 3 s: "hog" holds ~40 MB in
// its shell's memory and then spins; "idle" sleeps.
func hogAndIdle(e *containerEnv, name, handler string) (podID, hog, idle string) {
	podID, pod := e.pod(name, handler)
	hog = e.run(podID, pod, e.ctrConfig("hog", "sh", "-c", "x=$(head -c 40000000 /dev/zero | tr '\\0' a); while true; do :; done"))
	idle = e.run(podID, pod, e.ctrConfig("idle", "sleep", "1000"))
	time.Sleep(3 * time.Second)
	return podID, hog, idle
}

// Disk usage comes from a background walk of the store, never from a walk on the request
// path: a container that writes many files shows them within the collector's interval
// (in a directory named merged, as a rootfs's mount point is: it is the container's own),
// and every reading carries the time it was taken, never older than that interval (plus
// one walk).
func TestDiskUsageFromCollector(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	podID, pod := e.pod("disk-usage", "runc")
	id := e.run(podID, pod, e.ctrConfig("writer", "sh", "-c", "mkdir -p /many/merged && cd /many/merged && seq 1 3000 | while read i; do echo $i > f$i; done; sleep 1000"))
	var st *runtimeapi.ContainerStats
	waitFor(t, 60*time.Second, "the writable layer's usage to show the 3000 files", func() (bool, string) {
		var err error
		st, err = e.d.RS.ContainerStats(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return st.GetWritableLayer().GetInodesUsed().GetValue() >= 3000, fmt.Sprint(st.GetWritableLayer().GetInodesUsed().GetValue())
	})
	if age := time.Since(time.Unix(0, st.GetWritableLayer().GetTimestamp())); age < 0 || age > 15*time.Second {
		t.Errorf("writable layer reading is %v old, past the collector's 10 s interval", age)
	}
	fs, err := e.d.IS.ImageFsInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range append(fs.GetImageFilesystems(), fs.GetContainerFilesystems()...) {
		if age := time.Since(time.Unix(0, u.GetTimestamp())); age < 0 || age > 15*time.Second || u.GetUsedBytes().GetValue() == 0 {
			t.Errorf("ImageFsInfo %s: %d bytes, %v old", u.GetFsId().GetMountpoint(), u.GetUsedBytes().GetValue(), age)
		}
	}
}

// With stats.collection_period = "1s" the List calls answer from the background
// collector: each answer's timestamps are the time its values were read, never older
// than the period and a tenth when the call was made, and they advance about a period at a
// time however often the list is asked for; memory a container takes shows within two
// periods; nano-cores come from the collector's consecutive readings; a container that
// starts is in the list at once (read at the call) and one removed is gone at once.
func TestStatsFromCollector(t *testing.T) {
	const period = time.Second
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) { c.Stats.CollectionPeriod.Duration = time.Second }))
	ctx := ctxT(t)
	podID, pod := e.pod("collector", "runc")
	inPod := &runtimeapi.ContainerStatsFilter{PodSandboxId: podID}
	byID := func() map[string]*runtimeapi.ContainerStats {
		t.Helper()
		l, err := e.d.RS.ListContainerStats(ctx, inPod)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*runtimeapi.ContainerStats{}
		for _, s := range l {
			out[s.GetAttributes().GetId()] = s
		}
		return out
	}
	// Takes ~40 MB once told to (a file in its rootfs), and spins.
	grow := e.run(podID, pod, e.ctrConfig("grow", "sh", "-c", "while [ ! -e /go ]; do sleep 0.1; done; x=$(head -c 40000000 /dev/zero | tr '\\0' a); touch /done; while true; do :; done"))
	if byID()[grow] == nil {
		t.Fatal("a started container is not in ListContainerStats at once")
	}

	// Six periods of asking five times a period.
	var stamps []int64
	calls := 0
	for end := time.Now().Add(6 * period); time.Now().Before(end); time.Sleep(period / 5) {
		asked := time.Now()
		st := byID()[grow]
		calls++
		ts := st.GetCpu().GetTimestamp()
		if age := asked.Sub(time.Unix(0, ts)); age > period+period/10 {
			t.Errorf("container stats read %v before the call, past the period and a tenth", age)
		}
		if st.GetMemory().GetTimestamp() != ts {
			t.Errorf("memory read at %d, cpu at %d", st.GetMemory().GetTimestamp(), ts)
		}
		if n := len(stamps); n > 0 && ts < stamps[n-1] {
			t.Errorf("timestamp went back: %d after %d", ts, stamps[n-1])
		}
		if n := len(stamps); n == 0 || ts != stamps[n-1] {
			stamps = append(stamps, ts)
		}
		// Not by id: a list naming a pod (crictl statsp --id) is read at the call.
		ps, err := e.d.RS.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{})
		if err != nil || len(ps) != 1 || ps[0].GetAttributes().GetId() != podID {
			t.Fatalf("ListPodSandboxStats: %v, %v", ps, err)
		}
		if age := asked.Sub(time.Unix(0, ps[0].GetLinux().GetCpu().GetTimestamp())); age > period+period/10 {
			t.Errorf("pod stats read %v before the call, past the period and a tenth", age)
		}
	}
	// About a period apart on average: a collector late on a loaded machine has a call
	// read at the call, and its own reading follows soon after.
	if n := len(stamps); n < 4 || n > calls/2 {
		t.Errorf("%d calls saw %d readings, want about one a period", calls, n)
	} else if mean := time.Duration(stamps[n-1]-stamps[0]) / time.Duration(n-1); mean < period/2 || mean > period*3/2 {
		t.Errorf("readings %v apart on average, want about %v", mean, period)
	}

	if _, code := e.exec(grow, "touch", "/go"); code != 0 {
		t.Fatal("touch /go failed")
	}
	if _, code := e.exec(grow, "sh", "-c", "while [ ! -e /done ]; do sleep 0.05; done"); code != 0 {
		t.Fatal("waiting for /done failed")
	}
	taken := time.Now()
	waitFor(t, 2*period+period/2, "the working set to show 35 MiB within two periods", func() (bool, string) {
		ws := byID()[grow].GetMemory().GetWorkingSetBytes().GetValue()
		return ws >= 35<<20, fmt.Sprint(ws)
	})
	t.Logf("the working set showed %v after the memory was taken", time.Since(taken))
	// It spins now. Its nano-cores are the CPU between consecutive readings: compared with
	// two the test sees (its share of a loaded machine's cores varies, so the rate is
	// compared with the readings, not with a core).
	var seen []*runtimeapi.CpuUsage // the readings seen, in order
	waitFor(t, 5*period, "two readings after the one there is", func() (bool, string) {
		c := byID()[grow].GetCpu()
		if n := len(seen); n == 0 || c.GetTimestamp() != seen[n-1].GetTimestamp() {
			seen = append(seen, c)
		}
		return len(seen) >= 3, fmt.Sprint(len(seen))
	})
	prev, cur := seen[len(seen)-2], seen[len(seen)-1]
	want := float64(cur.GetUsageCoreNanoSeconds().GetValue()-prev.GetUsageCoreNanoSeconds().GetValue()) / time.Duration(cur.GetTimestamp()-prev.GetTimestamp()).Seconds()
	if nc := float64(cur.GetUsageNanoCores().GetValue()); want < 5e7 || nc < want*0.75 || nc > want*1.25 {
		t.Errorf("spinning container at %.0f nano-cores; its two last readings say %.0f", nc, want)
	}

	other := e.run(podID, pod, e.ctrConfig("other", "sleep", "1000"))
	if s := byID(); s[other] == nil || s[grow] == nil {
		t.Errorf("after a second start: %d containers listed, want both", len(s))
	}
	if err := e.d.RS.StopContainer(ctx, grow, 0); err != nil {
		t.Fatal(err)
	}
	if s := byID(); s[grow] != nil || s[other] == nil {
		t.Errorf("a stopped container listed (or the other one not): %v", s)
	}
	if err := e.d.RS.RemoveContainer(ctx, grow); err != nil {
		t.Fatal(err)
	}
	if s := byID(); s[grow] != nil || len(s) != 1 {
		t.Errorf("a removed container listed: %v", s)
	}

	// A reload to "0" applies at once, with no restart: every list reads at the call.
	e.d.Cfg.Stats.CollectionPeriod.Duration = 0
	writeConfigFile(t, e.d, configTOML(t, e.d.Cfg))
	if out, err := rtshimdReload(t, e.d); err != nil || strings.Contains(out, "restart") {
		t.Fatalf("rtshimd reload: %v\n%s", err, out)
	}
	for i := 0; i < 3; i++ {
		asked := time.Now()
		if ts := time.Unix(0, byID()[other].GetCpu().GetTimestamp()); ts.Before(asked) {
			t.Errorf("after the reload to \"0\": a reading from %v before the call", asked.Sub(ts))
		}
		time.Sleep(period / 2)
	}
}
