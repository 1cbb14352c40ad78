package handlers

import (
	"context"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/kind"
)

// Live is the table the daemon serves. Readers get the current table without a lock;
// a reload builds a new table and swaps it in whole, and each row probed after a
// reload is swapped in on its own once its probe ends. Pods never read it after
// RunPodSandbox: they keep a copy of their row.
type Live struct {
	cur atomic.Pointer[Table]

	rts   *Runtimes
	probe Probe

	// mu orders writers: a reload against the probes it started.
	mu  sync.Mutex
	ctx context.Context // ends background probes (daemon shutdown)
	wg  sync.WaitGroup
}

// Discover builds the table cfg describes and discovers every row, waiting for all of
// them: what the daemon serves from its start, and what `rtshimd handlers` prints.
func Discover(ctx context.Context, cfg *config.Config, rts *Runtimes, p Probe) (*Table, error) {
	t, err := New(cfg, rts)
	if err != nil {
		return nil, err
	}
	return discoverAll(ctx, t, p, rts), nil
}

// NewLive serves t (already discovered); rows a later reload adds or changes are probed
// with p until ctx ends.
func NewLive(ctx context.Context, t *Table, rts *Runtimes, p Probe) *Live {
	l := &Live{rts: rts, probe: p, ctx: ctx}
	l.cur.Store(t)
	return l
}

// Table is the table being served now.
func (l *Live) Table() *Table { return l.cur.Load() }

// Lookup resolves a handler in the table being served now (see Table.Lookup).
func (l *Live) Lookup(name string) (*Handler, error) { return l.Table().Lookup(name) }

// FindUnrecorded is Table.FindUnrecorded on the table served now.
func (l *Live) FindUnrecorded(ctx context.Context, task kind.Task) ([]string, error) {
	return l.Table().FindUnrecorded(ctx, task)
}

// StopUnrecorded is Table.StopUnrecorded on the table served now.
func (l *Live) StopUnrecorded(ctx context.Context, task kind.Task) ([]string, error) {
	return l.Table().StopUnrecorded(ctx, task)
}

// Change is what a reload did to the table.
type Change struct {
	Added   []string `json:"added,omitempty"`
	Changed []string `json:"changed,omitempty"`
	Removed []string `json:"removed,omitempty"`
	// Probing are the rows probed in the background: added, changed, and unchanged rows
	// that were not ready (a reload is how an operator says "it is installed now").
	Probing []string `json:"probing,omitempty"`
	Default string   `json:"default"`
}

// Next is a table built from a new config, not yet served.
type Next struct {
	table  *Table
	change Change
	probe  map[string]bool
}

// Change says what publishing n would do.
func (n *Next) Change() Change { return n.change }

// Prepare builds the table cfg describes against the one being served: a row whose
// configuration is unchanged and ready keeps its runtime and discovery; every other
// row starts not ready, "probing". Nothing is served until Publish.
func (l *Live) Prepare(cfg *config.Config) (*Next, error) {
	fresh, err := New(cfg, l.rts)
	if err != nil {
		return nil, err
	}
	old := l.Table()
	n := &Next{table: fresh, probe: map[string]bool{}, change: Change{Default: cfg.DefaultHandler}}
	for name, h := range fresh.byName {
		prev, ok := old.byName[name]
		switch {
		case !ok:
			n.change.Added = append(n.change.Added, name)
		case !reflect.DeepEqual(prev.Config, h.Config):
			n.change.Changed = append(n.change.Changed, name)
		case prev.Ready:
			fresh.byName[name] = prev
			continue
		}
		h.Reason = "probing (added or changed by a reload)"
		n.probe[name] = true
		n.change.Probing = append(n.change.Probing, name)
	}
	for name := range old.byName {
		if _, ok := fresh.byName[name]; !ok {
			n.change.Removed = append(n.change.Removed, name)
		}
	}
	for _, s := range [][]string{n.change.Added, n.change.Changed, n.change.Removed, n.change.Probing} {
		sort.Strings(s)
	}
	return n, nil
}

// Publish serves n's table now and probes its new rows in the background; each becomes
// ready (or says why not) when its probe ends, unless a later reload replaced it.
func (l *Live) Publish(n *Next) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur.Store(n.table)
	for name := range n.probe {
		h := n.table.byName[name]
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			d := discover(l.ctx, h, l.probe, l.rts)
			if l.ctx.Err() != nil {
				return
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			cur := l.Table()
			if cur.byName[name] != h {
				return // a later reload replaced or removed the row
			}
			l.cur.Store(cur.with(h.withDiscovery(d)))
		}()
	}
}

// Wait waits for background probes (they end with the Live's context).
func (l *Live) Wait() { l.wg.Wait() }
