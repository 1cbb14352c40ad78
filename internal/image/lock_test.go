package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containers/storage"
	"github.com/containers/storage/pkg/reexec"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// TestMain lets containers/storage re-execute the test binary to extract layers (its
// chrooted untar), as the daemon's main does.
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

// stalledLayer is a layer diff whose first Read says that containers/storage has taken its
// layer store's write lock (PutLayer reads the diff under it, as a pull's extraction does)
// and then waits for release: the lock stays held until then.
type stalledLayer struct {
	once    sync.Once
	locked  chan struct{}
	release chan struct{}
	rest    io.Reader
}

func (r *stalledLayer) Read(p []byte) (int, error) {
	r.once.Do(func() {
		close(r.locked)
		<-r.release
	})
	return r.rest.Read(p)
}

// oneFileTar is an uncompressed layer with the file name in it.
func oneFileTar(t *testing.T, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testImage stores an image named name with one layer and a config, as a pull leaves it,
// and returns its ID.
func testImage(t *testing.T, s *Service, name string) string {
	t.Helper()
	layer, _, err := s.store.PutLayer("", "", nil, "", false, nil, bytes.NewReader(oneFileTar(t, name)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := []byte(`{"architecture":"amd64","os":"linux","config":{"User":"1000"},"rootfs":{"type":"layers","diff_ids":[]},"name":"` + name + `"}`)
	sum := sha256.Sum256(cfg)
	id := hex.EncodeToString(sum[:])
	if _, err := s.store.CreateImage(id, []string{"docker.io/library/" + name + ":1"}, layer.ID, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.store.SetImageBigData(id, "sha256:"+id, cfg, nil); err != nil {
		t.Fatal(err)
	}
	s.refreshSize(id) // as a pull's end does
	return id
}

func newTestService(t *testing.T) *Service {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the store and the writable layers mount")
	}
	dir := t.TempDir()
	s, err := New(Options{StateRoot: filepath.Join(dir, "state"), RunRoot: filepath.Join(dir, "run"), Config: config.Image{StorageDriver: "overlay", MaxParallelDownloads: 1}})
	if err != nil {
		t.Skipf("no overlay image store here: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// within runs f and fails the test if it has not returned by the time the layer store's
// writer is released: the bound is the test's, far above what f takes, and f returning
// before release is what is asserted (release only comes after).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s waited for the layer store's lock, which a pull's extraction holds", what)
	}
}

// Audit 2026-11-26, N3: while containers/storage holds its layer store's write lock (a
// pull's layer extraction), CreateRootfs, Status, List and Config (the create path's and
// kubelet's image lookups) still complete, and so does a removal's bookkeeping: the image
// being removed is refused at once, another image's rootfs is made.
func TestCreatePathDoesNotWaitForLayerLock(t *testing.T) {
	s := newTestService(t)
	a := testImage(t, s, "a")
	b := testImage(t, s, "b")
	wantSize := s.imageSize(a)
	if wantSize == 0 {
		t.Fatalf("image size 0")
	}

	w := &stalledLayer{locked: make(chan struct{}), release: make(chan struct{}), rest: bytes.NewReader(oneFileTar(t, "pulled"))}
	written := make(chan error, 1)
	go func() {
		_, _, err := s.store.PutLayer("", "", nil, "", false, nil, w)
		written <- err
	}()
	released := false
	release := func() {
		if !released {
			released = true
			close(w.release)
		}
	}
	defer release()
	<-w.locked

	removed := make(chan error, 1)
	within(t, "the create path", func() {
		root, id, err := s.CreateRootfs("ctr-a", "a:1", nil, nil)
		if err != nil || id != "sha256:"+a {
			t.Errorf("CreateRootfs = %q, %q, %v", root, id, err)
		} else if _, err := os.Stat(filepath.Join(root, "a")); err != nil {
			t.Errorf("the rootfs lacks the image's file: %v", err)
		}
		im, err := s.Status("sha256:" + a)
		if err != nil || im.Size != wantSize || im.User != "1000" || len(im.RepoTags) != 1 || im.RepoTags[0] != "docker.io/library/a:1" {
			t.Errorf("Status = %+v, %v", im, err)
		}
		if list, err := s.List(""); err != nil || len(list) != 2 {
			t.Errorf("List = %v, %v", list, err)
		}
		if _, err := s.Config("sha256:" + a); err != nil {
			t.Errorf("Config: %v", err)
		}
		// A removal of b: its names are taken through the layer store, so it waits for
		// the writer, but without s.mu; b is refused and hidden meanwhile.
		go func() { removed <- s.Remove("b:1") }()
		for !s.isDeleting(b) {
			select {
			case err := <-removed:
				t.Errorf("Remove(b) returned %v while the layer store was held", err)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		if _, _, err := s.CreateRootfs("ctr-b", "b:1", nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("CreateRootfs of an image being removed = %v, want not found", err)
		}
		if _, err := s.Status("b:1"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Status of an image being removed = %v, want not found", err)
		}
		if list, err := s.List(""); err != nil || len(list) != 1 {
			t.Errorf("List while b is removed = %v, %v", list, err)
		}
		root, _, err = s.CreateRootfs("ctr-a2", "sha256:"+a, nil, nil)
		if err != nil || root == "" {
			t.Errorf("CreateRootfs of another image while one is removed: %v", err)
		}
	})
	select {
	case err := <-written:
		t.Fatalf("the layer write ended (%v) before it was released", err)
	default:
	}
	release()
	if err := <-written; err != nil {
		t.Fatalf("PutLayer: %v", err)
	}
	if err := <-removed; err != nil {
		t.Fatalf("Remove(b): %v", err)
	}
	if _, err := s.store.Image(b); !errors.Is(err, storage.ErrImageUnknown) {
		t.Errorf("image b after its removal: %v", err)
	}
	if s.isDeleting(b) {
		t.Errorf("b still marked as being deleted")
	}
	for _, id := range []string{"ctr-a", "ctr-a2"} {
		if err := s.RemoveRootfs(id); err != nil {
			t.Errorf("RemoveRootfs(%s): %v", id, err)
		}
	}
}

// An image removed while a container uses it is deleted with that container's rootfs,
// also when the container goes while the removal looks at its users (deleting's flag).
func TestRemovedImageGoesWithLastUser(t *testing.T) {
	s := newTestService(t)
	a := testImage(t, s, "a")
	if _, _, err := s.CreateRootfs("ctr-a", "a:1", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("a:1"); err != nil {
		t.Fatal(err)
	}
	if img, err := s.store.Image(a); err != nil || !removed(img) {
		t.Fatalf("image in use after its removal: %v, %v (want kept, hidden)", img, err)
	}
	if _, err := s.Status(a); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status of a removed image in use = %v", err)
	}
	// A user going while a deleter is under way leaves the deletion to it.
	if !s.startDelete(a) {
		t.Fatal("startDelete")
	}
	if err := s.RemoveRootfs("ctr-a"); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	again := s.deleting[a]
	s.mu.Unlock()
	if !again {
		t.Errorf("the user's removal did not ask the deleter to look again")
	}
	if err := s.deleteUnused(a, "image removed"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Image(a); !errors.Is(err, storage.ErrImageUnknown) {
		t.Errorf("image after its last user went: %v", err)
	}
	if s.isDeleting(a) {
		t.Errorf("still marked as being deleted")
	}
}
