package procstats

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A fake /proc with two processes: the first with a socket and a file open, the second
// with one file; a third pid is already gone.
func TestRead(t *testing.T) {
	proc := t.TempDir()
	write(t, filepath.Join(proc, "10", "status"), "Name:\tsh\nState:\tS (sleeping)\nThreads:\t1\n")
	write(t, filepath.Join(proc, "10", "limits"), "Limit                     Soft Limit           Hard Limit           Units     \n"+
		"Max processes             unlimited            unlimited            processes \n"+
		"Max open files            1024                 1048576              files     \n")
	write(t, filepath.Join(proc, "11", "status"), "Name:\tapp\nThreads:\t4\n")
	for pid, links := range map[int][]string{10: {"socket:[123]", "/var/log/x"}, 11: {"/dev/null"}} {
		dir := filepath.Join(proc, strconv.Itoa(pid), "fd")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, l := range links {
			if err := os.Symlink(l, filepath.Join(dir, strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := Read(proc, []int{10, 11, 12})
	want := Counts{Processes: 3, Threads: 5, FDs: 3, Sockets: 1, OpenFilesSoft: 1024, OpenFilesKnown: true}
	if got != want {
		t.Errorf("Read = %+v, want %+v", got, want)
	}
	if got := Read(proc, []int{11}); got.OpenFilesKnown || got.Threads != 4 {
		t.Errorf("no limits file: %+v", got)
	}
}

// This process, as a sanity check of the real /proc's formats.
func TestReadSelf(t *testing.T) {
	c := Read("/proc", []int{os.Getpid()})
	if c.Processes != 1 || c.Threads == 0 || c.FDs < 3 || !c.OpenFilesKnown || c.OpenFilesSoft == 0 {
		t.Errorf("Read(self) = %+v", c)
	}
}
