// Package store keeps records on disk: one directory per object holding its immutable
// metadata (written once) and its mutable status (rewritten on every change), each
// replaced atomically. It knows nothing of what the records mean.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	if err := os.MkdirAll(filepath.Join(s.dir, id), 0o700); err != nil {
		return fmt.Errorf("store %s: %w", id, err)
	}
	return s.write(id, metaFile, data)
}

// WriteStatus replaces the status of id.
func (s *Store) WriteStatus(id string, data []byte) error {
	return s.write(id, statusFile, data)
}

func (s *Store) write(id, name string, data []byte) error {
	if err := WriteFileAtomic(filepath.Join(s.dir, id, name), data, 0o600); err != nil {
		return fmt.Errorf("store %s %s: %w", id, name, err)
	}
	return nil
}

// Record is one stored object as read back.
type Record struct {
	ID     string
	Meta   []byte
	Status []byte // nil if no status was ever written
}

// Load reads every record. A directory without metadata (a crash between mkdir and the
// first write) is returned with nil Meta so the caller can clean up after it.
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
		if r.Meta, err = readOptional(filepath.Join(s.dir, r.ID, metaFile)); err != nil {
			return nil, err
		}
		if r.Status, err = readOptional(filepath.Join(s.dir, r.ID, statusFile)); err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return recs, nil
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
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
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
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
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
	if meta != nil {
		b, err := json.Marshal(meta)
		if err != nil {
			return fmt.Errorf("encode record %s: %w", id, err)
		}
		if err := s.WriteMeta(id, b); err != nil {
			return err
		}
	}
	b, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("encode record %s: %w", id, err)
	}
	return s.WriteStatus(id, b)
}
