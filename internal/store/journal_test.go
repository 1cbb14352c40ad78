package store

import (
	"bytes"
	"encoding/json"
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

// Power loss during a group-committed batch: the batch's bytes were written in one go,
// not yet synced, so none of its callers was answered. What the disk holds is the synced
// journal and, of the batch, any prefix of its bytes, perhaps with garbage after it, or
// the batch with a hole in it (a block that never reached the disk, read back as zeros).
// The records read are then exactly the answered state plus the batch's entries that
// reached the disk whole, in the batch's order: for a cut, the whole entries before it,
// read as a torn end (no damage reported); past a hole, also the whole entries after it,
// reported as damage (good entries after a bad one). No answered write is lost, no part
// of a torn entry is read, and the store takes writes after. The batches are the store's
// own: k concurrent writers held behind a first write's sync, so they go as one write.
func TestPowerLossInGroupCommit(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	s, dir := newStore(t)
	journal := filepath.Join(dir, journalFile)
	state := map[string]*record{} // what the answered writes made
	for step := 0; step < 30; step++ {
		k := 2 + rng.Intn(5)
		var (
			syncs   int
			image   []byte // the journal as the batch's sync found it
			durable int64  // of which synced before
			hookErr error
		)
		holding := make(chan struct{})
		s.syncHook = func() error {
			syncs++
			switch syncs {
			case 1: // the holder's sync: wait until the k writers all wait behind it
				close(holding)
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
					s.mu.Lock()
					n := len(s.pending)
					s.mu.Unlock()
					if n == k {
						break
					}
					if time.Now().After(deadline) {
						hookErr = fmt.Errorf("%d writers waiting, want %d", n, k)
						break
					}
				}
			case 2: // the batch's sync: what a power loss now may leave
				var err error
				if image, err = os.ReadFile(journal); err != nil {
					hookErr = err
				}
				durable = s.size
			}
			return nil
		}
		holderDone := make(chan error, 1)
		go func() { holderDone <- s.Save("holder", "meta", map[string]int{"step": step}) }()
		<-holding
		// k writers, each one entry: a new record, a status update or a delete of a
		// record as the answered state has it.
		var wg sync.WaitGroup
		errs := make([]error, k)
		for i := 0; i < k; i++ {
			id := fmt.Sprintf("r%d", rng.Intn(8))
			st := []byte(fmt.Sprintf(`{"step":%d,"writer":%d,"pad":%q}`, step, i, strings.Repeat("s", rng.Intn(600))))
			var write func() error
			switch {
			case state[id] == nil:
				meta := map[string]string{"id": id, "pad": strings.Repeat("m", rng.Intn(1000))}
				write = func() error { return s.Save(id, meta, json.RawMessage(st)) }
			case rng.Intn(4) == 0:
				write = func() error { return s.Delete(id) }
			default:
				write = func() error { return s.WriteStatus(id, st) }
			}
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = write() }()
		}
		wg.Wait()
		if err := <-holderDone; err != nil {
			t.Fatal(err)
		}
		s.syncHook = nil
		if err := errors.Join(append(errs, hookErr)...); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if syncs != 2 {
			t.Fatalf("step %d: %d syncs for a held write and %d waiting writers, want 2 (one batch)", step, syncs, k)
		}
		apply(state, entry{op: opPut, id: "holder", meta: []byte(`"meta"`), status: []byte(fmt.Sprintf(`{"step":%d}`, step))})

		// The batch as written: k whole entries after the synced journal.
		batch := image[durable:]
		var entries []entry
		bounds := []int{0}
		for off := 0; off < len(batch); {
			e, n, err := decodeEntry(batch[off:])
			if err != nil {
				t.Fatalf("step %d: the batch's entry at %d: %v", step, off, err)
			}
			entries = append(entries, e)
			off += n
			bounds = append(bounds, off)
		}
		if len(entries) != k {
			t.Fatalf("step %d: the batch holds %d entries, want %d", step, len(entries), k)
		}
		// The batch's callers were answered: the answered state is the batch applied.
		before := copyState(state)
		for _, e := range entries {
			apply(state, e)
		}
		if got := load(t, s); !reflect.DeepEqual(got, asRecords(state)) {
			t.Fatalf("step %d: the store reads %q after the batch, want %q", step, got, asRecords(state))
		}

		// withWhole is before plus the entries of the batch whose bytes are on the crashed
		// disk unchanged, all of them before cut.
		withWhole := func(disk []byte, cut int) []Record {
			st := copyState(before)
			for i, e := range entries {
				if bounds[i+1] <= cut && bytes.Equal(disk[bounds[i]:bounds[i+1]], batch[bounds[i]:bounds[i+1]]) {
					apply(st, e)
				}
			}
			return asRecords(st)
		}
		type crash struct {
			what string
			disk []byte // the batch's bytes as they reached the disk
			cut  int    // the end of the batch's bytes that reached it, before garbage
			hole bool   // a whole entry after a bad one
		}
		var crashes []crash
		cuts := slices.Clone(bounds) // at each entry's end, and inside each entry
		for i := 0; i < k; i++ {
			cuts = append(cuts, bounds[i]+1+rng.Intn(bounds[i+1]-bounds[i]-1))
		}
		for _, cut := range cuts {
			crashes = append(crashes, crash{what: fmt.Sprintf("cut at %d", cut), disk: batch[:cut], cut: cut})
			junk := make([]byte, 1+rng.Intn(64))
			rng.Read(junk)
			crashes = append(crashes, crash{what: fmt.Sprintf("cut at %d, %d bytes of garbage", cut, len(junk)), disk: append(slices.Clone(batch[:cut]), junk...), cut: cut})
		}
		for i := 0; i < 4; i++ {
			// A hole: one 512-byte block of the file that did not reach the disk,
			// perhaps with the batch cut after it.
			blk := (int(durable) + rng.Intn(max(len(batch)-512, 1))) &^ 511
			from, to := max(blk-int(durable), 0), min(blk+512-int(durable), len(batch))
			cut := to + rng.Intn(len(batch)-to+1)
			disk := slices.Clone(batch[:cut])
			clear(disk[from:to])
			hole := false
			for j := 0; j < k; j++ {
				if bounds[j+1] <= cut && bounds[j] >= to && !bytes.Equal(batch[from:to], disk[from:to]) {
					hole = true
				}
			}
			crashes = append(crashes, crash{what: fmt.Sprintf("a hole at %d-%d, cut at %d", from, to, cut), disk: disk, cut: cut, hole: hole})
		}
		for _, c := range crashes {
			crashed := filepath.Join(t.TempDir(), "records")
			if err := os.MkdirAll(crashed, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(crashed, journalFile), append(slices.Clone(image[:durable]), c.disk...), 0o600); err != nil {
				t.Fatal(err)
			}
			cs, err := New(crashed)
			if err != nil {
				t.Fatalf("step %d, %s: open after power loss: %v", step, c.what, err)
			}
			got := load(t, cs)
			damage := cs.Damage()
			cs.Close()
			if want := withWhole(c.disk, c.cut); !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d (%d entries), %s: read %q after power loss, want %q (the answered state and the batch's whole entries)", step, k, c.what, got, want)
			}
			garbage := len(c.disk) > c.cut
			switch {
			case c.hole && damage == "":
				t.Errorf("step %d, %s: entries read past a hole, and no damage reported", step, c.what)
			case !c.hole && !garbage && !strings.Contains(c.what, "hole") && damage != "":
				t.Errorf("step %d, %s: a torn end reported as damage: %s", step, c.what, damage)
			}
			if err := openWrite(crashed); err != nil {
				t.Fatalf("step %d, %s: write after power loss: %v", step, c.what, err)
			}
		}
	}
}

// A crash or power loss at each step of a compaction (the new file written, synced,
// renamed over the journal, the directory not yet synced) loses no answered record: the
// daemon that starts next reads every one of them and the journal takes writes. Before
// the rename the old journal is whole, beside any prefix of the new one (a temporary the
// next open removes); after it, the rename may or may not have reached the disk, and
// either file is whole.
func TestPowerLossDuringCompaction(t *testing.T) {
	s, dir := newStore(t)
	journal := filepath.Join(dir, journalFile)
	type files struct{ journal, compact []byte }
	var steps []string
	at := map[string]files{}
	var stateAt map[string]*record
	s.compactHook = func(step string) {
		var f files
		var err error
		if f.journal, err = os.ReadFile(journal); err != nil {
			t.Errorf("%s: %v", step, err)
		}
		if f.compact, err = os.ReadFile(journal + ".compact"); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v", step, err)
		}
		steps = append(steps, step)
		at[step] = f
		stateAt = copyState(s.recs)
	}
	state := map[string]*record{}
	pad := strings.Repeat("s", 4096)
	for i := 0; len(steps) == 0; i++ {
		if i == 1000 {
			t.Fatal("no compaction after 1000 writes")
		}
		id := fmt.Sprintf("r%d", i%5)
		st := []byte(fmt.Sprintf(`"%s-%d"`, pad, i))
		e := entry{op: opPut, id: id, status: st}
		if state[id] == nil {
			e.meta = []byte(`"meta"`)
		}
		if err := s.Save(id, "meta", json.RawMessage(st)); err != nil {
			t.Fatal(err)
		}
		apply(state, e)
	}
	s.compactHook = nil
	if want := []string{"written", "synced", "renamed"}; !reflect.DeepEqual(steps, want) {
		t.Fatalf("compaction steps %v, want %v", steps, want)
	}
	// The write that set the compaction off was synced before it: every image must read
	// the state with it.
	want := asRecords(state)
	if got := asRecords(stateAt); !reflect.DeepEqual(got, want) {
		t.Fatalf("the store compacted %d records, want the %d written", len(got), len(want))
	}
	old, compacted := at["synced"].journal, at["synced"].compact
	if !bytes.Equal(at["written"].journal, old) || !bytes.Equal(at["written"].compact, compacted) ||
		!bytes.Equal(at["renamed"].journal, compacted) || at["renamed"].compact != nil {
		t.Fatal("the files at the compaction's steps are not the old journal and the new one")
	}
	if len(compacted) >= len(old) {
		t.Fatalf("compacted to %d bytes from %d", len(compacted), len(old))
	}
	rng := rand.New(rand.NewSource(3))
	junk := make([]byte, 100)
	rng.Read(junk)
	type image struct {
		what             string
		journal, compact []byte // nil: no such file
	}
	var images []image
	// Written, not synced: of the new file, any prefix may be on disk, perhaps with
	// garbage after it; the old journal is whole.
	for _, n := range []int{0, 1, 4 + entryHeaderLen, len(compacted) / 3, len(compacted) / 2, len(compacted) - 1, len(compacted)} {
		images = append(images,
			image{fmt.Sprintf("written: %d bytes of the new file", n), old, compacted[:n]},
			image{fmt.Sprintf("written: %d bytes of the new file and garbage", n), old, append(slices.Clone(compacted[:n]), junk...)})
	}
	images = append(images,
		image{"synced: the new file whole beside the journal", old, compacted},
		image{"renamed, the rename lost: as synced", old, compacted},
		image{"renamed, the rename on disk, the directory not synced", compacted, nil},
	)
	for _, im := range images {
		crashed := filepath.Join(t.TempDir(), "records")
		if err := os.MkdirAll(crashed, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crashed, journalFile), im.journal, 0o600); err != nil {
			t.Fatal(err)
		}
		if im.compact != nil {
			if err := os.WriteFile(filepath.Join(crashed, journalFile+".compact"), im.compact, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cs, err := New(crashed)
		if err != nil {
			t.Fatalf("%s: open after the crash: %v", im.what, err)
		}
		got, damage := load(t, cs), cs.Damage()
		cs.Close()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read %d records after the crash, want the %d answered", im.what, len(got), len(want))
			continue
		}
		if damage != "" {
			t.Errorf("%s: damage reported: %s", im.what, damage)
		}
		if _, err := os.Stat(filepath.Join(crashed, journalFile+".compact")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the compaction's temporary is left: %v", im.what, err)
		}
		if err := openWrite(crashed); err != nil {
			t.Errorf("%s: write after the crash: %v", im.what, err)
		}
	}
	// The store itself goes on: a write after the compaction, read back by the next.
	if err := s.Save("after", "meta", "x"); err != nil {
		t.Fatal(err)
	}
	apply(state, entry{op: opPut, id: "after", meta: []byte(`"meta"`), status: []byte(`"x"`)})
	if got := load(t, reopen(t, s, dir)); !reflect.DeepEqual(got, asRecords(state)) {
		t.Errorf("after the compaction and a write: %d records, want %d", len(got), len(state))
	}
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
	if d := s.Damage(); !strings.Contains(d, "could not be read") || !strings.Contains(d, "journal-unreadable-") || !s.Unreadable() {
		t.Errorf("Damage() = %q, Unreadable() = %v", d, s.Unreadable())
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
