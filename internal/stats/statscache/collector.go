package statscache

import (
	"context"
	"hash/fnv"
	"sort"
	"sync"
	"time"
)

// Collector reads every unit once per period, one at a time. Each unit has a fixed place
// in the period (a hash of its key), so readings of a unit are one period apart whatever
// units come and go, and the reads of a pass are spread over the period rather than
// taken in one burst. A pass lists the units when it begins: a unit that appears during
// it is read from its next pass (until then its callers read it on demand). With no
// units a pass reads nothing. Period 0 reads nothing: every reading is on demand.
type Collector struct {
	units func() []string
	read  func(key string)

	mu     sync.Mutex
	period time.Duration
	reset  chan struct{} // the period changed

	// passes counts the passes begun, for tests.
	passes int
}

// NewCollector returns a collector of the units units lists, each read by read, every
// period (0: none). Run starts it.
func NewCollector(period time.Duration, units func() []string, read func(key string)) *Collector {
	return &Collector{units: units, read: read, period: max(period, 0), reset: make(chan struct{}, 1)}
}

// Period is the collection period (0: readings are taken on demand).
func (c *Collector) Period() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.period
}

// SetPeriod changes the period; a running pass ends and the next one begins at once.
func (c *Collector) SetPeriod(d time.Duration) {
	c.mu.Lock()
	changed := c.period != max(d, 0)
	c.period = max(d, 0)
	c.mu.Unlock()
	if changed {
		select {
		case c.reset <- struct{}{}:
		default:
		}
	}
}

// Passes is how many passes have begun.
func (c *Collector) Passes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.passes
}

// offset is key's place in a period.
func offset(key string, period time.Duration) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return time.Duration(h.Sum64() % uint64(period))
}

// Run collects until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// sleepUntil waits for t; false when ctx ended or the period changed.
	sleepUntil := func(t time.Time) bool {
		d := time.Until(t)
		if d <= 0 {
			select {
			case <-ctx.Done():
				return false
			case <-c.reset:
				return false
			default:
				return true
			}
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-c.reset:
			if !timer.Stop() {
				<-timer.C
			}
			return false
		case <-timer.C:
			return true
		}
	}
	var start time.Time
	for ctx.Err() == nil {
		period := c.Period()
		if period == 0 {
			select {
			case <-ctx.Done():
			case <-c.reset:
			}
			start = time.Time{}
			continue
		}
		// Passes begin one period apart; one that ran past its period (more to read
		// than a period holds) is followed by the next at once.
		now := time.Now()
		if start.IsZero() || now.Sub(start) > period {
			start = now
		}
		c.mu.Lock()
		c.passes++
		c.mu.Unlock()
		keys := c.units()
		offs := make([]time.Duration, len(keys))
		for i, k := range keys {
			offs[i] = offset(k, period)
		}
		sort.Sort(byOffset{keys, offs})
		ok := true
		for i, k := range keys {
			if ok = sleepUntil(start.Add(offs[i])); !ok {
				break
			}
			c.read(k)
		}
		if ok {
			ok = sleepUntil(start.Add(period))
		}
		if ok {
			start = start.Add(period)
		} else {
			start = time.Time{}
		}
	}
}

type byOffset struct {
	keys []string
	offs []time.Duration
}

func (b byOffset) Len() int           { return len(b.keys) }
func (b byOffset) Less(i, j int) bool { return b.offs[i] < b.offs[j] }
func (b byOffset) Swap(i, j int) {
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
	b.offs[i], b.offs[j] = b.offs[j], b.offs[i]
}
