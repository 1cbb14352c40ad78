package monitor

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// bothWays runs f with openat2 and with the per-component walk (kernels without openat2).
func bothWays(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", func(t *testing.T) { f(t) })
	t.Run("walk", func(t *testing.T) {
		openat2Missing.Store(true)
		defer openat2Missing.Store(false)
		f(t)
	})
}

func TestOpenLogCreatesAndAppends(t *testing.T) {
	bothWays(t, func(t *testing.T) {
		dir := t.TempDir()
		if err := PrepareLog(dir, "ctr/0.log"); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"a", "b"} {
			f, err := OpenLog(dir, "ctr/0.log")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(s); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "ctr/0.log")); string(b) != "ab" {
			t.Errorf("log = %q, want ab", b)
		}
	})
}

func TestOpenLogRefusesSymlinks(t *testing.T) {
	bothWays(t, func(t *testing.T) {
		dir, outside := t.TempDir(), t.TempDir()
		target := filepath.Join(outside, "target")
		if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		// The file itself a link, a directory a link, a dangling link (O_CREAT would make
		// its target).
		must(t, os.Symlink(target, filepath.Join(dir, "file.log")))
		must(t, os.Symlink(outside, filepath.Join(dir, "linkdir")))
		must(t, os.Symlink(filepath.Join(outside, "new"), filepath.Join(dir, "dangling.log")))
		for _, rel := range []string{"file.log", "linkdir/target", "linkdir/other.log", "dangling.log"} {
			if f, err := OpenLog(dir, rel); err == nil {
				f.Close()
				t.Errorf("OpenLog(%s) followed a symlink", rel)
			}
		}
		if err := PrepareLog(dir, "linkdir/sub/0.log"); err == nil {
			t.Error("PrepareLog made directories through a symlink")
		}
		if b, _ := os.ReadFile(target); string(b) != "keep" {
			t.Errorf("outside file = %q", b)
		}
		for _, p := range []string{"new", "other.log", "sub"} {
			if _, err := os.Lstat(filepath.Join(outside, p)); err == nil {
				t.Errorf("%s was created outside the log directory", p)
			}
		}
	})
}

func TestOpenLogRefusesEscapesAndOddFiles(t *testing.T) {
	bothWays(t, func(t *testing.T) {
		dir := t.TempDir()
		for _, rel := range []string{"../x.log", "/etc/x.log", "a/../../x.log", ".", ""} {
			if f, err := OpenLog(dir, rel); err == nil {
				f.Close()
				t.Errorf("OpenLog(%q) succeeded", rel)
			}
		}
		// A FIFO would block the open for ever (no reader); a directory is no log.
		must(t, syscall.Mkfifo(filepath.Join(dir, "fifo.log"), 0o600))
		must(t, os.Mkdir(filepath.Join(dir, "dir.log"), 0o755))
		for _, rel := range []string{"fifo.log", "dir.log"} {
			if f, err := OpenLog(dir, rel); err == nil {
				f.Close()
				t.Errorf("OpenLog(%s) succeeded", rel)
			}
		}
	})
}

func TestLogRel(t *testing.T) {
	for _, c := range []struct{ dir, path, want string }{
		{"/var/log/pods/p", "/var/log/pods/p/c/0.log", "c/0.log"},
		{"", "/var/log/pods/p/c/0.log", "0.log"},
		{"/var/log/pods/p", "/var/log/pods/q/0.log", ""},
		{"/var/log/pods/p", "/var/log/pods/p", ""},
	} {
		got, err := LogRel(c.dir, c.path)
		if got != c.want || (c.want == "") != (err != nil) {
			t.Errorf("LogRel(%q, %q) = %q, %v; want %q", c.dir, c.path, got, err, c.want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
