package nsfile

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

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
	run := t.TempDir()
	h, err := OpenHome(run)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unpin(filepath.Join(run, "nshome")) })
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
	if m := nodeMounts(t, run); !slices.Equal(m, []string{filepath.Join(run, "nshome")}) {
		t.Errorf("node mounts under the run root: %v, want the home's pin alone", m)
	}

	// The next daemon finds the pods' pins where they were.
	netA := nsIno(t, paths[Net])
	h.Close()
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
	h.Close()
	if m := nodeMounts(t, run); len(m) != 0 {
		t.Errorf("an empty home left on the node: %v", m)
	}
	if _, err := os.Lstat(filepath.Join(run, "pinned")); !os.IsNotExist(err) {
		t.Errorf("link of a released home: %v", err)
	}
}
