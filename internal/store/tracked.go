package store

import (
	"encoding/json"
	"sync"
)

// Tracked is an object's mutable status in memory, kept in step with its record. Every
// change goes through Update: the record is written before the change is visible, so no
// reader (kubelet, recovery of a later daemon) acts on a state that a crash would lose,
// and concurrent updaters never write an older status over a newer one.
//
// S is copied by value: a change replaces a slice or map field, never writes into one.
type Tracked[S any] struct {
	// wmu serialises updates and orders them against Forget.
	wmu     sync.Mutex
	removed bool
	// dirty: the last write failed, so the next update writes even if fn says no.
	dirty bool
	// mu guards cur; readers take only this one, so they never wait on a disk write.
	mu  sync.Mutex
	cur S
}

// NewTracked returns a tracked status that starts as s.
func NewTracked[S any](s S) *Tracked[S] { return &Tracked[S]{cur: s} }

// LoadTracked is the tracked status a record kept (its status as Load returns it), or
// initial where none was ever written.
func LoadTracked[S any](status []byte, initial S) (*Tracked[S], error) {
	if status != nil {
		if err := json.Unmarshal(status, &initial); err != nil {
			return nil, err
		}
	}
	return NewTracked(initial), nil
}

// Get returns a copy of the status; the zero S where there is none yet.
func (t *Tracked[S]) Get() S {
	if t == nil {
		var zero S
		return zero
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}

// Update changes the status with fn and writes it to the record of id in st, the
// metadata too when meta is not nil. A failed write still makes the change visible —
// what fn records has happened (an exit, a teardown) — and is returned.
func (t *Tracked[S]) Update(st *Store, id string, meta any, fn func(*S)) error {
	return t.UpdateIf(st, id, meta, func(s *S) bool {
		if fn != nil { // nil: the metadata alone
			fn(s)
		}
		return true
	})
}

// UpdateIf is Update where fn decides whether the change is written: false keeps it in
// memory only (a record still being created is written by the step that ends creation,
// and until then a later daemon removes it as half-made).
func (t *Tracked[S]) UpdateIf(st *Store, id string, meta any, fn func(*S) bool) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	next := t.Get()
	write := fn(&next) || t.dirty
	var err error
	if write && !t.removed {
		err = st.Save(id, meta, &next)
		t.dirty = err != nil
	}
	t.mu.Lock()
	t.cur = next
	t.mu.Unlock()
	return err
}

// Forget deletes the record of id; once it is gone, later updates change memory only, so
// a late watcher does not write a removed object back. A record that could not be deleted
// is still written by later updates.
func (t *Tracked[S]) Forget(st *Store, id string) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if err := st.Delete(id); err != nil {
		return err
	}
	t.removed = true
	return nil
}
