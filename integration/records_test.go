//go:build integration

package integration

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rtshimd/rtshimd/internal/store"
)

// record is the record of id in a stopped daemon's store ("sandboxes" or "containers"),
// as the next daemon will read it.
func record(t *testing.T, d *Daemon, kind, id string) store.Record {
	t.Helper()
	recs, err := store.Read(filepath.Join(d.State, kind))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no %s record %s", kind, id)
	return store.Record{}
}

// editRecord changes the record of id in a stopped daemon's store, as a daemon that died
// at some step (or a damaged disk) would have left it: edit gets the metadata and status
// and returns what to write (nil: unchanged).
func editRecord(t *testing.T, d *Daemon, kind, id string, edit func(meta, status []byte) ([]byte, []byte)) {
	t.Helper()
	r := record(t, d, kind, id)
	s, err := store.New(filepath.Join(d.State, kind))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	meta, status := edit(r.Meta, r.Status)
	if meta != nil {
		if err := s.WriteMeta(id, meta); err != nil {
			t.Fatal(err)
		}
	}
	if status != nil {
		if err := s.WriteStatus(id, status); err != nil {
			t.Fatal(err)
		}
	}
}

// stateEntries lists what a store directory holds besides its journal, and the IDs of the
// records in the journal: empty when no record of any kind is left.
func stateEntries(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if e.Name() != "journal" {
			out = append(out, e.Name())
		}
	}
	recs, _ := store.Read(dir)
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

// isGone: nothing is at p.
func isGone(p string) bool {
	_, err := os.Lstat(p)
	return errors.Is(err, os.ErrNotExist)
}

// storageRecords is what containers/storage records of kind ("containers", "layers" or
// "images") in a daemon's image store: the durable file under the state root and the
// transient one under the run root, where containers and their layers are kept.
func storageRecords(t testing.TB, stateRoot, runRoot, kind string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	for _, p := range []string{
		filepath.Join(stateRoot, "storage", "overlay-"+kind, kind+".json"),
		filepath.Join(runRoot, "storage", "overlay-"+kind, "volatile-"+kind+".json"),
	} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var recs []json.RawMessage
		if err := json.Unmarshal(b, &recs); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, recs...)
	}
	return out
}

// writableLayers lists the containers' writable layers rtshimd keeps beside
// containers/storage (internal/image/writable.go), by container ID.
func writableLayers(stateRoot string) []string {
	entries, _ := os.ReadDir(filepath.Join(stateRoot, "storage", "rtshimd-rootfs"))
	var out []string
	for _, en := range entries {
		out = append(out, en.Name())
	}
	return out
}
