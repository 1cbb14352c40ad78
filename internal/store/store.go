// Package store keeps records on disk: one directory per object holding its metadata
// (written at creation and when the object's description changes) and its mutable status
// (rewritten on every change), each replaced atomically; and, beside them, the records
// set aside as unreadable. It knows nothing of what the records mean.
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	metaFile   = "meta.json"
	statusFile = "status.json"
)

// Store is a directory of records, one subdirectory per ID.
type Store struct {
	dir string
}

// New returns the store in dir, creating it.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create store %s: %w", dir, err)
	}
	return &Store{dir: dir}, nil
}

// WriteMeta stores the metadata of id.
func (s *Store) WriteMeta(id string, data []byte) error {
	return s.writeRecord(id, []recordFile{{metaFile, data}})
}

// WriteStatus replaces the status of id.
func (s *Store) WriteStatus(id string, data []byte) error {
	return s.writeRecord(id, []recordFile{{statusFile, data}})
}

type recordFile struct {
	name string
	data []byte
}

// writeRecord replaces files of the record of id, each atomically. A status alone is one
// file sync and one sync of the record's directory. With the metadata, the directory is
// synced after the metadata's rename too, so no power loss shows a new status beside old
// metadata; and the store's directory is synced when the metadata is first written.
func (s *Store) writeRecord(id string, files []recordFile) error {
	dir := filepath.Join(s.dir, id)
	firstMeta := false
	if files[0].name == metaFile {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("store %s: %w", id, err)
		}
		old, err := os.ReadFile(filepath.Join(dir, metaFile))
		switch {
		case errors.Is(err, os.ErrNotExist):
			firstMeta = true
		case err == nil && bytes.Equal(old, files[0].data) && len(files) > 1:
			// Metadata as stored (and synced) already: only the status is written, one
			// file and one directory sync fewer (a pod's final record, most often).
			files = files[1:]
		}
	}
	var tmps []string
	defer func() {
		for _, t := range tmps {
			os.Remove(t)
		}
	}()
	for _, f := range files {
		tmp, err := writeTemp(filepath.Join(dir, f.name), f.data, 0o600)
		if err != nil {
			return fmt.Errorf("store %s %s: %w", id, f.name, err)
		}
		tmps = append(tmps, tmp)
	}
	for i, f := range files {
		if err := os.Rename(tmps[i], filepath.Join(dir, f.name)); err != nil {
			return fmt.Errorf("store %s %s: %w", id, f.name, err)
		}
		tmps[i] = ""
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("store %s: %w", id, err)
		}
	}
	if firstMeta {
		if err := syncDir(s.dir); err != nil {
			return fmt.Errorf("store %s: %w", id, err)
		}
	}
	return nil
}

// Record is one stored object as read back.
type Record struct {
	ID     string
	Meta   []byte
	Status []byte // nil if no status was ever written
	// Err is why the record's files could not be read; the caller quarantines it.
	Err error
}

// Load reads every record. A directory without metadata (a crash between mkdir and the
// first write) is returned with nil Meta so the caller can clean up after it. A record
// whose files cannot be read is returned with Err: one bad record must not keep the
// daemon, and every other pod, from starting.
func (s *Store) Load() ([]Record, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("load store %s: %w", s.dir, err)
	}
	var recs []Record
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		r := Record{ID: e.Name()}
		var errs []error
		if r.Meta, err = readOptional(filepath.Join(s.dir, r.ID, metaFile)); err != nil {
			errs = append(errs, err)
		}
		if r.Status, err = readOptional(filepath.Join(s.dir, r.ID, statusFile)); err != nil {
			errs = append(errs, err)
		}
		r.Err = errors.Join(errs...)
		recs = append(recs, r)
	}
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
	if err := os.Rename(filepath.Join(s.dir, id), dst); err != nil {
		return "", fmt.Errorf("quarantine record %s: %w", id, err)
	}
	if err := syncDir(s.dir); err != nil {
		return dst, fmt.Errorf("quarantine record %s: %w", id, err)
	}
	if err := syncDir(q); err != nil {
		return dst, fmt.Errorf("quarantine record %s: %w", id, err)
	}
	if err := WriteFileAtomic(filepath.Join(dst, reasonFile), []byte(why+"\n"), 0o600); err != nil {
		return dst, fmt.Errorf("quarantine record %s: reason: %w", id, err)
	}
	return dst, nil
}

// Quarantined is a record Quarantine set aside.
type Quarantined struct {
	ID     string `json:"id"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ListQuarantined returns the records set aside, oldest name first.
func (s *Store) ListQuarantined() ([]Quarantined, error) {
	entries, err := os.ReadDir(s.quarantineDir())
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
		p := filepath.Join(s.quarantineDir(), e.Name())
		why, _ := os.ReadFile(filepath.Join(p, reasonFile))
		id, _, _ := strings.Cut(e.Name(), ".")
		out = append(out, Quarantined{ID: id, Path: p, Reason: strings.TrimSpace(string(why))})
	}
	return out, nil
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
	if err := os.RemoveAll(filepath.Join(s.dir, id)); err != nil {
		return fmt.Errorf("delete record %s: %w", id, err)
	}
	return syncDir(s.dir)
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
// or a final one), and always its status, each as JSON.
func (s *Store) Save(id string, meta, status any) error {
	var files []recordFile
	if meta != nil {
		b, err := json.Marshal(meta)
		if err != nil {
			return fmt.Errorf("encode record %s: %w", id, err)
		}
		files = append(files, recordFile{metaFile, b})
	}
	b, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("encode record %s: %w", id, err)
	}
	return s.writeRecord(id, append(files, recordFile{statusFile, b}))
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
