//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containers/storage/pkg/reexec"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/image"
)

func init() {
	// internal/image unpacks layers by re-executing this test binary (containers/storage).
	if reexec.Init() {
		os.Exit(0)
	}
}

// The rootfs API the container work builds on: an image's layers unpacked with their
// whiteouts and opaque directories honoured, a writable layer per container, and an image
// removed while in use keeping its layers until its last container goes.
func TestRootfsFromImage(t *testing.T) {
	reg := startRegistry(t, nil)
	lower := busyboxLayer(t)
	lower.Files = append(lower.Files,
		File{Path: "/opt", Dir: true},
		File{Path: "/opt/keep", Content: "kept"},
		File{Path: "/opt/gone", Content: "deleted by the next layer"},
		File{Path: "/cfg", Dir: true},
		File{Path: "/cfg/old-1", Content: "hidden by the opaque dir"},
		File{Path: "/cfg/old-2", Content: "hidden by the opaque dir"},
	)
	upper := Layer{Files: []File{
		{Path: "/opt", Dir: true},
		{Path: "/opt/gone", Whiteout: true},
		{Path: "/cfg", Opaque: true},
		{Path: "/cfg/new", Content: "only this"},
		{Path: "/etc/motd", Content: "top layer"},
	}}
	reg.Push(t, "layers/whiteouts", "1", ImageSpec{Layers: []Layer{lower, upper}, Config: ocispec.ImageConfig{Cmd: []string{"sh"}}}, nil)

	dir := t.TempDir()
	// A shared mount, as / is on a systemd node (it is private on this test host): what
	// is mounted below it propagates to its peers unless made private.
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	open := func() *image.Service {
		svc, err := image.New(image.Options{
			StateRoot: filepath.Join(dir, "state"),
			RunRoot:   filepath.Join(dir, "run"),
			Config: config.Image{StorageDriver: "overlay", MaxParallelDownloads: 4,
				Registries: []config.Registry{{Location: reg.Addr, Insecure: true}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	svc := open()
	var closeOnce sync.Once
	closeSvc := func() { closeOnce.Do(func() { svc.Close() }) }
	t.Cleanup(closeSvc)
	ref := reg.Ref("layers/whiteouts", "1")
	id, err := svc.Pull(context.Background(), ref, image.Auth{}, "")
	if err != nil {
		t.Fatal(err)
	}
	rootfs, imageID, err := svc.CreateRootfs("ctr-1", ref, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if imageID != id {
		t.Errorf("rootfs image id %s, want %s", imageID, id)
	}
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(rootfs, p))
		return string(b)
	}
	if read("opt/keep") != "kept" || read("etc/motd") != "top layer" || read("cfg/new") != "only this" {
		t.Errorf("files of the layers missing: keep=%q motd=%q new=%q", read("opt/keep"), read("etc/motd"), read("cfg/new"))
	}
	if _, err := os.Lstat(filepath.Join(rootfs, "opt/gone")); !os.IsNotExist(err) {
		t.Errorf("whiteout not honoured: /opt/gone exists (%v)", err)
	}
	entries, _ := os.ReadDir(filepath.Join(rootfs, "cfg"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"new"}) {
		t.Errorf("opaque dir /cfg holds %v, want only [new]", names)
	}
	if fi, err := os.Stat(filepath.Join(rootfs, "bin/busybox")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("/bin/busybox: %v %v", fi, err)
	}
	// The rootfs is writable and private to the container.
	if err := os.WriteFile(filepath.Join(rootfs, "tmp/scratch"), []byte("x"), 0o644); err != nil {
		t.Errorf("rootfs not writable: %v", err)
	}

	// The writable layer is rtshimd's own overlay of the image's layers; its root has the
	// image root's mode and owner, as containers/storage gives it.
	if want := filepath.Join(dir, "state", "storage", "rtshimd-rootfs", "ctr-1", "merged"); rootfs != want {
		t.Errorf("rootfs at %s, want %s", rootfs, want)
	}
	tops, _ := filepath.Glob(filepath.Join(dir, "state", "storage", "overlay", "*", "lower"))
	if len(tops) != 1 {
		t.Fatalf("image layers with a lower layer: %v, want the top one", tops)
	}
	var imgRoot, ctrRoot syscall.Stat_t
	if err := syscall.Stat(filepath.Join(filepath.Dir(tops[0]), "diff"), &imgRoot); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(rootfs, &ctrRoot); err != nil {
		t.Fatal(err)
	}
	if imgRoot.Mode != ctrRoot.Mode || imgRoot.Uid != ctrRoot.Uid || imgRoot.Gid != ctrRoot.Gid {
		t.Errorf("rootfs root mode %o owner %d:%d, the image's %o %d:%d", ctrRoot.Mode, ctrRoot.Uid, ctrRoot.Gid, imgRoot.Mode, imgRoot.Uid, imgRoot.Gid)
	}
	// Mounted in a private mount of the store's (as containers/storage's home is): not
	// propagated to the host's other mount namespaces.
	if tags := mountPropagation(t, rootfs); strings.Contains(tags, "shared:") {
		t.Errorf("the rootfs mount propagates to the host's peers: %q", tags)
	}

	// A daemon restart: the mounted layer is the container's still (the next service
	// knows its image is in use); an unmounted one (what a reboot leaves) is kept for its
	// container's removal.
	if _, _, err := svc.CreateRootfs("ctr-unmounted", ref, nil, nil); err != nil {
		t.Fatal(err)
	}
	closeSvc()
	unmounted := filepath.Join(dir, "state", "storage", "rtshimd-rootfs", "ctr-unmounted")
	if err := syscall.Unmount(filepath.Join(unmounted, "merged"), 0); err != nil {
		t.Fatal(err)
	}
	svc = open()
	closeOnce = sync.Once{}
	if _, err := os.Stat(unmounted); err != nil {
		t.Errorf("an unmounted writable layer is gone after a restart: %v", err)
	}
	if err := svc.RemoveRootfs("ctr-unmounted"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(unmounted); !os.IsNotExist(err) {
		t.Errorf("an unmounted writable layer is left after its removal: %v", err)
	}
	if read("opt/keep") != "kept" {
		t.Error("the mounted rootfs lost its files over a restart")
	}

	// A layer whose link containers/storage lost: its rootfs is made by containers/storage,
	// which makes the link again.
	link, err := os.ReadFile(filepath.Join(filepath.Dir(tops[0]), "link"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "state", "storage", "overlay", "l", string(link))); err != nil {
		t.Fatal(err)
	}
	fallback, _, err := svc.CreateRootfs("ctr-fallback", ref, nil, nil)
	if err != nil {
		t.Fatalf("rootfs over a layer without its link: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(fallback, "etc/motd")); string(b) != "top layer" || slices.Contains(writableLayers(filepath.Join(dir, "state")), "ctr-fallback") {
		t.Errorf("rootfs over a layer without its link at %s: motd %q", fallback, b)
	}
	if err := svc.RemoveRootfs("ctr-fallback"); err != nil {
		t.Fatal(err)
	}

	// Removing the image while the container uses it: not listed, layers kept.
	if err := svc.Remove(ref); err != nil {
		t.Fatal(err)
	}
	if imgs, _ := svc.List(""); len(imgs) != 0 {
		t.Errorf("removed image still listed: %v", imgs)
	}
	if read("opt/keep") != "kept" {
		t.Error("removing the image took the files of a container that uses it")
	}
	// The overlay would still serve a deleted lower's files it has cached: look at the
	// store itself.
	if n := len(storageRecords(t, filepath.Join(dir, "state"), filepath.Join(dir, "run"), "layers")); n != 2 {
		t.Errorf("the store records %d layers after the image in use was removed, want its 2", n)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(tops[0]), "diff")); err != nil {
		t.Errorf("the top layer of the image in use was deleted: %v", err)
	}
	if _, _, err := svc.CreateRootfs("ctr-2", ref, nil, nil); err == nil {
		t.Error("a new container could use a removed image")
	}
	if err := svc.RemoveRootfs("ctr-1"); err != nil {
		t.Fatal(err)
	}
	if err := svc.RemoveRootfs("ctr-1"); err != nil {
		t.Errorf("second RemoveRootfs: %v", err)
	}
	closeSvc()
	if left := storageRecords(t, filepath.Join(dir, "state"), filepath.Join(dir, "run"), "layers"); len(left) > 0 {
		t.Errorf("layers left after the last container of a removed image: %s", left)
	}
	if m := slices.DeleteFunc(mountsUnder(dir), func(p string) bool { return p == dir }); len(m) > 0 {
		t.Errorf("mounts left after Close: %v", m)
	}
}

// mountPropagation is the optional fields (shared:N, master:N) of the mount at path in
// this process's mount table; the test fails if there is none.
func mountPropagation(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 6 && f[4] == path {
			var tags []string
			for _, x := range f[6:] {
				if x == "-" {
					break
				}
				tags = append(tags, x)
			}
			return strings.Join(tags, " ")
		}
	}
	t.Fatalf("%s is not mounted", path)
	return ""
}

// A runc container's rootfs leaves the node's mount table once runc has created the
// container (every later runc reads that table several times); the container keeps it,
// reads its image and writes its layer, over a kill -9 of the daemon too, and its removal
// leaves nothing. runsc's and the shim's stay mounted: they read the rootfs later.
func TestRootfsDetachedAfterCreate(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("detach-"+handler, handler)
			id, err := e.d.RS.CreateContainer(ctx, podID, e.ctrConfig("app", "sh", "-c", "echo written > /tmp/by-app; sleep 1000"), pod)
			if err != nil {
				t.Fatal(err)
			}
			merged := filepath.Join(e.d.State, "storage", "rtshimd-rootfs", id, "merged")
			upper := filepath.Join(e.d.State, "storage", "rtshimd-rootfs", id, "upper")
			if detached, want := !slices.Contains(mountsUnder(merged), merged), handler == "runc"; detached != want {
				t.Errorf("created container's rootfs out of the node's mount table: %v, want %v", detached, want)
			}
			if err := e.d.RS.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			if handler != "runsc" { // gVisor keeps a rootfs's writes in an overlay of its own
				waitFor(t, 30*time.Second, "the container's write in its layer", func() (bool, string) {
					b, err := os.ReadFile(filepath.Join(upper, "tmp", "by-app"))
					return string(b) == "written\n", fmt.Sprint(string(b), err)
				})
			}
			if out, _ := e.exec(id, "sh", "-c", "test -x /bin/busybox && cat /tmp/by-app"); out != "written" {
				t.Errorf("exec in the running container: %q", out)
			}
			e.d.Kill()
			e.d.Start()
			if out, _ := e.exec(id, "sh", "-c", "test -x /bin/busybox && cat /tmp/by-app"); out != "written" {
				t.Errorf("exec after a kill -9 of the daemon: %q", out)
			}
			if err := e.d.RS.StopContainer(ctx, id, 0); err != nil {
				t.Fatal(err)
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(mountsUnder(merged), merged) {
				t.Error("rootfs still mounted after the pod's removal")
			}
			if _, err := os.Stat(filepath.Dir(merged)); !os.IsNotExist(err) {
				t.Errorf("writable layer left after the pod's removal: %v", err)
			}
		})
	}
}
