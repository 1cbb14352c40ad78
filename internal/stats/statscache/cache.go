// Package statscache keeps the latest usage reading of each container and pod, with the
// CPU rate between consecutive readings, and the collector that takes those readings in
// the background once per period, spread over it. It knows nothing of cgroups, containers
// or pods: what a reading holds, which units there are and how one is read are the
// caller's.
package statscache

import (
	"sync"
	"time"
)

// Reading is one reading of a unit: when it was taken, the unit's cumulative CPU time
// (HasCPU false where it could not be read) and the rest of it.
type Reading[V any] struct {
	At     time.Time
	CPU    uint64 // nanoseconds
	HasCPU bool
	Value  V
}

// Entry is a kept reading and the unit's CPU rate: the average of its CPU time over the
// interval between two readings at least the cache's rate window apart (0 until there
// are two).
type Entry[V any] struct {
	Reading[V]
	NanoCores uint64
}

type entry[V any] struct {
	Entry[V]
	base Reading[V] // the reading the next rate is measured from
}

// Cache keeps the latest reading of each unit by key. The zero value is ready; it is safe
// for concurrent use.
type Cache[V any] struct {
	mu     sync.Mutex
	m      map[string]*entry[V]
	window time.Duration
}

// SetRateWindow sets the shortest interval a rate is measured over. A reading closer
// than that to the one the last rate was measured from keeps the last rate: two calls a
// few milliseconds apart (kubelet asks for pod stats and container stats together) would
// otherwise report the CPU of those milliseconds.
func (c *Cache[V]) SetRateWindow(d time.Duration) {
	c.mu.Lock()
	c.window = d
	c.mu.Unlock()
}

// RateWindow is the rate window for a collection period: half the period, at most one
// second; one second when readings are taken on demand (period 0).
func RateWindow(period time.Duration) time.Duration {
	if period <= 0 || period >= 2*time.Second {
		return time.Second
	}
	return period / 2
}

// Put keeps r as key's latest reading and returns it with the rate, measured from the
// last reading at least the rate window older (the rate is 0 until there is one).
func (c *Cache[V]) Put(key string, r Reading[V]) Entry[V] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*entry[V]{}
	}
	e, ok := c.m[key]
	if !ok {
		e = &entry[V]{base: r}
		c.m[key] = e
		e.Entry = Entry[V]{Reading: r}
		return e.Entry
	}
	if r.At.Before(e.At) {
		// A reading taken before the kept one, finished after it: the kept one is newer.
		return e.Entry
	}
	rate := e.NanoCores
	if dt := r.At.Sub(e.base.At); dt >= c.window && dt > 0 {
		rate = 0
		if r.HasCPU && e.base.HasCPU && r.CPU >= e.base.CPU {
			rate = uint64(float64(r.CPU-e.base.CPU) / dt.Seconds())
		}
		e.base = r
	} else if !r.HasCPU {
		rate = 0
	}
	e.Entry = Entry[V]{Reading: r, NanoCores: rate}
	return e.Entry
}

// Get returns key's latest reading.
func (c *Cache[V]) Get(key string) (Entry[V], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return Entry[V]{}, false
	}
	return e.Entry, true
}

// Fresh returns key's latest reading if it is at most maxAge old at now.
func (c *Cache[V]) Fresh(key string, now time.Time, maxAge time.Duration) (Entry[V], bool) {
	e, ok := c.Get(key)
	if !ok || now.Sub(e.At) > maxAge {
		return Entry[V]{}, false
	}
	return e, true
}

// Delete forgets key: its next reading starts a new rate.
func (c *Cache[V]) Delete(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

// Keep forgets every key for which keep is false.
func (c *Cache[V]) Keep(keep func(key string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if !keep(k) {
			delete(c.m, k)
		}
	}
}

// Len is the number of keys kept.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
