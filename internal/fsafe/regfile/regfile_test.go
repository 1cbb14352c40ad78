package regfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A FIFO, a device node, a directory and a symlink out of the root are refused without
// blocking or opening them; a regular file (also through a symlink inside the root) is read.
func TestReadRefusesSpecialFiles(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/:/bin/sh\n"), 0o644))
	must(unix.Mkfifo(filepath.Join(root, "etc/fifo"), 0o644))
	must(unix.Mknod(filepath.Join(root, "etc/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(os.Symlink("passwd", filepath.Join(root, "etc/link")))
	outside := filepath.Join(t.TempDir(), "secret")
	must(os.WriteFile(outside, []byte("secret"), 0o600))
	must(os.Symlink(outside, filepath.Join(root, "etc/escape")))

	if b, err := ReadInRoot(root, "etc/passwd", 1<<20); err != nil || !strings.HasPrefix(string(b), "root:") {
		t.Errorf("passwd: %q %v", b, err)
	}
	if b, err := ReadInRoot(root, "etc/link", 1<<20); err != nil || !strings.HasPrefix(string(b), "root:") {
		t.Errorf("link inside the root: %q %v", b, err)
	}
	if b, err := ReadInRoot(root, "etc/passwd", 4); err != nil || string(b) != "root" {
		t.Errorf("limit: %q %v", b, err)
	}
	for name, want := range map[string]string{
		"etc/fifo": "named pipe", "etc/null": "character device", "etc": "directory",
	} {
		if _, err := ReadInRoot(root, name, 1<<20); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want refused as %s", name, err, want)
		}
		if _, err := Read(filepath.Join(root, name), 1<<20); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Read %s: %v, want refused as %s", name, err, want)
		}
	}
	if b, err := ReadInRoot(root, "etc/escape", 1<<20); err == nil {
		t.Errorf("a symlink out of the root was followed: %q", b)
	}
}
