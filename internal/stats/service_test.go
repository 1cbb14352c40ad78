package stats

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/container/containertest"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/protocache"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
)

// halfCore is a runtime whose containers have each used half a core since it began, and
// which counts the readings taken.
type halfCore struct {
	kind.Runtime
	start time.Time
	mu    sync.Mutex
	reads map[string]int
}

func (h *halfCore) Stats(_ context.Context, t kind.Task, _ string, _ cgstats.Scope) (cgstats.Stats, error) {
	h.mu.Lock()
	h.reads[t.ID]++
	h.mu.Unlock()
	return cgstats.Stats{CPUUsageNanos: uint64(time.Since(h.start)) / 2, WorkingSet: 1 << 20}, nil
}

func (h *halfCore) count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reads[id]
}

// statsEnv is a node of fakes (containertest) with one ready pod, whose runtime reports
// half a core for each container, and a Service on it.
type statsEnv struct {
	*containertest.Env
	svc  *Service
	rt   *halfCore
	ctrs *container.Manager
	pod  string
}

// statsService is a statsEnv whose collector runs with period (not at all when run is
// false: every reading then ages).
func statsService(t *testing.T, period time.Duration, run bool) *statsEnv {
	e := containertest.NewEnv(t, kind.PodPlan{PinIPCUTS: true})
	rt := &halfCore{Runtime: e.RT, start: time.Now(), reads: map[string]int{}}
	e.Kind = rt
	pods, ctrs := e.Managers()
	pod, _, err := pods.Run(context.Background(), e.PodConfig("stats"), "")
	if err != nil {
		t.Fatal(err)
	}
	svc := newService(Options{Containers: ctrs, Pods: pods, Period: period}, run)
	t.Cleanup(svc.Close)
	return &statsEnv{Env: e, svc: svc, rt: rt, ctrs: ctrs, pod: pod}
}

// addRunning creates and starts a container and returns its ID.
func (e *statsEnv) addRunning(name string) string {
	e.T.Helper()
	ctx := context.Background()
	id, err := e.ctrs.Create(ctx, e.pod, containertest.CtrConfig(name, "busybox"))
	if err != nil {
		e.T.Fatal(err)
	}
	if err := e.ctrs.Start(ctx, id); err != nil {
		e.T.Fatal(err)
	}
	return id
}

// statsByID decodes a list as a client would (the attributes go out pre-encoded).
func statsByID(l []*runtimeapi.ContainerStats) map[string]*runtimeapi.ContainerStats {
	b, err := proto.Marshal(&runtimeapi.ListContainerStatsResponse{Stats: l})
	if err != nil {
		panic(err)
	}
	var resp runtimeapi.ListContainerStatsResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		panic(err)
	}
	out := map[string]*runtimeapi.ContainerStats{}
	for _, s := range resp.Stats {
		out[s.GetAttributes().GetId()] = s
	}
	return out
}

// encodedCount is the number of containers whose encoded stats are kept.
func (svc *Service) encodedCount() int {
	svc.encMu.Lock()
	defer svc.encMu.Unlock()
	return len(svc.encs)
}

// With a collector, ListStats answers from its readings: a container it has not read yet
// is read at the call; every answer's timestamps are its reading's, never older than the
// period and a tenth; the collector reads each container about once a period however
// often the list is asked for; nano-cores come from its consecutive readings; a container
// that stops or goes is out of the list at once and its reading dropped.
func TestListStatsFromCollector(t *testing.T) {
	const period = 300 * time.Millisecond
	e := statsService(t, period, true)
	m, rt := e.svc, e.rt
	for m.collector.Passes() == 0 {
		time.Sleep(time.Millisecond)
	}
	// Added after the first pass listed its pods: read on demand.
	a := e.addRunning("a")
	before := time.Now()
	st := statsByID(m.ListStats(nil))[a]
	if st == nil || rt.count(a) != 1 {
		t.Fatalf("new container: stats %v after %d readings, want one read at the call", st, rt.count(a))
	}
	if ts := time.Unix(0, st.GetCpu().GetTimestamp()); ts.Before(before) || ts.After(time.Now()) {
		t.Errorf("new container's reading at %v, not during the call (%v)", ts, before)
	}

	calls, stamps := 0, map[int64]bool{}
	for end := time.Now().Add(4 * period); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		asked := time.Now()
		st := statsByID(m.ListStats(nil))[a]
		calls++
		ts := time.Unix(0, st.GetCpu().GetTimestamp())
		stamps[st.GetCpu().GetTimestamp()] = true
		if age := asked.Sub(ts); age > staleAfter(period) {
			t.Errorf("answer %v old, past %v", age, staleAfter(period))
		}
		if st.GetMemory().GetTimestamp() != st.GetCpu().GetTimestamp() {
			t.Errorf("cpu and memory timestamps differ: %v", st)
		}
	}
	// Four periods: four or five readings by the collector (a loaded machine may add a
	// read at a call when one is late), against some thirty calls or more.
	if n := rt.count(a); n > 10 || n > calls/3 || len(stamps) > n {
		t.Errorf("%d calls in 4 periods took %d readings (%d distinct timestamps), want about one a period", calls, n, len(stamps))
	}
	nc := statsByID(m.ListStats(nil))[a].GetCpu().GetUsageNanoCores().GetValue()
	if nc < 4e8 || nc > 6e8 {
		t.Errorf("nano-cores %d, want half a core from the collector's readings", nc)
	}

	e.RT.Exit(a, 0)
	sandboxtest.Await(t, "the exit recorded", func() bool {
		return containertest.CtrState(t, e.ctrs, a).State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	if st := statsByID(m.ListStats(nil))[a]; st != nil {
		t.Errorf("exited container listed: %v", st)
	}
	b := e.addRunning("b")
	if st := statsByID(m.ListStats(nil))[b]; st == nil || rt.count(b) != 1 {
		t.Errorf("new container b: %v, %d readings", st, rt.count(b))
	}
	if err := e.ctrs.Remove(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if st := statsByID(m.ListStats(nil))[b]; st != nil {
		t.Errorf("removed container listed: %v", st)
	}
	waitUntil(t, 3*period, "the readings of stopped and removed containers dropped", func() bool { return m.ctrStats.Len() == 0 })
}

// A kept reading older than the period and a tenth (a collector behind) is not served:
// the list reads it again. A list that names the container, and a single ContainerStats,
// read at the call.
func TestStaleReadingIsReadAgain(t *testing.T) {
	const period = 100 * time.Millisecond
	e := statsService(t, period, false) // no collector running: every reading ages
	m, rt := e.svc, e.rt
	a := e.addRunning("a")
	first := statsByID(m.ListStats(nil))[a].GetCpu().GetTimestamp()
	if again := statsByID(m.ListStats(nil))[a].GetCpu().GetTimestamp(); again != first || rt.count(a) != 1 {
		t.Errorf("fresh reading not served: timestamps %d %d, %d readings", first, again, rt.count(a))
	}
	time.Sleep(staleAfter(period) + 10*time.Millisecond)
	asked := time.Now()
	st := statsByID(m.ListStats(nil))[a]
	if ts := time.Unix(0, st.GetCpu().GetTimestamp()); ts.Before(asked) || rt.count(a) != 2 {
		t.Errorf("stale reading served: read at %v, asked at %v, %d readings", ts, asked, rt.count(a))
	}
	named := statsByID(m.ListStats(&runtimeapi.ContainerStatsFilter{Id: a}))[a]
	if named.GetCpu().GetTimestamp() <= st.GetCpu().GetTimestamp() || rt.count(a) != 3 {
		t.Errorf("a list naming the container (crictl stats ID) not read at the call: %v, %d readings", named, rt.count(a))
	}
	raw, err := m.ContainerStats(a)
	one := statsByID([]*runtimeapi.ContainerStats{raw})[a]
	if err != nil || one.GetCpu().GetTimestamp() <= named.GetCpu().GetTimestamp() || rt.count(a) != 4 {
		t.Errorf("ContainerStats not read at the call: %v, %v, %d readings", one, err, rt.count(a))
	}
}

// With no collector (period 0), every list reads every container, a second reading within
// the rate window keeps the rate of the last, and what a stopped container kept goes at the
// next list.
func TestListStatsOnDemand(t *testing.T) {
	e := statsService(t, 0, true)
	m, rt := e.svc, e.rt
	a := e.addRunning("a")
	m.ListStats(nil)
	time.Sleep(time.Second + 50*time.Millisecond)
	nc := statsByID(m.ListStats(nil))[a].GetCpu().GetUsageNanoCores().GetValue()
	again := statsByID(m.ListStats(nil))[a].GetCpu().GetUsageNanoCores().GetValue()
	if rt.count(a) != 3 || nc < 4e8 || nc > 6e8 || again != nc {
		t.Errorf("on demand: %d readings, nano-cores %d then %d, want 3 readings and half a core twice", rt.count(a), nc, again)
	}
	if m.collector.Passes() != 0 {
		t.Errorf("period 0: %d collector passes", m.collector.Passes())
	}
	// With no collector, the next list past pruneEvery drops what a stopped container and
	// pod kept.
	defer func(d time.Duration) { pruneEvery = d }(pruneEvery)
	pruneEvery = 0
	if err := e.ctrs.Stop(context.Background(), a, 0); err != nil {
		t.Fatal(err)
	}
	m.ListPodStats(nil)
	if _, ok := statsByID(m.ListStats(nil))[a]; ok || m.ctrStats.Len() != 0 || m.encodedCount() != 0 {
		t.Errorf("a stopped container: listed %v, %d readings and %d encodings kept", ok, m.ctrStats.Len(), m.encodedCount())
	}
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after %v: not %s", limit, what)
		}
	}
}

// encodedByID decodes ListStatsEncoded's items as a client decodes the answer.
func encodedByID(items [][]byte) map[string]*runtimeapi.ContainerStats {
	resp := &runtimeapi.ListContainerStatsResponse{}
	protocache.SetRepeated(resp, "stats", items)
	b, err := proto.Marshal(resp)
	if err != nil {
		panic(err)
	}
	var got runtimeapi.ListContainerStatsResponse
	if err := proto.Unmarshal(b, &got); err != nil {
		panic(err)
	}
	return statsByID(got.Stats)
}

// ListStatsEncoded sends what ListStats does, each item encoded once per reading: a list
// between two readings reuses the bytes, a new reading (or a read at the call, with no
// collector) is encoded afresh.
func TestListStatsEncodedPerReading(t *testing.T) {
	const period = 200 * time.Millisecond
	e := statsService(t, period, false) // no collector running: the reading ages
	m, rt := e.svc, e.rt
	a := e.addRunning("a")
	first := m.ListStatsEncoded(nil)
	again := m.ListStatsEncoded(nil)
	if len(first) != 1 || len(again) != 1 || &first[0][0] != &again[0][0] || rt.count(a) != 1 {
		t.Fatalf("a list within the period did not reuse the encoding (%d readings)", rt.count(a))
	}
	got := encodedByID(first)[a]
	want := statsByID(m.ListStats(nil))[a]
	if got == nil || !proto.Equal(got, want) {
		t.Errorf("encoded item %v, want ListStats' %v", got, want)
	}
	time.Sleep(staleAfter(period) + 10*time.Millisecond)
	later := m.ListStatsEncoded(nil)
	st := encodedByID(later)[a]
	if &later[0][0] == &first[0][0] || st.GetCpu().GetTimestamp() <= got.GetCpu().GetTimestamp() || rt.count(a) != 2 {
		t.Errorf("a new reading was not encoded afresh: %v after %v, %d readings", st, got, rt.count(a))
	}

	e0 := statsService(t, 0, false)
	m0, rt0 := e0.svc, e0.rt
	b := e0.addRunning("b")
	one, two := m0.ListStatsEncoded(nil), m0.ListStatsEncoded(nil)
	if encodedByID(two)[b].GetCpu().GetTimestamp() <= encodedByID(one)[b].GetCpu().GetTimestamp() || rt0.count(b) != 2 {
		t.Errorf("with no collector each list did not read and encode afresh (%d readings)", rt0.count(b))
	}
}
