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
