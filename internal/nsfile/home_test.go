package nsfile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	// As the daemon's main: no pinning thread may be the main one, which /proc/self shows.
	runtime.LockOSThread()
}

// nodeMounts are the node's mount points that contain s.
func nodeMounts(t *testing.T, s string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.Contains(f[4], s) {
			out = append(out, f[4])
		}
	}
	return out
}

func nsIno(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// Pods' namespaces pinned in the home: reachable on the node through the link, new
// namespaces of their own, none of their pins in the node's mount table; the home
// outlives a daemon that still has pods in it, and goes with the last one.
func TestHome(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	// Under a shared mount with a slave peer, as /run is on a systemd node: the kernel
	// refuses to propagate a mount namespace's pin, so the home must pin in a private
	// mount of its own.
	run := t.TempDir()
	if err := unix.Mount(run, run, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", run, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	peer := exec.Command("unshare", "--mount", "--propagation", "slave", "sleep", "60")
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = peer.Process.Kill()
		_ = peer.Wait()
		_ = unix.Unmount(filepath.Join(run, "nshome", "mnt"), unix.MNT_DETACH)
		_ = unix.Unmount(filepath.Join(run, "nshome"), unix.MNT_DETACH)
		_ = unix.Unmount(run, unix.MNT_DETACH)
	})
	time.Sleep(100 * time.Millisecond) // the peer's namespace exists
	h, err := OpenHome(run)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := h.Pin("pod-a", []Kind{Net, IPC, UTS}, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []Kind{Net, IPC, UTS} {
		want := filepath.Join(run, "pinned", "pod-a", string(k))
		if paths[k] != want {
			t.Errorf("%s pin at %q, want %q", k, paths[k], want)
		}
		if !IsPinned(want) {
			t.Errorf("%s: not a namespace", want)
		}
		if nsIno(t, want) == nsIno(t, "/proc/self/ns/"+string(k)) {
			t.Errorf("%s pin is the node's own namespace", k)
		}
	}
	if _, err := h.Pin("pod-b", []Kind{Net}, ""); err != nil {
		t.Fatal(err)
	}
	if m := nodeMounts(t, "pod-"); len(m) != 0 {
		t.Errorf("pins in the node's mount table: %v", m)
	}
	if m := nodeMounts(t, run); !slices.Equal(m, []string{run, filepath.Join(run, "nshome"), filepath.Join(run, "nshome", "mnt")}) {
		t.Errorf("node mounts at the run root: %v, want the home's dir and pin alone", m)
	}

	// The next daemon finds the pods' pins where they were; in between, the link names
	// no dead process's descriptor.
	netA := nsIno(t, paths[Net])
	h.Close()
	if _, err := os.Lstat(filepath.Join(run, "pinned")); !os.IsNotExist(err) {
		t.Errorf("link of a closed home: %v", err)
	}
	if _, err := h.Pin("pod-c", []Kind{Net}, ""); err == nil {
		t.Error("pinned in a closed home")
	}
	h, err = OpenHome(run)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := h.Pods(); err != nil || !slices.Equal(ids, []string{"pod-a", "pod-b"}) {
		t.Errorf("pods in the reopened home: %v %v", ids, err)
	}
	if !IsPinned(paths[Net]) || nsIno(t, paths[Net]) != netA {
		t.Error("pod-a's netns is not the same after the home was reopened")
	}

	for _, k := range []Kind{Net, IPC, UTS} {
		if err := h.Unpin("pod-a", k); err != nil {
			t.Fatal(err)
		}
		if err := h.Unpin("pod-a", k); err != nil {
			t.Errorf("second unpin of %s: %v", k, err)
		}
	}
	if ids, _ := h.Pods(); !slices.Equal(ids, []string{"pod-b"}) {
		t.Errorf("pods after pod-a's unpin: %v", ids)
	}
	if err := h.Unpin("pod-b", Net); err != nil {
		t.Fatal(err)
	}
	if err := h.Unpin("../x", Net); err == nil {
		t.Error("unpin of a path outside the home accepted")
	}
	// A pod no record names is collected.
	if _, err := h.Pin("pod-d", []Kind{Net, UTS}, "d"); err != nil {
		t.Fatal(err)
	}
	h.Collect(func(id string) bool { return id != "pod-d" })
	if ids, _ := h.Pods(); len(ids) != 0 {
		t.Errorf("pods left after collecting: %v", ids)
	}
	h.Close()
	if m := nodeMounts(t, run); !slices.Equal(m, []string{run}) {
		t.Errorf("an empty home left on the node: %v", m)
	}
	if _, err := os.Lstat(filepath.Join(run, "pinned")); !os.IsNotExist(err) {
		t.Errorf("link of a released home: %v", err)
	}
}

// A pin at the home's place that cannot be read as one is never replaced: the pods'
// namespaces may be in it.
func TestHomeNotReplaced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	run := t.TempDir()
	dir := filepath.Join(run, "nshome")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A network namespace's pin where the home's should be.
	f, err := os.Create(filepath.Join(dir, "mnt"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := unix.Mount("/proc/self/ns/net", filepath.Join(dir, "mnt"), "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(dir, "mnt"), unix.MNT_DETACH) })
	if _, err := OpenHome(run); !errors.Is(err, ErrHomeHeld) {
		t.Fatalf("OpenHome over another pin: %v, want ErrHomeHeld", err)
	}
	if !IsPinned(filepath.Join(dir, "mnt")) {
		t.Error("the pin was replaced")
	}
	// A file whose pin is gone (unmounted) is replaced by a new home.
	if err := unix.Unmount(filepath.Join(dir, "mnt"), unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	h, err := OpenHome(run)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
}

// A pod's tmpfs in the home: written through the link, not in the node's mount table,
// lent to the node as a copy of the same files and taken back, and gone with its pod.
func TestHomeTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	run := t.TempDir()
	t.Cleanup(func() {
		_ = unix.Unmount(filepath.Join(run, "nshome", "mnt"), unix.MNT_DETACH)
		_ = unix.Unmount(filepath.Join(run, "nshome"), unix.MNT_DETACH)
	})
	h, err := OpenHome(run)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !h.CanLend() {
		t.Fatal("the home cannot lend on this kernel (5.2 or later has open_tree and move_mount)")
	}
	root, err := h.MountTmpfs("pod-t", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size=1m")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "hosts"), []byte("in the home\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := nodeMounts(t, run); len(m) != 2 { // the home's pin and its private dir
		t.Errorf("node mounts under %s = %q, want the home's two only", run, m)
	}
	if ids, err := h.Pods(); err != nil || !slices.Equal(ids, []string{"pod-t"}) {
		t.Errorf("pods = %q, %v; want pod-t", ids, err)
	}
	target := filepath.Join(run, "sandboxes", "pod-t", "tmpfs")
	if err := os.MkdirAll(target, 0o700); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		if err := h.LendTmpfs("pod-t", target); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(target, "hosts"))
		if err != nil || string(b) != "in the home\n" {
			t.Fatalf("lent tmpfs hosts = %q, %v", b, err)
		}
		// A write on the node's copy is the home's too.
		if err := os.WriteFile(filepath.Join(target, "shm"), []byte{byte(round)}, 0o644); err != nil {
			t.Fatal(err)
		}
		if m := nodeMounts(t, target); !slices.Equal(m, []string{target}) {
			t.Errorf("node mounts at the target = %q, want it", m)
		}
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
		if m := nodeMounts(t, target); len(m) != 0 {
			t.Errorf("node mounts after the unmount = %q", m)
		}
		if b, err := os.ReadFile(filepath.Join(root, "shm")); err != nil || len(b) != 1 || b[0] != byte(round) {
			t.Errorf("home's shm = %v, %v; want the lent copy's write", b, err)
		}
	}
	if err := h.LendTmpfs("pod-none", target); err == nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		t.Error("lent a tmpfs of a pod that has none")
	}
	if err := h.UnmountTmpfs("pod-t"); err != nil {
		t.Fatal(err)
	}
	if err := h.UnmountTmpfs("pod-t"); err != nil {
		t.Errorf("second unmount: %v", err)
	}
	if ids, err := h.Pods(); err != nil || len(ids) != 0 {
		t.Errorf("pods after the unmount = %q, %v; want none", ids, err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tmpfs root after the unmount: %v", err)
	}
}
