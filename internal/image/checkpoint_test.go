package image

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// A container that swaps a directory of its writable layer for a link to a host tree
// while its changes are read for a checkpoint cannot have root archive that tree: the
// layer is read chrooted into it (security review R2, its deterministic reproduction:
// the swap happens while the walk is held inside a large file). The daemon also freezes
// the container meanwhile; this holds without that.
func TestRootfsDiffSwappedDirectory(t *testing.T) {
	s := newTestService(t)
	id := strings.Repeat("ab", 32)
	upper := filepath.Join(s.writableRoot(), id, "upper")
	if err := os.MkdirAll(filepath.Join(upper, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "b", "mine"), []byte("tenant"), 0o644); err != nil {
		t.Fatal(err)
	}
	// "a" sorts first and holds the walk inside it while the test reads slowly.
	if err := os.WriteFile(filepath.Join(upper, "a"), make([]byte, 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("HOST-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.writable[id] = "image"
	s.mu.Unlock()

	rc, _, err := s.RootfsDiff(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	swapped := false
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read the diff: %v", err)
		}
		names = append(names, hdr.Name)
		if hdr.Name == "a" && !swapped {
			if _, err := io.CopyN(io.Discard, tr, 64<<10); err != nil {
				t.Fatal(err)
			}
			// The walker is inside a; b was listed as a directory.
			if err := os.Rename(filepath.Join(upper, "b"), filepath.Join(upper, "b-away")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(host, filepath.Join(upper, "b")); err != nil {
				t.Fatal(err)
			}
			swapped = true
		}
		body, _ := io.ReadAll(tr)
		if strings.Contains(string(body), "HOST-SECRET") {
			t.Errorf("the diff holds the host's file as %s", hdr.Name)
		}
	}
	if !swapped {
		t.Fatalf("the diff had no entry a: %v", names)
	}
	for _, n := range names {
		if strings.Contains(n, "secret") {
			t.Errorf("the diff names %s: the walk left the layer (entries %v)", n, names)
		}
	}
}

// A writable layer whose files hold more than a checkpoint may (holes counted: a sparse
// file costs its tenant nothing on disk) is refused before anything is read.
func TestRootfsDiffBounded(t *testing.T) {
	s := newTestService(t)
	id := strings.Repeat("cd", 32)
	upper := filepath.Join(s.writableRoot(), id, "upper")
	if err := os.MkdirAll(upper, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(upper, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s.mu.Lock()
	s.writable[id] = "image"
	s.mu.Unlock()
	_, _, err = s.RootfsDiff(id, 1<<30)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "checkpoints.max_size") {
		t.Errorf("RootfsDiff of a 1 TiB sparse file: %v, want it refused naming checkpoints.max_size", err)
	}
}
