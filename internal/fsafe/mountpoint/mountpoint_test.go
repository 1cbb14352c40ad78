package mountpoint

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Two tmpfs stacked on one path both go; again, and on a missing path, is no error.
func TestDetachAll(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := DetachAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	var st, parent unix.Stat_t
	_ = unix.Stat(dir, &st)
	_ = unix.Stat(filepath.Dir(dir), &parent)
	if st.Dev != parent.Dev {
		t.Errorf("%s is still a mount point", dir)
	}
	if err := DetachAll(filepath.Join(dir, "missing")); err != nil {
		t.Error(err)
	}
}

// A symlink at the path is not followed: it is not a mount point, so nothing is detached
// and it is no error, whatever it points to (a name a container could have planted).
func TestDetachAllDoesNotFollowSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "node-mount")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := DetachAll(link); err != nil {
		t.Errorf("DetachAll(symlink): %v", err)
	}
	var st, parent unix.Stat_t
	_ = unix.Stat(target, &st)
	_ = unix.Stat(dir, &parent)
	if st.Dev == parent.Dev {
		t.Errorf("DetachAll followed %s and detached %s", link, target)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("the link is gone: %v", err)
	}
}

// IsMountPoint: a tmpfs's root is one; a directory in it, a symlink to it and a missing
// path are not (the last an error).
func TestIsMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if err := os.Mkdir(filepath.Join(mnt, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mnt, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{mnt: true, filepath.Join(mnt, "sub"): false, filepath.Join(dir, "link"): false, dir: false} {
		if got, err := IsMountPoint(p); err != nil || got != want {
			t.Errorf("IsMountPoint(%s) = %v, %v; want %v", p, got, err, want)
		}
	}
	if _, err := IsMountPoint(filepath.Join(dir, "missing")); err == nil {
		t.Error("IsMountPoint of a missing path: no error")
	}
}
