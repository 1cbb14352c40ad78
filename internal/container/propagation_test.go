package container

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/sys/mountinfo"
)

// The mount holding a path is the deepest mount point above it, the last one mounted where
// several are stacked; a sibling with a common prefix is not above it.
func TestMountOf(t *testing.T) {
	infos := []*mountinfo.Info{
		{Mountpoint: "/", Optional: "shared:1"},
		{Mountpoint: "/var/lib/kubelet", Optional: "shared:5"},
		{Mountpoint: "/var/lib/kubelet", Optional: "master:7"},
		{Mountpoint: "/var/lib/kube", Optional: ""},
		{Mountpoint: "/tmp", Optional: ""},
	}
	for _, c := range []struct {
		path, at, optional string
		shared, slave      bool
	}{
		{"/var/lib/kubelet/pods/x/volumes", "/var/lib/kubelet", "master:7", false, true},
		{"/var/lib/kubelet", "/var/lib/kubelet", "master:7", false, true},
		{"/var/lib/kubeletx", "/", "shared:1", true, false},
		{"/tmp/a", "/tmp", "", false, false},
		{"/srv", "/", "shared:1", true, false},
	} {
		at, opt := mountOf(infos, c.path)
		if at != c.at || opt != c.optional || hasTag(opt, "shared:") != c.shared || hasTag(opt, "master:") != c.slave {
			t.Errorf("mountOf(%s) = %q %q, want %q %q (shared %v, slave %v)", c.path, at, opt, c.at, c.optional, c.shared, c.slave)
		}
	}
}

// A host path not made yet is judged by its nearest existing parent, symlinks resolved.
func TestExistingPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(dir, dir+"/link"); err != nil {
		t.Fatal(err)
	}
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, dir + "/link", dir + "/link/not/yet"} {
		if got, err := existingPath(p); err != nil || got != want {
			t.Errorf("existingPath(%s) = %q, %v; want %q", p, got, err, want)
		}
	}
}
