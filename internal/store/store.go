// Package store keeps records on disk: for each object its metadata (written at creation
// and when the object's description changes) and its mutable status (rewritten on every
// change), in one journal per store, group-committed (journal.go); and, beside the store,
// the records set aside as unreadable. It knows nothing of what the records mean.
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
)

const (
	metaFile   = "meta.json"
	statusFile = "status.json"
)

// Store is a directory holding a journal of records.
type Store struct {
	dir string

	mu       sync.Mutex
	f        *os.File // the journal, open for appending; nil once closed
	size     int64    // its whole entries' length
	recs     map[string]*record
	cond     *sync.Cond // signalled when a batch is done
	pending  []*pendingEntry
	flushing bool
	// broken: a failed write could not be cut back out; nothing more is answered.
	broken error
	// needDirSync: a compaction's rename is not yet durable (its directory sync failed).
	needDirSync bool
	// legacyBad are directory-layout records that could not be read (importLegacy).
	legacyBad []Record
	// damage says what was wrong with the journal at open; lost are the IDs its damaged
	// entries named whose records did not survive; unreadable: the whole journal could
	// not be read, every record in it lost.
	damage     string
	lost       []string
	unreadable bool
	// syncHook, set by tests, runs before each sync and fails it with its error.
	syncHook func() error
	// compactHook, set by tests, is called at each step of a compaction as it is reached
	// ("written", "synced", "renamed"), with s.mu held: a crash there leaves the files as
	// they are then.
	compactHook func(step string)
}

// New returns the store in dir, creating it, with the records of an earlier release's
// directory layout moved into its journal.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create store %s: %w", dir, err)
	}
	s := &Store{dir: dir}
	s.cond = sync.NewCond(&s.mu)
	if err := s.openJournal(); err != nil {
		return nil, err
	}
	if err := s.importLegacy(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// WriteMeta stores the metadata of id.
func (s *Store) WriteMeta(id string, data []byte) error {
	return s.commit(entry{op: opPut, id: id, meta: nonNil(data)})
}

// WriteStatus replaces the status of id, whose metadata must have been written.
func (s *Store) WriteStatus(id string, data []byte) error {
	if exists, _ := s.lookup(id, nil); !exists {
		return fmt.Errorf("store %s: status without a record", id)
	}
	return s.commit(entry{op: opPut, id: id, status: nonNil(data)})
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Record is one stored object as read back.
type Record struct {
	ID     string
	Meta   []byte
	Status []byte // nil if no status was ever written
	// Err is why the record's files could not be read; the caller quarantines it.
	Err error
}

// Load returns every record, by ID. A record without metadata (an earlier release's
// crash between mkdir and the first write) is returned with nil Meta so the caller can
// clean up after it. A record of an earlier release whose files cannot be read is returned
// with Err: one bad record must not keep the daemon, and every other pod, from starting.
func (s *Store) Load() ([]Record, error) {
	s.mu.Lock()
	recs := make([]Record, 0, len(s.recs)+len(s.legacyBad))
	for id, r := range s.recs {
		rec := Record{ID: id, Meta: bytes.Clone(r.meta), Status: bytes.Clone(r.status)}
		if len(rec.Meta) == 0 {
			rec.Meta = nil
		}
		recs = append(recs, rec)
	}
	recs = append(recs, s.legacyBad...)
	s.mu.Unlock()
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
	return recs, nil
}

// quarantineDir is where Quarantine keeps records set aside: beside the store, so a
// rename moves them and Load never reads them again.
func (s *Store) quarantineDir() string { return s.dir + ".quarantine" }

const reasonFile = "reason"

// Quarantine sets the record of id aside, as it is, with why in a file beside it, and
// returns where it now lies. Nothing of it is lost: an operator can read it, mend it and
// put it back while the daemon is stopped. A path with an error means the record was set
// aside but a later step (a sync, the reason file) failed: it is no longer in the store.
func (s *Store) Quarantine(id, why string) (string, error) {
	legacy := s.isLegacyBad(id)
	rec, inJournal := s.snapshotRecord(id)
	if !legacy && !inJournal {
		return "", fmt.Errorf("quarantine record %s: no such record", id)
	}
	q := s.quarantineDir()
	if err := os.MkdirAll(q, 0o700); err != nil {
		return "", fmt.Errorf("quarantine record %s: %w", id, err)
	}
	dst := filepath.Join(q, id)
	for n := 1; ; n++ {
		if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
			break
		}
		dst = filepath.Join(q, fmt.Sprintf("%s.%d", id, n))
	}
	if legacy {
		// An earlier release's directory, moved as it is.
		if err := os.Rename(filepath.Join(s.dir, id), dst); err != nil {
			return "", fmt.Errorf("quarantine record %s: %w", id, err)
		}
		s.dropLegacyBad(id)
		if err := syncDir(s.dir); err != nil {
			return dst, fmt.Errorf("quarantine record %s: %w", id, err)
		}
	} else {
		// The record's files, written and synced before it leaves the journal.
		if err := os.Mkdir(dst, 0o700); err != nil {
			return "", fmt.Errorf("quarantine record %s: %w", id, err)
		}
		for _, f := range []recordFile{{metaFile, rec.meta}, {statusFile, rec.status}} {
			if f.data == nil {
				continue
			}
			if err := WriteFileAtomic(filepath.Join(dst, f.name), f.data, 0o600); err != nil {
				return "", fmt.Errorf("quarantine record %s: %w", id, err)
			}
		}
		if err := syncDir(q); err != nil {
			return "", fmt.Errorf("quarantine record %s: %w", id, err)
		}
		if err := s.commit(entry{op: opDelete, id: id}); err != nil {
			return "", fmt.Errorf("quarantine record %s: %w", id, err)
		}
	}
	if err := syncDir(q); err != nil {
		return dst, fmt.Errorf("quarantine record %s: %w", id, err)
	}
	if err := WriteFileAtomic(filepath.Join(dst, reasonFile), []byte(why+"\n"), 0o600); err != nil {
		return dst, fmt.Errorf("quarantine record %s: reason: %w", id, err)
	}
	return dst, nil
}

type recordFile struct {
	name string
	data []byte
}

// SetAside makes a quarantine entry for id, whose record is gone (a damaged journal lost
// it), with why: what it describes is kept, and listed, until an operator decides.
func (s *Store) SetAside(id, why string) (string, error) {
	q := s.quarantineDir()
	if err := os.MkdirAll(q, 0o700); err != nil {
		return "", fmt.Errorf("set aside record %s: %w", id, err)
	}
	dst := filepath.Join(q, id)
	for n := 1; ; n++ {
		if err := os.Mkdir(dst, 0o700); err == nil {
			break
		} else if !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("set aside record %s: %w", id, err)
		}
		dst = filepath.Join(q, fmt.Sprintf("%s.%d", id, n))
	}
	if err := WriteFileAtomic(filepath.Join(dst, reasonFile), []byte(why+"\n"), 0o600); err != nil {
		return dst, fmt.Errorf("set aside record %s: reason: %w", id, err)
	}
	return dst, syncDir(q)
}

const (
	// keptFile marks a quarantined record whose object still ran when it was set aside:
	// its process and files are kept until an operator stops it (stopFile) or adopts it.
	keptFile = "kept"
	// stopFile asks the daemon to stop a kept object (`rtshimd quarantine stop`).
	stopFile = "stop"
)

// KeepHint is what an operator can do with object id, kept without a usable record.
func KeepHint(id string) string {
	return fmt.Sprintf("see `rtshimd quarantine`; stop it with `rtshimd quarantine stop %s`, or mend its record and, with the daemon stopped, `rtshimd quarantine adopt %s`", id, id)
}

// MarkKept says, in the quarantine entry at path, whether its object is kept running.
func MarkKept(path string, kept bool) error {
	p := filepath.Join(path, keptFile)
	if kept {
		return WriteFileAtomic(p, []byte("the object this record described still ran when it was set aside; it is kept, with its files\n"), 0o600)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	_ = os.Remove(filepath.Join(path, stopFile))
	return syncDir(path)
}

// Quarantined is a record Quarantine set aside.
type Quarantined struct {
	ID     string `json:"id"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Kept: what it describes still ran when it was set aside and is kept, not stopped.
	Kept bool `json:"kept,omitempty"`
	// StopRequested: an operator asked for it to be stopped.
	StopRequested bool `json:"stop_requested,omitempty"`
	// HasRecord: the record's metadata is kept with it (it can be adopted).
	HasRecord bool `json:"has_record,omitempty"`
}

// ListQuarantined returns the records set aside, oldest name first.
func (s *Store) ListQuarantined() ([]Quarantined, error) {
	return ListQuarantinedIn(s.dir)
}

// ListQuarantinedIn returns the records set aside beside the store in dir (tools read it
// while a daemon holds the store).
func ListQuarantinedIn(dir string) ([]Quarantined, error) {
	q := dir + ".quarantine"
	entries, err := os.ReadDir(q)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list quarantined records: %w", err)
	}
	var out []Quarantined
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(q, e.Name())
		why, _ := os.ReadFile(filepath.Join(p, reasonFile))
		id, _, _ := strings.Cut(e.Name(), ".")
		out = append(out, Quarantined{ID: id, Path: p, Reason: strings.TrimSpace(string(why)),
			Kept: exists(filepath.Join(p, keptFile)), StopRequested: exists(filepath.Join(p, stopFile)),
			HasRecord: exists(filepath.Join(p, metaFile))})
	}
	return out, nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// RequestStop asks, in each kept quarantine entry of id beside the store in dir, that
// the daemon stop what it describes; it returns the entries marked.
func RequestStop(dir, id string) ([]string, error) {
	q, err := ListQuarantinedIn(dir)
	if err != nil {
		return nil, err
	}
	var marked []string
	for _, e := range q {
		if e.ID != id || !e.Kept {
			continue
		}
		if err := WriteFileAtomic(filepath.Join(e.Path, stopFile), []byte("requested\n"), 0o600); err != nil {
			return marked, fmt.Errorf("ask to stop %s: %w", id, err)
		}
		marked = append(marked, e.Path)
	}
	return marked, nil
}

// Adopt puts the record of id that Quarantine set aside back into the store and removes
// its quarantine entry: the next recovery takes the object up as its own. An entry
// without the record's metadata (its record was lost) cannot be adopted.
func (s *Store) Adopt(id string) error {
	q, err := s.ListQuarantined()
	if err != nil {
		return err
	}
	for i := len(q) - 1; i >= 0; i-- {
		e := q[i]
		if e.ID != id || !e.HasRecord {
			continue
		}
		meta, err := os.ReadFile(filepath.Join(e.Path, metaFile))
		if err != nil {
			return fmt.Errorf("adopt %s: %w", id, err)
		}
		status, err := readOptional(filepath.Join(e.Path, statusFile))
		if err != nil {
			return fmt.Errorf("adopt %s: %w", id, err)
		}
		if exists, _ := s.lookup(id, nil); exists {
			return fmt.Errorf("adopt %s: the store already holds a record of it", id)
		}
		if err := s.commit(entry{op: opPut, id: id, meta: nonNil(meta), status: status}); err != nil {
			return fmt.Errorf("adopt %s: %w", id, err)
		}
		if err := os.RemoveAll(e.Path); err != nil {
			return fmt.Errorf("adopt %s: remove its quarantine entry: %w", id, err)
		}
		return syncDir(s.quarantineDir())
	}
	return fmt.Errorf("adopt %s: no quarantined record of it with its metadata (a record the journal lost cannot be adopted; stop it instead)", id)
}

func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// Delete removes the record of id; deleting a missing record is not an error.
func (s *Store) Delete(id string) error {
	if exists, _ := s.lookup(id, nil); exists {
		if err := s.commit(entry{op: opDelete, id: id}); err != nil {
			return fmt.Errorf("delete record %s: %w", id, err)
		}
	}
	// Only an unreadable record of an earlier release still has a directory.
	if s.isLegacyBad(id) {
		if err := os.RemoveAll(filepath.Join(s.dir, id)); err != nil {
			return fmt.Errorf("delete record %s: %w", id, err)
		}
		s.dropLegacyBad(id)
		return syncDir(s.dir)
	}
	return nil
}

func (s *Store) isLegacyBad(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.legacyBad, func(r Record) bool { return r.ID == id })
}

func (s *Store) dropLegacyBad(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.legacyBad = slices.DeleteFunc(s.legacyBad, func(r Record) bool { return r.ID == id })
}

// WriteFileAtomic writes data to a temporary file beside path, syncs it and renames it
// over path, so a reader (or a crash) sees the old or the new content, never a mix.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := writeTemp(path, data, perm)
	if err == nil {
		if err = os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// writeTemp writes data, synced, to a new temporary file beside path and returns its name.
func writeTemp(path string, data []byte, perm os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Save writes the record of id: its metadata too when meta is not nil (the first write,
// or a final one) and differs from what is stored, and always its status, each as JSON,
// in one journal entry.
func (s *Store) Save(id string, meta, status any) error {
	e := entry{op: opPut, id: id}
	if meta != nil {
		b, err := json.Marshal(meta)
		if err != nil {
			return fmt.Errorf("encode record %s: %w", id, err)
		}
		if exists, same := s.lookup(id, b); !exists || !same {
			e.meta = b
		}
	} else if exists, _ := s.lookup(id, nil); !exists {
		return fmt.Errorf("store %s: status without a record", id)
	}
	b, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("encode record %s: %w", id, err)
	}
	e.status = b
	return s.commit(e)
}

// CheckOwnDir checks that dir, the directory a record names as its object's own (removed
// whole with the object), is absolute, clean and named for id, the ID the record is kept
// under; empty is allowed (records of early releases have none, and nothing is removed).
func CheckOwnDir(dir, id string) error {
	if dir != "" && (!filepath.IsAbs(dir) || filepath.Clean(dir) != dir || filepath.Base(dir) != id) {
		return fmt.Errorf("dir %q is not a directory of its own (<run dir>/%s)", dir, id)
	}
	return nil
}
