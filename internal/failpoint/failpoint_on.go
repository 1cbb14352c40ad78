//go:build failpoints

package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Env names the points to fail and how: "container-cleanup=2,run-sandbox/network=crash".
// A number n fails the point the first n times it is reached; "crash" kills the daemon
// there with SIGKILL, as a crash would.
const Env = "RTSHIMD_FAILPOINTS"

// FileEnv names a file read again whenever it changes, in the form of Env: the suite sets
// points on a running daemon with it, and clears them by removing it.
const FileEnv = "RTSHIMD_FAILPOINTS_FILE"

// Enabled says whether this binary has failpoints.
const Enabled = true

// crash marks a point that kills the daemon.
const crash = -1

var (
	mu       sync.Mutex
	loaded   bool
	fileText string
	left     map[string]int
)

func parse(spec string) map[string]int {
	points := map[string]int{}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		if v == "crash" {
			points[k] = crash
		} else if n, err := strconv.Atoi(v); err == nil {
			points[k] = n
		}
	}
	return points
}

// load sets the points from the environment once, and from the file when its content is
// new (counts start again then).
func load() {
	if !loaded {
		loaded = true
		left = parse(os.Getenv(Env))
	}
	path := os.Getenv(FileEnv)
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if (err == nil && len(b) == 0) || (err != nil && !errors.Is(err, os.ErrNotExist)) || string(b) == fileText {
		return // being written, or unreadable: the points stay as they were (no file: none)
	}
	fileText = string(b)
	left = parse(os.Getenv(Env))
	for k, v := range parse(fileText) {
		left[k] = v
	}
}

// Fail returns an error the first n times the named point is reached, or kills the
// daemon there, as the points say.
func Fail(name string) error {
	mu.Lock()
	defer mu.Unlock()
	load()
	n := left[name]
	if n == crash {
		fmt.Fprintf(os.Stderr, "failpoint %s: crashing\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	if n <= 0 {
		return nil
	}
	left[name]--
	return fmt.Errorf("failpoint %s (%d more)", name, left[name])
}
