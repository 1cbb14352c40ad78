package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Writes that wait while a batch is synced are synced together: 40 concurrent writers
// with a slow disk take far fewer syncs than writes, and every write is in the journal.
func TestGroupCommit(t *testing.T) {
	s, dir := newStore(t)
	var syncs atomic.Int32
	s.syncHook = func() error { syncs.Add(1); time.Sleep(5 * time.Millisecond); return nil }
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Save(fmt.Sprintf("r%02d", i), map[string]int{"i": i}, "ready"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := syncs.Load(); n >= 20 {
		t.Errorf("40 concurrent writes took %d syncs, want them batched", n)
	}
	if recs := load(t, reopen(t, s, dir)); len(recs) != 40 {
		t.Errorf("%d records after reopening, want 40", len(recs))
	}
}

// A batch whose sync fails is answered with the error and cut from the journal: a later
// daemon never sees what its callers were told failed. The next write succeeds.
func TestFailedSyncLeavesNothing(t *testing.T) {
	s, dir := newStore(t)
	if err := s.Save("a", "meta", "one"); err != nil {
		t.Fatal(err)
	}
	s.syncHook = func() error { return errors.New("EIO") }
	if err := s.Save("a", nil, "two"); err == nil {
		t.Fatal("a write whose sync failed succeeded")
	}
	if err := s.Save("b", "meta", "x"); err == nil {
		t.Fatal("a write whose sync failed succeeded")
	}
	s.syncHook = nil
	if err := s.Save("c", "meta", "three"); err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{ID: "a", Meta: []byte(`"meta"`), Status: []byte(`"one"`)},
		{ID: "c", Meta: []byte(`"meta"`), Status: []byte(`"three"`)},
	}
	if got := load(t, reopen(t, s, dir)); !reflect.DeepEqual(got, want) {
		t.Errorf("after failed syncs: %q, want %q", got, want)
	}
}

// Power loss: what reaches the disk is the synced journal and, of the batch being written,
// any prefix, perhaps followed by garbage. Every answered write must survive, and what is
// read is the answered state or it plus some whole entries of the unanswered batch. Checked
// at every point of a random history of puts, status updates and deletes.
func TestPowerLossKeepsAnsweredWrites(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	s, dir := newStore(t)
	journal := filepath.Join(dir, journalFile)
	state := map[string]*record{} // what the answered writes made
	for step := 0; step < 200; step++ {
		durable, err := os.ReadFile(journal)
		if err != nil {
			t.Fatal(err)
		}
		// The next write: a new record, a status update or a delete.
		id := fmt.Sprintf("r%d", rng.Intn(8))
		e := entry{op: opPut, id: id, status: []byte(fmt.Sprintf(`{"step":%d}`, step))}
		switch {
		case state[id] == nil:
			e.meta = []byte(fmt.Sprintf(`{"id":%q,"pad":%q}`, id, bytes.Repeat([]byte("m"), rng.Intn(300))))
		case rng.Intn(4) == 0:
			e = entry{op: opDelete, id: id}
		}
		// Power lost while it was written: a prefix of its entry reached the disk, and
		// perhaps garbage after it.
		full := e.encode(nil)
		torn := append(append([]byte{}, durable...), full[:rng.Intn(len(full)+1)]...)
		if rng.Intn(2) == 0 {
			junk := make([]byte, rng.Intn(64))
			rng.Read(junk)
			torn = append(torn, junk...)
		}
		crashed := filepath.Join(t.TempDir(), "records")
		if err := os.MkdirAll(crashed, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crashed, journalFile), torn, 0o600); err != nil {
			t.Fatal(err)
		}
		after := copyState(state)
		apply(after, e)
		got := openLoad(t, crashed)
		if !reflect.DeepEqual(got, asRecords(state)) && !reflect.DeepEqual(got, asRecords(after)) {
			t.Fatalf("step %d: after power loss read %q, want %q (or with the unanswered write)", step, got, asRecords(state))
		}
		// The crashed store takes writes after its torn end was cut.
		if err := openWrite(crashed); err != nil {
			t.Fatalf("step %d: write after power loss: %v", step, err)
		}
		// Now the write itself, answered.
		switch {
		case e.op == opDelete:
			err = s.Delete(id)
		case e.meta != nil:
			if err = s.WriteMeta(id, e.meta); err == nil {
				err = s.WriteStatus(id, e.status)
			}
		default:
			err = s.WriteStatus(id, e.status)
		}
		if err != nil {
			t.Fatal(err)
		}
		apply(state, e)
	}
}

func copyState(m map[string]*record) map[string]*record {
	out := map[string]*record{}
	for k, v := range m {
		c := *v
		out[k] = &c
	}
	return out
}

func asRecords(m map[string]*record) []Record {
	var out []Record
	for id, r := range m {
		out = append(out, Record{ID: id, Meta: r.meta, Status: r.status})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func openLoad(t *testing.T, dir string) []Record {
	t.Helper()
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := load(t, s)
	if len(recs) == 0 {
		return nil
	}
	return recs
}

func openWrite(dir string) error {
	s, err := New(dir)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.WriteMeta("after-crash", []byte(`{}`)); err != nil {
		return err
	}
	s.Close()
	s2, err := New(dir)
	if err != nil {
		return err
	}
	defer s2.Close()
	recs, _ := s2.Load()
	for _, r := range recs {
		if r.ID == "after-crash" {
			return nil
		}
	}
	return errors.New("the write after the crash was not read back")
}

// A journal grown past compactMin and four times its records is rewritten with one entry
// per record; what it reads back is unchanged.
func TestCompaction(t *testing.T) {
	s, dir := newStore(t)
	pad := bytes.Repeat([]byte("s"), 4096)
	for i := 0; i < 400; i++ {
		id := fmt.Sprintf("r%d", i%3)
		if err := s.Save(id, "meta", fmt.Sprintf("%s-%d", pad, i)); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, journalFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > compactMin {
		t.Errorf("journal is %d bytes after 400 writes to 3 records: not compacted", fi.Size())
	}
	recs := load(t, reopen(t, s, dir))
	if len(recs) != 3 || !bytes.HasSuffix(recs[0].Status, []byte(`-399"`)) {
		t.Errorf("after compaction: %d records, r0 %q", len(recs), recs[0].Status[len(recs[0].Status)-8:])
	}
}

// A bad entry between good ones is a disk error, not a torn end: every good entry is
// read, the damaged file kept aside, the journal rewritten and writable.
func TestDamagedEntryBetweenGoodOnes(t *testing.T) {
	s, dir := newStore(t)
	for _, id := range []string{"a", "b", "c"} {
		if err := s.Save(id, "meta-"+id, "ready"); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	path := filepath.Join(dir, journalFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte inside b's entry (the second of three equal-sized ones).
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = New(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range load(t, s) {
		ids = append(ids, r.ID)
	}
	if !reflect.DeepEqual(ids, []string{"a", "c"}) {
		t.Errorf("records after the damage: %v, want a and c", ids)
	}
	if lost := s.Lost(); !reflect.DeepEqual(lost, []string{"b"}) {
		t.Errorf("Lost() = %v, want the damaged entry's b", lost)
	}
	if d := s.Damage(); !strings.Contains(d, "damaged") {
		t.Errorf("Damage() = %q", d)
	}
	kept, _ := filepath.Glob(path + ".damaged-*")
	if len(kept) != 1 {
		t.Errorf("damaged journal kept as %v", kept)
	} else if k, _ := os.ReadFile(kept[0]); !bytes.Equal(k, b) {
		t.Errorf("the kept file is not the damaged journal")
	}
	if err := s.Save("d", "meta-d", "ready"); err != nil {
		t.Fatal(err)
	}
	if recs := load(t, reopen(t, s, dir)); len(recs) != 3 {
		t.Errorf("after the rewrite and a write: %q", recs)
	}
}

// A directory left by an import a crash cut short (its meta.json removed, its
// status.json not yet) does not overwrite the imported record.
func TestImportCutShort(t *testing.T) {
	s, dir := newStore(t)
	if err := s.Save("x", "meta-x", "running"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.MkdirAll(filepath.Join(dir, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x", statusFile), []byte(`"old"`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := load(t, s)
	if len(recs) != 1 || string(recs[0].Meta) != `"meta-x"` || string(recs[0].Status) != `"running"` {
		t.Errorf("records %q, want x as the journal has it", recs)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Errorf("the leftover directory is still there: %v", err)
	}
}

// A compacted journal is one entry per record: a byte flipped anywhere in a record's
// entry, the last one included (whole, so no torn write), loses that record, and the store
// names it as lost.
func TestDamagedEntryNamesTheLostRecord(t *testing.T) {
	ids := []string{strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)}
	for victim := range ids {
		for _, where := range []string{"id", "meta", "status", "crc"} {
			t.Run(fmt.Sprintf("%d/%s", victim, where), func(t *testing.T) {
				s, dir := newStore(t)
				for _, id := range ids {
					if err := s.Save(id, map[string]string{"id": id, "pad": strings.Repeat("p", 100)}, map[string]string{"state": "running"}); err != nil {
						t.Fatal(err)
					}
				}
				s.Close()
				path := filepath.Join(dir, journalFile)
				b, _ := os.ReadFile(path)
				start := bytes.Index(b, []byte(ids[victim]))
				var at int
				switch where {
				case "id":
					at = start + 3
				case "meta":
					at = start + 64 + 30
				case "status":
					at = bytes.Index(b[start:], []byte(`"state"`)) + start + 2
				case "crc":
					_, n, err := decodeEntry(b[start-4-entryHeaderLen:])
					if err != nil {
						t.Fatal(err)
					}
					at = start - 4 - entryHeaderLen + n - 1
				}
				b[at] ^= 0x01
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				s, err := New(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if got := len(load(t, s)); got != 2 {
					t.Errorf("%d records read, want 2", got)
				}
				if lost := s.Lost(); !slices.Contains(lost, ids[victim]) {
					t.Errorf("Lost() = %v, want %s in it", lost, ids[victim][:8])
				}
			})
		}
	}
}

// A journal that cannot be read is set aside: the store opens empty, says so, and takes
// writes.
func TestUnreadableJournalSetAside(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	if err := os.MkdirAll(filepath.Join(dir, journalFile), 0o700); err != nil { // read fails: EISDIR
		t.Fatal(err)
	}
	s, err := New(dir)
	if err != nil {
		t.Fatalf("New with an unreadable journal: %v", err)
	}
	defer s.Close()
	if d := s.Damage(); !strings.Contains(d, "could not be read") || !strings.Contains(d, "journal-unreadable-") {
		t.Errorf("Damage() = %q", d)
	}
	if aside, _ := filepath.Glob(dir + ".journal-unreadable-*"); len(aside) != 1 {
		t.Errorf("set aside as %v", aside)
	}
	if err := s.Save("x", "m", "s"); err != nil {
		t.Fatal(err)
	}
	if recs := load(t, reopen(t, s, dir)); len(recs) != 1 {
		t.Errorf("after the set-aside and a write: %q", recs)
	}
}

// Two stores on one journal (what a second daemon on the same roots did before the
// roots' lock, audit E6): appends land at the end of the file, whoever wrote last, so no
// answered record overwrites another's.
func TestTwoOpenersAppend(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	a, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, id := range []string{"pod-a1", "pod-b1", "pod-a2", "pod-b2", "pod-a3"} {
		s := a
		if i%2 == 1 {
			s = b
		}
		if err := s.Save(id, map[string]string{"id": id}, "ready"); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if want := []string{"pod-a1", "pod-a2", "pod-a3", "pod-b1", "pod-b2"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("records read back: %v, want %v", ids, want)
	}
}
