package shimv2

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The shim opens an exec's stdin FIFO in the background after Start returns: the daemon's
// writer must wait for that reader rather than fail with ENXIO.
func TestOpenStdinWriterWaitsForTheReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stdin")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan *os.File, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		r, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Error(err)
		}
		opened <- r
	}()
	w, err := openStdinWriter(path, make(chan struct{}))
	if err != nil {
		t.Fatalf("openStdinWriter: %v", err)
	}
	defer w.Close()
	r := <-opened
	defer r.Close()
	if _, err := w.Write([]byte("hi")); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, 2)
	if _, err := r.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

func TestOpenStdinWriterGivesUpWhenTheProcessEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stdin")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	close(done)
	if _, err := openStdinWriter(path, done); err == nil {
		t.Fatal("opened a FIFO nobody reads")
	}
}
