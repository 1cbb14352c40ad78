package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Whatever the process's umask, the socket has the mode asked for, and it serves.
func TestListenMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %v %v, want a socket of mode 0600", fi.Mode(), err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.Write([]byte("x"))
			c.Close()
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil || b[0] != 'x' {
		t.Errorf("read %q %v", b, err)
	}
	c.Close()
	ln.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
	if _, err := Listen(filepath.Join(t.TempDir(), "no", "s.sock"), 0o600); err == nil {
		t.Error("listen in a missing directory: no error")
	}
}
