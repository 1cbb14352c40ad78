//go:build integration

package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// manyFiles is the number of empty files in manyFileImage's one layer: enough that its
// extraction and its deletion take seconds on a 2-core machine, where another pod's
// CreateContainer takes a fraction of one.
const manyFiles = 100_000

// manyFileImage is an image whose one layer is n empty files in /many (the audit's E4).
func manyFileImage(n int) ImageSpec {
	files := make([]File, 0, n+1)
	files = append(files, File{Path: "/many", Dir: true})
	for i := 0; i < n; i++ {
		files = append(files, File{Path: fmt.Sprintf("/many/f%07d", i)})
	}
	return ImageSpec{Layers: []Layer{{Files: files}}}
}

// manyFilesLeft reports whether any directory named "many" is left below the overlay
// driver's home: the layer's, where it is extracted, or the staging directory
// containers/storage moves it to and deletes it from.
func manyFilesLeft(overlay string) bool {
	for _, pat := range []string{"*/diff/many", "*/*/many", "*/*/*/many", "*/*/*/*/many", "*/*/*/*/*/many"} {
		if m, _ := filepath.Glob(filepath.Join(overlay, pat)); len(m) > 0 {
			return true
		}
	}
	return false
}

// A tenant's many-file image stalls no other pod's CreateContainer (audit 2026-11-26, N3):
// neither while its layer is extracted (containers/storage holds its layer store's write
// lock for all of it) nor while it is deleted (RemoveImage). Ordering, not durations:
// another pod's CreateContainer, and kubelet's ImageStatus before it, started once the
// extraction (the deletion) is under way, return while it still is.
func TestManyFileImageStallsNoCreate(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	start := time.Now()
	e.reg.Push(t, "test/many", "1", manyFileImage(manyFiles), nil)
	t.Logf("pushed a %d-file layer in %v", manyFiles, time.Since(start))
	ref := e.reg.Ref("test/many", "1")
	podID, pod := e.pod("other", "runc")
	overlay := filepath.Join(e.d.State, "storage", "overlay")
	n := 0
	// createOther is kubelet's pod start of another pod's container: ImageStatus of its
	// image, then CreateContainer.
	createOther := func(during string) {
		t.Helper()
		n++
		begin := time.Now()
		if _, err := e.d.IS.ImageStatus(ctx, imgSpec(e.image), false); err != nil {
			t.Fatalf("ImageStatus during the %s: %v", during, err)
		}
		if _, err := e.d.RS.CreateContainer(ctx, podID, e.ctrConfig(fmt.Sprintf("other-%d", n), "sleep", "1000"), pod); err != nil {
			t.Fatalf("CreateContainer during the %s: %v", during, err)
		}
		t.Logf("ImageStatus and CreateContainer of another pod during the %s: %v", during, time.Since(begin))
	}

	pulled := make(chan error, 1)
	go func() {
		_, err := e.d.IS.PullImage(ctx, imgSpec(ref), nil, nil)
		pulled <- err
	}()
	var diff string
	waitFor(t, 3*time.Minute, "the many-file layer's extraction to start", func() (bool, string) {
		if m, _ := filepath.Glob(filepath.Join(overlay, "*", "diff", "many")); len(m) > 0 {
			diff = m[0]
			return true, ""
		}
		select {
		case err := <-pulled:
			t.Fatalf("the pull ended (%v) before its extraction was seen", err)
		default:
		}
		return false, "no layer directory with /many yet"
	})
	createOther("pull")
	last := filepath.Join(diff, fmt.Sprintf("f%07d", manyFiles-1))
	select {
	case err := <-pulled:
		t.Errorf("another pod's CreateContainer returned after the many-file pull (%v): it waited for the extraction", err)
		pulled <- err
	default:
		if _, err := os.Lstat(last); err == nil {
			t.Errorf("another pod's CreateContainer returned after the many-file layer was extracted: it waited for the extraction")
		}
	}
	if err := <-pulled; err != nil {
		t.Fatalf("PullImage of the many-file image: %v", err)
	}
	t.Logf("pull done %v after it started", time.Since(start))

	layerDir := filepath.Dir(filepath.Dir(diff))
	removed := make(chan error, 1)
	go func() { removed <- e.d.IS.RemoveImage(ctx, imgSpec(ref)) }()
	waitFor(t, 2*time.Minute, "the removal to move the many-file layer away", func() (bool, string) {
		if _, err := os.Lstat(layerDir); errors.Is(err, os.ErrNotExist) {
			return true, ""
		}
		select {
		case err := <-removed:
			t.Fatalf("the removal ended (%v) before the layer was seen moved", err)
		default:
		}
		return false, "layer directory still in place"
	})
	createOther("removal")
	select {
	case err := <-removed:
		t.Errorf("another pod's CreateContainer returned after the many-file image's removal (%v): it waited for the deletion", err)
		removed <- err
	default:
		if !manyFilesLeft(overlay) {
			t.Errorf("another pod's CreateContainer returned after the many-file layer was deleted: it waited for the deletion")
		}
	}
	if err := <-removed; err != nil {
		t.Fatalf("RemoveImage of the many-file image: %v", err)
	}
	if manyFilesLeft(overlay) {
		t.Errorf("the many-file layer is left after RemoveImage returned")
	}
	if st, err := e.d.IS.ImageStatus(ctx, imgSpec(ref), false); err != nil || st.Image != nil {
		t.Errorf("ImageStatus of the removed image: %v, %v", st, err)
	}
}
