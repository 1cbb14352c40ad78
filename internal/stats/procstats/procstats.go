// Package procstats counts what a set of processes holds (threads, open files, sockets)
// and their open-file limit, from /proc, without forking. It knows nothing of cgroups or
// containers: the caller names the processes.
package procstats

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MaxProcs bounds the processes one Read looks at: each costs a few /proc reads and a
// readlink per open file. Beyond it, Threads, FDs and Sockets count the first MaxProcs.
const MaxProcs = 1024

// Counts are what the processes hold. Processes is every pid given.
type Counts struct {
	Processes, Threads, FDs, Sockets uint64
	// OpenFilesSoft is the soft RLIMIT_NOFILE of the first process (its init, where
	// pids come from cgroup.procs); 0 with OpenFilesKnown false where unreadable.
	OpenFilesSoft  uint64
	OpenFilesKnown bool
}

// Read counts pids' threads, file descriptors and sockets under proc (normally /proc).
// Processes that are gone by the time they are read are skipped.
func Read(proc string, pids []int) Counts {
	c := Counts{Processes: uint64(len(pids))}
	if len(pids) > MaxProcs {
		pids = pids[:MaxProcs]
	}
	for i, pid := range pids {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		if i == 0 {
			c.OpenFilesSoft, c.OpenFilesKnown = openFilesSoft(filepath.Join(dir, "limits"))
		}
		c.Threads += threads(filepath.Join(dir, "status"))
		fds, socks := fds(filepath.Join(dir, "fd"))
		c.FDs += fds
		c.Sockets += socks
	}
	return c
}

// threads is the "Threads:" line of /proc/<pid>/status.
func threads(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Threads:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// maxFDs is the most descriptors of one process fds looks at.
const maxFDs = 65536

// fds counts the entries of /proc/<pid>/fd and those that link to "socket:[inode]".
func fds(dir string) (n, sockets uint64) {
	f, err := os.Open(dir)
	if err != nil {
		return 0, 0
	}
	// Bounded: a process with a million descriptors must not make every stats call a
	// million readlinks. Past the bound the counts are lower bounds.
	names, _ := f.Readdirnames(maxFDs)
	f.Close()
	for _, name := range names {
		n++
		if target, err := os.Readlink(filepath.Join(dir, name)); err == nil && strings.HasPrefix(target, "socket:") {
			sockets++
		}
	}
	return n, sockets
}

// openFilesSoft reads the soft limit of "Max open files" in /proc/<pid>/limits.
func openFilesSoft(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Max open files")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		if f[0] == "unlimited" {
			return 0, false
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		return n, err == nil
	}
	return 0, false
}
