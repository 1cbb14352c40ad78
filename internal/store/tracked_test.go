package store

import (
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
)

type testStatus struct {
	State string `json:"state"`
	N     int    `json:"n"`
}

// readStatus is the status of id as a later daemon would read it: replayed from the
// journal on disk, not from the store's memory.
func readStatus(t *testing.T, s *Store, id string) (testStatus, bool) {
	t.Helper()
	rp, err := replay(filepath.Join(s.dir, journalFile))
	if err != nil {
		t.Fatal(err)
	}
	r := rp.recs[id]
	if r == nil || r.status == nil {
		return testStatus{}, false
	}
	b := r.status
	var st testStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st, true
}

func TestTrackedWritesBeforeVisible(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracked(testStatus{State: "creating"})
	if err := tr.Update(s, "a", map[string]string{"id": "a"}, func(st *testStatus) {}); err != nil {
		t.Fatal(err)
	}
	// fn sees the record as written so far; the change shows only after the write.
	if err := tr.Update(s, "a", nil, func(st *testStatus) {
		if got, _ := readStatus(t, s, "a"); got.State != "creating" {
			t.Errorf("record before the write = %+v", got)
		}
		st.State = "ready"
		if tr.Get().State != "creating" {
			t.Errorf("change visible before it was written")
		}
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := readStatus(t, s, "a"); got.State != "ready" || tr.Get().State != "ready" {
		t.Errorf("after update: record %+v, memory %+v", got, tr.Get())
	}

	// UpdateIf false changes memory only.
	_ = tr.UpdateIf(s, "a", nil, func(st *testStatus) bool { st.N = 7; return false })
	if got, _ := readStatus(t, s, "a"); got.N != 0 || tr.Get().N != 7 {
		t.Errorf("memory-only change: record %+v, memory %+v", got, tr.Get())
	}

	// Concurrent updates are serialised: none is lost, and the record holds the last.
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = tr.Update(s, "a", nil, func(st *testStatus) { st.N++ })
		}()
	}
	wg.Wait()
	if got, _ := readStatus(t, s, "a"); got.N != 27 || tr.Get().N != 27 {
		t.Errorf("after 20 concurrent increments: record %+v, memory %+v", got, tr.Get())
	}

	// After Forget nothing writes the record back.
	if err := tr.Forget(s, "a"); err != nil {
		t.Fatal(err)
	}
	// With metadata a write would make the record again: only Forget stops it.
	_ = tr.Update(s, "a", map[string]string{"id": "a"}, func(st *testStatus) { st.State = "exited" })
	if _, ok := readStatus(t, s, "a"); ok {
		t.Error("a forgotten record was written again")
	}
	if tr.Get().State != "exited" {
		t.Errorf("memory after Forget = %+v", tr.Get())
	}
	var none *Tracked[testStatus]
	if none.Get() != (testStatus{}) {
		t.Error("nil Tracked")
	}
}

func TestTrackedFailedWriteStillVisible(t *testing.T) {
	dir := t.TempDir()
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracked(testStatus{State: "running"})
	// No record: the write fails.
	err = tr.Update(s, "missing", nil, func(st *testStatus) { st.State = "exited" })
	if err == nil {
		t.Fatal("write into a missing record succeeded")
	}
	if tr.Get().State != "exited" {
		t.Errorf("an exit that could not be written was dropped: %+v", tr.Get())
	}
	// The next update writes it, even one that writes nothing itself.
	if err := s.WriteMeta("missing", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := tr.UpdateIf(s, "missing", nil, func(*testStatus) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if got, ok := readStatus(t, s, "missing"); !ok || got.State != "exited" {
		t.Errorf("a failed write was not made again: %+v %v", got, ok)
	}
}

// A record's status is loaded as written; a record without one starts from initial, and
// one that does not decode is an error.
func TestLoadTracked(t *testing.T) {
	type st struct{ State string }
	got, err := LoadTracked([]byte(`{"State":"running"}`), st{State: "creating"})
	if err != nil || got.Get().State != "running" {
		t.Errorf("written: %+v %v", got.Get(), err)
	}
	if got, err := LoadTracked(nil, st{State: "creating"}); err != nil || got.Get().State != "creating" {
		t.Errorf("none written: %+v %v", got.Get(), err)
	}
	if _, err := LoadTracked([]byte(`{`), st{}); err == nil {
		t.Error("a status that does not decode loaded")
	}
}
