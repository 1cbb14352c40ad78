package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// testTable is a handler table as StoreOf reads it: row name → separate; "" is runc.
type testTable struct {
	mu   sync.Mutex
	rows map[string]bool
}

func (tt *testTable) storeOf(h string) (string, bool, error) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if h == "" {
		h = "runc"
	}
	sep, ok := tt.rows[h]
	if !ok {
		return "", false, fmt.Errorf("%q is not a runtime handler of this node: %w", h, errdefs.ErrInvalidArgument)
	}
	return h, sep, nil
}

func (tt *testTable) set(row string, sep bool) {
	tt.mu.Lock()
	tt.rows[row] = sep
	tt.mu.Unlock()
}

func newTestStores(t *testing.T, dir string, tt *testTable) *Stores {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the stores and the writable layers mount")
	}
	tt.mu.Lock()
	rows := map[string]bool{}
	for k, v := range tt.rows {
		rows[k] = v
	}
	tt.mu.Unlock()
	s, err := NewStores(Options{StateRoot: filepath.Join(dir, "state"), RunRoot: filepath.Join(dir, "run"), Config: config.Image{StorageDriver: "overlay", MaxParallelDownloads: 1}}, tt.storeOf, rows)
	if err != nil {
		t.Skipf("no overlay image store here: %v", err)
	}
	return s
}

// A row with its own store (kata) holds its images apart: the default row and the shared
// ones neither see nor use them, lists name the row of each image, a container's layers
// are found by its ID wherever they are, a row's choice holds until restart, a row a
// reload adds gets its store at first use, and a store no row asks for any more is
// removed at start once no container uses it.
func TestStoresSeparate(t *testing.T) {
	dir := t.TempDir()
	tt := &testTable{rows: map[string]bool{"runc": false, "runsc": false, "kata": true}}
	s := newTestStores(t, dir, tt)
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	kataDir := filepath.Join(dir, "state", StoresDir, "kata")
	if _, err := os.Stat(filepath.Join(kataDir, "storage")); err != nil {
		t.Fatalf("kata's own store was not made at start: %v", err)
	}
	kata, _, err := s.storeFor("kata")
	if err != nil || kata == s.shared {
		t.Fatalf("storeFor(kata) = %p, %v; want its own store", kata, err)
	}
	id := testImage(t, kata, "vmimage")
	shared := testImage(t, s.shared, "plain")

	if im, err := s.Status("kata", id); err != nil || im.Handler != "kata" {
		t.Errorf("Status(kata) = %+v, %v; want the image, handler kata", im, err)
	}
	for _, h := range []string{"", "runc", "runsc"} {
		_, err := s.Status(h, id)
		if !errors.Is(err, errdefs.ErrNotFound) || strings.Contains(err.Error(), "separate") {
			t.Errorf("Status(%q) of kata's image = %v; want a plain ErrNotFound", h, err)
		}
	}
	if _, err := s.Status("kata", shared); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `"kata"`) || !strings.Contains(err.Error(), "RuntimeClassInImageCriApi") {
		t.Errorf("Status(kata) of a shared image = %v; want ErrNotFound naming the row and kubelet's gate", err)
	}
	if _, _, err := s.CreateRootfs("kata", "c-shared", shared, nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a kata container from a shared image = %v; want ErrNotFound", err)
	}
	// A row the table does not have (a pod's, its row removed by a reload): the shared store.
	if im, err := s.Status("gvisor", shared); err != nil || im.Handler != "" {
		t.Errorf("Status(a row not in the table) = %+v, %v; want the shared store's image", im, err)
	}

	all, err := s.List("", true, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, im := range all {
		got[im.ID] = im.Handler
	}
	if h, ok := got["sha256:"+id]; !ok || h != "kata" || len(got) != 2 {
		t.Errorf("List(all) = %v; want kata's image named kata and the shared one", got)
	}
	if only, _ := s.List("runc", false, ""); len(only) != 1 || only[0].Handler != "" {
		t.Errorf("List(runc) = %v; want the shared image only", only)
	}

	// A container of a kata pod: its layers in kata's store, found by ID.
	rootfs, imgID, err := s.CreateRootfs("kata", "c1", id, nil, nil)
	if err != nil || imgID != "sha256:"+id || !strings.HasPrefix(rootfs, kataDir) {
		t.Fatalf("CreateRootfs(kata) = %s, %s, %v; want a rootfs below %s", rootfs, imgID, err, kataDir)
	}
	if s.holder("c1") != kata || s.holder("c-none") != s.shared {
		t.Error("holder: c1 is not found in kata's store, or an unknown ID not sent to the shared one")
	}
	if err := s.Remove("kata", id); err != nil {
		t.Fatal(err)
	}

	// The choice holds until restart; a row added later opens its store at first use.
	tt.set("kata", false)
	if svc, _, _ := s.storeFor("kata"); svc != kata {
		t.Error("a reload's change of kata's image_store applied before restart")
	}
	tt.set("vm", true)
	if svc, row, err := s.storeFor("vm"); err != nil || svc == s.shared || row != "vm" {
		t.Errorf("storeFor(vm), a row added with its own store = %v, %v", row, err)
	}
	s.Close()
	closed = true

	// At restart kata no longer asks for its own store: it holds c1, so it is kept and
	// c1's layers are still found; once c1 is gone, the next start removes it.
	s = newTestStores(t, dir, tt)
	if svc := s.holder("c1"); svc == s.shared {
		t.Error("c1's layers are not found after a restart that made kata's store a left-over")
	}
	if imgs, _ := s.List("", true, ""); len(imgs) != 1 {
		t.Errorf("List(all) after restart = %d images; want only the shared one (kata's store is no row's)", len(imgs))
	}
	if err := s.RemoveRootfs("c1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	tt.set("vm", false)
	s = newTestStores(t, dir, tt)
	defer s.Close()
	for _, row := range []string{"kata", "vm"} {
		if _, err := os.Stat(filepath.Join(dir, "state", StoresDir, row)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the unused store of %s, a row without its own now, is still there: %v", row, err)
		}
	}
}
