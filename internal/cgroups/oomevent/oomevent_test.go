package oomevent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// newMemcg makes a v1 memory cgroup for the test, limited to limit bytes.
func newMemcg(t *testing.T, limit int) string {
	t.Helper()
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and a cgroup v1 memory hierarchy")
	}
	dir := filepath.Join(root, fmt.Sprintf("rtshimd-oomevent-%d", time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A process that outgrows its cgroup is OOM-killed, and Watch says so even though the
// cgroup is removed right after, before anyone reads its counters (as systemd removes a
// container's scope).
func TestWatchSeesOOMBeforeRemoval(t *testing.T) {
	dir := newMemcg(t, 16<<20)
	w, err := Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && exec tail /dev/zero", dir))
	_ = cmd.Run() // killed
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	// As a container's exit is handled: its cgroup already gone.
	if !waitOOM(w) {
		t.Fatal("no OOM reported")
	}
}

// A cgroup removed without an OOM reports none, and the watch ends by itself.
func TestWatchQuietOnRemoval(t *testing.T) {
	dir := newMemcg(t, 64<<20)
	w, err := Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && true", dir)).Run(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if waitOOM(w) {
		t.Fatal("OOM reported for a cgroup removed without one")
	}
}

// waitOOM is what a container's exit handling asks, right after the cgroup is gone.
func waitOOM(w *Watcher) bool { return w.OOMKilled() }
