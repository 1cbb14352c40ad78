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

// newV2Memcg makes a cgroup v2 cgroup with the memory controller, limited to limit bytes
// and no swap, in a parent of its own (a pod's slice); the cgroup-v2 node runs these
// (hack/v2-node/inside.sh).
func newV2Memcg(t *testing.T, limit int) string {
	t.Helper()
	root := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(root, "cgroup.subtree_control")); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and a cgroup v2 hierarchy")
	}
	parent := filepath.Join(root, fmt.Sprintf("rtshimd-oomevent-%d", time.Now().UnixNano()))
	dir := filepath.Join(parent, "c")
	for _, d := range []string{parent, dir} {
		if err := os.WriteFile(filepath.Join(filepath.Dir(d), "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
			t.Skipf("no memory controller to enable: %v", err)
		}
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.Remove(dir); _ = os.Remove(parent) })
	for f, v := range map[string]string{"memory.max": strconv.Itoa(limit), "memory.swap.max": "0"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return dir
}

// On cgroup v2 a process that outgrows its cgroup is OOM-killed and WatchEvents says so
// after the cgroup is removed, as systemd removes an emptied scope before a container's
// exit is handled.
func TestWatchEventsSeesOOMBeforeRemoval(t *testing.T) {
	dir := newV2Memcg(t, 16<<20)
	w, err := WatchEvents(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && exec tail /dev/zero", dir))
	_ = cmd.Run() // killed
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if !w.OOMKilled() {
		t.Fatal("no OOM reported")
	}
}

// A v2 cgroup whose process ends on its own, under its limit, reports no OOM, also after
// memory.events changed (the limit was reached and reclaimed: "max" counts, oom_kill not)
// and the cgroup was removed.
func TestWatchEventsQuietWithoutOOM(t *testing.T) {
	dir := newV2Memcg(t, 16<<20)
	w, err := WatchEvents(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Page cache beyond the limit: reclaimed, never OOM.
	f := filepath.Join(t.TempDir(), "big")
	if out, err := exec.Command("sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && head -c 64000000 /dev/zero >%s && cat %s >/dev/null", dir, f, f)).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if w.OOMKilled() {
		t.Fatal("OOM reported, none happened")
	}
}
