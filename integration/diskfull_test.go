//go:build integration

package integration

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A record that cannot be written for want of space (ENOSPC) fails the call with the file
// system's own words, leaves no half-made pod or record, and loses no earlier record: the
// pods made before are listed as they were, also after a kill -9, and once space is back
// the call succeeds.
func TestRecordsDiskFull(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	recs := filepath.Join(e.d.State, "sandboxes")
	e.d.Stop()
	if left := stateEntries(recs); len(left) != 0 {
		t.Fatalf("records before the test: %v", left)
	}
	// The pod records on a file system of their own, 1 MiB.
	if err := syscall.Mount("tmpfs", recs, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=1m,mode=0700"); err != nil {
		t.Fatal(err)
	}
	mounted := true
	defer func() {
		if mounted {
			_ = syscall.Unmount(recs, syscall.MNT_DETACH)
		}
	}()
	e.d.Start()
	podA, _ := e.pod("full-a", "runc")

	filler := filepath.Join(recs, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			break
		}
	}
	f.Close()

	cfgB := podConfig("full-b", runtimeapi.NamespaceMode_CONTAINER)
	_, err = e.d.RS.RunPodSandbox(ctx, cfgB, "runc")
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("RunPodSandbox on a full disk = %v, want the file system's error", err)
	}
	pods, err := e.d.RS.ListPodSandbox(ctx, nil)
	if err != nil || len(pods) != 1 || pods[0].Id != podA {
		t.Errorf("pods after the failure: %v (%v), want only %s", pods, err, podA[:12])
	}
	if entries, _ := os.ReadDir(recs); len(entries) != 2 {
		t.Errorf("records after the failure: %v, want the first pod's and the filler", entries)
	}
	// The earlier record survives a crash on the full disk.
	e.d.Restart(true)
	if st, err := e.d.RS.PodSandboxStatus(ctx, podA, false); err != nil || st.Status.State.String() != "SANDBOX_READY" {
		t.Errorf("the first pod after a kill -9 on the full disk: %v %v", st, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	podB, err := e.d.RS.RunPodSandbox(ctx, cfgB, "runc")
	if err != nil {
		t.Fatalf("RunPodSandbox once space is back: %v", err)
	}
	for _, id := range []string{podA, podB} {
		if err := e.d.RS.StopPodSandbox(ctx, id); err != nil {
			t.Error(err)
		}
		if err := e.d.RS.RemovePodSandbox(ctx, id); err != nil {
			t.Error(err)
		}
	}
	e.d.Stop()
	if err := syscall.Unmount(recs, 0); err != nil {
		t.Errorf("unmount: %v", err)
	}
	mounted = false
	e.d.Start() // the harness's own checks run on a live daemon
}

// A pull whose layer does not fit (ENOSPC in the pull's temporary dir, where layers are
// written before they are applied) fails naming the image and the file system's error,
// leaves no layer, image or temporary file, and loses no image pulled before, also
// across a kill -9; once space is back the pull succeeds.
func TestLayersDiskFull(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	tmp := filepath.Join(e.d.State, "tmp")
	big := make([]byte, 4<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	e.reg.Push(t, "test/big", "1", ImageSpec{Layers: []Layer{{Files: []File{{Path: "/big", Content: string(big)}}}}}, nil)
	ref := e.reg.Ref("test/big", "1")
	e.d.Stop()
	if err := syscall.Mount("tmpfs", tmp, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=1m,mode=0700"); err != nil {
		t.Fatal(err)
	}
	mounted := true
	defer func() {
		if mounted {
			_ = syscall.Unmount(tmp, syscall.MNT_DETACH)
		}
	}()
	e.d.Start()
	n := testNet{}
	before := e.nodeState(n)

	_, err := e.d.IS.PullImage(ctx, imgSpec(ref), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), "test/big") {
		t.Fatalf("PullImage with no room for its layer = %v, want an error naming the image and ENOSPC", err)
	}
	if after := e.nodeState(n); !maps2Equal(before, after) {
		t.Errorf("the failed pull left:\n%s", stateDiff(before, after))
	}
	e.d.Restart(true)
	if st, err := e.d.IS.ImageStatus(ctx, imgSpec(e.image), false); err != nil || st.Image == nil {
		t.Errorf("the image pulled before, after a kill -9 on the full disk: %v %v", st, err)
	}
	e.d.Stop()
	if err := syscall.Unmount(tmp, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	e.d.Start()
	if _, err := e.d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
		t.Fatalf("PullImage once space is back: %v", err)
	}
	if err := e.d.IS.RemoveImage(ctx, imgSpec(ref)); err != nil {
		t.Error(err)
	}
}
