package statscache

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

func at(base time.Time, d time.Duration, cpu uint64) Reading[int] {
	return Reading[int]{At: base.Add(d), CPU: cpu, HasCPU: true}
}

// The rate is the CPU between two consecutive readings at least the window apart; a
// reading closer than that keeps the last rate and the reading it was measured from.
func TestRateFromConsecutiveReadings(t *testing.T) {
	var c Cache[int]
	c.SetRateWindow(time.Second)
	t0 := time.Unix(1000, 0)
	if e := c.Put("a", at(t0, 0, 0)); e.NanoCores != 0 {
		t.Errorf("first reading: rate %d, want 0", e.NanoCores)
	}
	if e := c.Put("a", at(t0, 2*time.Second, 1e9)); e.NanoCores != 5e8 {
		t.Errorf("half a core over 2 s: rate %d", e.NanoCores)
	}
	// 10 ms later (kubelet's second List call): not a rate over 10 ms.
	if e := c.Put("a", at(t0, 2*time.Second+10*time.Millisecond, 1e9+1e7)); e.NanoCores != 5e8 || e.CPU != 1e9+1e7 {
		t.Errorf("reading within the window: rate %d cpu %d, want the last rate and the new reading", e.NanoCores, e.CPU)
	}
	// Measured from the reading at 2 s: 2e9 over 2 s.
	if e := c.Put("a", at(t0, 4*time.Second, 3e9)); e.NanoCores != 1e9 {
		t.Errorf("one core from the last measured reading: rate %d", e.NanoCores)
	}
	// A reading taken before the kept one, stored after it, changes nothing.
	if e := c.Put("a", at(t0, 3*time.Second, 2e9)); !e.At.Equal(t0.Add(4*time.Second)) || e.NanoCores != 1e9 {
		t.Errorf("older reading replaced the kept one: %+v", e)
	}
	// A counter that went back (a new cgroup under the same key) gives no rate.
	if e := c.Put("a", at(t0, 6*time.Second, 5)); e.NanoCores != 0 {
		t.Errorf("counter reset: rate %d, want 0", e.NanoCores)
	}
	// A forgotten key starts over.
	c.Delete("a")
	if _, ok := c.Get("a"); ok {
		t.Fatal("deleted key still kept")
	}
	if e := c.Put("a", at(t0, 8*time.Second, 9e9)); e.NanoCores != 0 {
		t.Errorf("first reading after delete: rate %d, want 0", e.NanoCores)
	}
	if RateWindow(0) != time.Second || RateWindow(10*time.Second) != time.Second || RateWindow(time.Second) != 500*time.Millisecond {
		t.Errorf("RateWindow: %v %v %v", RateWindow(0), RateWindow(10*time.Second), RateWindow(time.Second))
	}
}

// Fresh serves a reading only up to maxAge; Keep drops the keys it is told to.
func TestFreshAndKeep(t *testing.T) {
	var c Cache[int]
	t0 := time.Unix(1000, 0)
	c.Put("a", Reading[int]{At: t0, Value: 7})
	c.Put("b", Reading[int]{At: t0})
	if e, ok := c.Fresh("a", t0.Add(time.Second), time.Second); !ok || e.Value != 7 {
		t.Errorf("reading exactly maxAge old: %v %v", e, ok)
	}
	if _, ok := c.Fresh("a", t0.Add(time.Second+1), time.Second); ok {
		t.Error("reading older than maxAge served")
	}
	if _, ok := c.Fresh("new", t0, time.Hour); ok {
		t.Error("unknown key served")
	}
	c.Keep(func(k string) bool { return k == "b" })
	if _, ok := c.Get("a"); ok || c.Len() != 1 {
		t.Errorf("Keep left %d keys", c.Len())
	}
}

type reads struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (r *reads) read(k string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[string][]time.Time{}
	}
	r.at[k] = append(r.at[k], time.Now())
}

func (r *reads) of(k string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at[k]...)
}

func (r *reads) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.at {
		n += len(v)
	}
	return n
}

func run(t *testing.T, c *Collector) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		c.Run(ctx)
		close(done)
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("collector did not stop")
		}
	}
}

// Each unit is read once per period, a period apart, and the reads of a pass are spread
// over the period, one at a time.
func TestCollectorReadsEachUnitOncePerPeriodSpread(t *testing.T) {
	var keys []string
	for i := 0; i < 40; i++ {
		keys = append(keys, fmt.Sprintf("pod-%d", i))
	}
	var r reads
	var inFlight, most int
	var mu sync.Mutex
	read := func(k string) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		r.read(k)
		mu.Lock()
		inFlight--
		mu.Unlock()
	}
	const period = 400 * time.Millisecond
	c := NewCollector(period, func() []string { return keys }, read)
	stop := run(t, c)
	time.Sleep(5*period + period/2)
	stop()
	for _, k := range keys {
		got := r.of(k)
		// 5.5 periods: 5 or 6 reads (the first pass starts at once).
		if len(got) < 4 || len(got) > 6 {
			t.Errorf("%s read %d times in 5.5 periods", k, len(got))
			continue
		}
		// A period apart on average (a loaded machine may delay one read, and the next
		// is then closer to it).
		if mean := got[len(got)-1].Sub(got[0]) / time.Duration(len(got)-1); mean < period*7/10 || mean > period*3/2 {
			t.Errorf("%s: reads %v apart on average, want about %v", k, mean, period)
		}
	}
	// The first pass's reads span most of the period, not one instant.
	first, last := time.Time{}, time.Time{}
	for _, k := range keys {
		a := r.of(k)[0]
		if first.IsZero() || a.Before(first) {
			first = a
		}
		if a.After(last) {
			last = a
		}
	}
	if span := last.Sub(first); span < period/2 {
		t.Errorf("the first pass's 40 reads span %v, want them spread over the %v period", span, period)
	}
	if most != 1 {
		t.Errorf("%d reads at once, want one at a time", most)
	}
}

// With no units nothing is read; a period of 0 reads nothing until a period is set; a
// unit that appears is read from the next pass; the collector stops with its context.
func TestCollectorIdleAndReload(t *testing.T) {
	var r reads
	var mu sync.Mutex
	var keys []string
	units := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), keys...)
	}
	c := NewCollector(100*time.Millisecond, units, r.read)
	stop := run(t, c)
	time.Sleep(350 * time.Millisecond)
	if n := r.total(); n != 0 {
		t.Errorf("%d reads with no units", n)
	}
	if p := c.Passes(); p < 2 || p > 5 {
		t.Errorf("%d passes in 3.5 periods, want about one per period", p)
	}
	c.SetPeriod(0)
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	keys = []string{"a"}
	mu.Unlock()
	passes := c.Passes()
	time.Sleep(300 * time.Millisecond)
	if n, p := r.total(), c.Passes(); n != 0 || p != passes {
		t.Errorf("period 0: %d reads, %d passes, want none", n, p-passes)
	}
	c.SetPeriod(100 * time.Millisecond)
	time.Sleep(350 * time.Millisecond)
	if n := len(r.of("a")); n < 2 || n > 5 {
		t.Errorf("after SetPeriod(100ms): %d reads of a in 3.5 periods", n)
	}
	stop()
	n := r.total()
	time.Sleep(250 * time.Millisecond)
	if r.total() != n {
		t.Error("reads after the collector stopped")
	}
}
