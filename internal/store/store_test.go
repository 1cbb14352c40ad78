package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func newStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "records")
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func load(t *testing.T, s *Store) []Record {
	t.Helper()
	recs, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestRoundTrip(t *testing.T) {
	s, dir := newStore(t)
	if err := s.WriteMeta("b", []byte(`{"id":"b"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteMeta("a", []byte(`{"id":"a"}`)); err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{`{"state":"creating"}`, `{"state":"ready"}`} {
		if err := s.WriteStatus("a", []byte(st)); err != nil {
			t.Fatal(err)
		}
	}
	want := []Record{
		{ID: "a", Meta: []byte(`{"id":"a"}`), Status: []byte(`{"state":"ready"}`)},
		{ID: "b", Meta: []byte(`{"id":"b"}`)},
	}
	if got := load(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("Load = %q, want %q", got, want)
	}
	// What the journal holds is what a later daemon reads.
	s = reopen(t, s, dir)
	if got := load(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("Load after reopening = %q, want %q", got, want)
	}

	if err := s.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("a"); err != nil {
		t.Errorf("Delete of a missing record: %v", err)
	}
	if err := s.Delete("never"); err != nil {
		t.Errorf("Delete of a never-written record: %v", err)
	}
	if got := load(t, s); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("Load after Delete = %q, want %q", got, want[1:])
	}
	if got := load(t, reopen(t, s, dir)); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("Load after Delete and reopening = %q, want %q", got, want[1:])
	}
}

// reopen closes s and opens its directory again, as a restarted daemon does.
func reopen(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	s.Close()
	n, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// An earlier release's records, one directory each, are moved into the journal; a stray
// file is left alone, a directory without files dropped.
func TestImportDirectoryLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	for id, files := range map[string]map[string]string{
		"a": {metaFile: `{"id":"a"}`, statusFile: `{"state":"ready"}`},
		"b": {metaFile: `{"id":"b"}`},
		"c": {},
		"d": {statusFile: `{"state":"creating"}`},
	} {
		if err := os.MkdirAll(filepath.Join(dir, id), 0o700); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, id, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stray"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{ID: "a", Meta: []byte(`{"id":"a"}`), Status: []byte(`{"state":"ready"}`)},
		{ID: "b", Meta: []byte(`{"id":"b"}`)},
		{ID: "d", Status: []byte(`{"state":"creating"}`)},
	}
	if got := load(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("Load = %q, want %q", got, want)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !reflect.DeepEqual(names, []string{journalFile, "stray"}) {
		t.Errorf("store holds %q after the import, want the journal and the stray file", names)
	}
	if got := load(t, reopen(t, s, dir)); !reflect.DeepEqual(got, want) {
		t.Errorf("Load after reopening = %q, want %q", got, want)
	}
}

func TestWriteStatusWithoutMeta(t *testing.T) {
	s, _ := newStore(t)
	if err := s.WriteStatus("x", []byte("{}")); err == nil {
		t.Errorf("WriteStatus before WriteMeta succeeded")
	}
	if got := load(t, s); len(got) != 0 {
		t.Errorf("Load = %q, want nothing", got)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	for _, content := range []string{"first", "second, longer", "3"} {
		if err := WriteFileAtomic(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Errorf("content = %q, %v; want %q", b, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, want 0640", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "config.json" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %q, want only config.json", names)
	}
}

func TestWriteFileAtomicFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	// Renaming a file over a directory fails after the temporary file was written.
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(target, []byte("x"), 0o600); err == nil {
		t.Fatal("WriteFileAtomic over a directory succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "target" || !entries[0].IsDir() {
		t.Errorf("directory holds %v, want only target/", entries)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
		t.Error("WriteFileAtomic into a missing directory succeeded")
	}
}

// A save whose metadata is as stored writes the status alone; changed metadata is written.
func TestSaveSkipsUnchangedMeta(t *testing.T) {
	s, dir := newStore(t)
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(dir, journalFile))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	type meta struct{ A string }
	long := strings.Repeat("m", 1000)
	if err := s.Save("x", meta{long}, "creating"); err != nil {
		t.Fatal(err)
	}
	before := size()
	if err := s.Save("x", meta{long}, "ready"); err != nil {
		t.Fatal(err)
	}
	if grew := size() - before; grew > 100 {
		t.Errorf("unchanged metadata was written again: the journal grew %d bytes", grew)
	}
	if err := s.Save("x", meta{"b"}, "stopped"); err != nil {
		t.Fatal(err)
	}
	recs := load(t, reopen(t, s, dir))
	if len(recs) != 1 || string(recs[0].Meta) != `{"A":"b"}` || string(recs[0].Status) != `"stopped"` {
		t.Errorf("records %+v", recs)
	}
}

// One record whose file cannot be read is returned with its error, beside the others:
// it must not stop the daemon from loading every other record.
func TestLoadUnreadableRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	// An earlier release's record whose status is a directory: read(2) fails with EISDIR
	// (root reads any mode).
	if err := os.MkdirAll(filepath.Join(dir, "bad", statusFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad", metaFile), []byte(`{"id":"bad"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WriteMeta("good", []byte(`{"id":"good"}`)); err != nil {
		t.Fatal(err)
	}
	recs := load(t, s)
	if len(recs) != 2 {
		t.Fatalf("records %+v, want 2", recs)
	}
	for _, r := range recs {
		switch r.ID {
		case "good":
			if r.Err != nil || string(r.Meta) != `{"id":"good"}` {
				t.Errorf("good: %+v", r)
			}
		case "bad":
			if !errors.Is(r.Err, syscall.EISDIR) || string(r.Meta) != `{"id":"bad"}` {
				t.Errorf("bad: err %v meta %q, want EISDIR and its metadata", r.Err, r.Meta)
			}
		}
	}
	// Quarantined as it lies.
	p, err := s.Quarantine("bad", "unreadable")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(p, statusFile)); err != nil || !fi.IsDir() {
		t.Errorf("quarantined directory record: %v %v", fi, err)
	}
	if recs := load(t, s); len(recs) != 1 || recs[0].ID != "good" {
		t.Errorf("records after the quarantine: %+v", recs)
	}
}

// A quarantined record leaves the store as it was, with its reason beside it; a second
// record of the same ID does not overwrite the first.
func TestQuarantine(t *testing.T) {
	s, dir := newStore(t)
	for i, why := range []string{"first: bad json", "second: unreadable"} {
		if err := s.Save("c1", map[string]int{"n": i}, map[string]string{"state": "running"}); err != nil {
			t.Fatal(err)
		}
		p, err := s.Quarantine("c1", why)
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(dir+".quarantine", "c1")
		if i == 1 {
			want += ".1"
		}
		if p != want {
			t.Errorf("quarantined at %s, want %s", p, want)
		}
		if b, err := os.ReadFile(filepath.Join(p, metaFile)); err != nil || string(b) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Errorf("quarantined meta %q %v", b, err)
		}
		if len(load(t, s)) != 0 {
			t.Errorf("a quarantined record is still loaded")
		}
	}
	q, err := s.ListQuarantined()
	if err != nil {
		t.Fatal(err)
	}
	want := []Quarantined{
		{ID: "c1", Path: filepath.Join(dir+".quarantine", "c1"), Reason: "first: bad json", HasRecord: true},
		{ID: "c1", Path: filepath.Join(dir+".quarantine", "c1.1"), Reason: "second: unreadable", HasRecord: true},
	}
	if !reflect.DeepEqual(q, want) {
		t.Errorf("ListQuarantined = %+v, want %+v", q, want)
	}
	if _, err := s.Quarantine("missing", "x"); err == nil {
		t.Errorf("quarantine of a missing record: no error")
	}
}

// A record set aside can be put back (adopted); a lost one, set aside without its record,
// is kept and can be asked to stop, not adopted.
func TestAdoptAndStop(t *testing.T) {
	s, dir := newStore(t)
	if err := s.Save("c1", map[string]int{"n": 1}, map[string]string{"state": "running"}); err != nil {
		t.Fatal(err)
	}
	p, err := s.Quarantine("c1", "undecodable")
	if err != nil {
		t.Fatal(err)
	}
	if err := MarkKept(p, true); err != nil {
		t.Fatal(err)
	}
	lost, err := s.SetAside("c2", "record lost")
	if err != nil {
		t.Fatal(err)
	}
	if err := MarkKept(lost, true); err != nil {
		t.Fatal(err)
	}
	if marked, err := RequestStop(dir, "c2"); err != nil || len(marked) != 1 || marked[0] != lost {
		t.Fatalf("RequestStop(c2) = %v, %v", marked, err)
	}
	q, _ := ListQuarantinedIn(dir)
	want := []Quarantined{
		{ID: "c1", Path: p, Reason: "undecodable", Kept: true, HasRecord: true},
		{ID: "c2", Path: lost, Reason: "record lost", Kept: true, StopRequested: true},
	}
	if !reflect.DeepEqual(q, want) {
		t.Errorf("ListQuarantinedIn = %+v, want %+v", q, want)
	}
	if err := s.Adopt("c2"); err == nil || !strings.Contains(err.Error(), "cannot be adopted") {
		t.Errorf("Adopt of a lost record: %v", err)
	}
	if err := s.Adopt("c1"); err != nil {
		t.Fatal(err)
	}
	recs := load(t, reopen(t, s, dir))
	if len(recs) != 1 || recs[0].ID != "c1" || string(recs[0].Meta) != `{"n":1}` || string(recs[0].Status) != `{"state":"running"}` {
		t.Errorf("after adopting c1: %q", recs)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("adopted record's quarantine entry still there: %v", err)
	}
	if err := MarkKept(lost, false); err != nil {
		t.Fatal(err)
	}
	if q, _ := ListQuarantinedIn(dir); len(q) != 1 || q[0].Kept || q[0].StopRequested {
		t.Errorf("after the stop: %+v", q)
	}
}
