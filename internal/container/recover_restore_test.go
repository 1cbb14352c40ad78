package container_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/container/containertest"
	"github.com/rtshimd/rtshimd/internal/monitor"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
	"github.com/rtshimd/rtshimd/internal/store"
)

// restoreEnv is a node whose container manager unpacks restores into <dir>/restores.
func restoreEnv(t *testing.T) (*containertest.Env, string) {
	e := containertest.NewEnv(t, sandboxtest.Plans["namespaces"])
	restores := filepath.Join(e.Dir, "restores")
	e.Options = func(o *container.Options) { o.RestoreDir = restores }
	return e, restores
}

// unpacked writes what a restore unpacks for container id under restores, and returns
// its directory.
func unpacked(t *testing.T, restores, id string) string {
	t.Helper()
	p := filepath.Join(restores, id)
	if err := os.MkdirAll(filepath.Join(p, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "checkpoint", "pages-1.img"), []byte("process memory"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// setRestore makes container id's record say it is restored from restore.
func setRestore(t *testing.T, st *store.Store, id, restore string) {
	t.Helper()
	recs, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID != id {
			continue
		}
		var meta map[string]any
		if err := json.Unmarshal(r.Meta, &meta); err != nil {
			t.Fatal(err)
		}
		meta["restore"] = restore
		if err := st.Save(id, meta, json.RawMessage(r.Status)); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no record of %s", id)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// A record whose restore is not <restore dir>/<id> is refused, so no removal deletes
// the path it names (audit R13): the container is set aside, kept while it runs, and the
// path is untouched, also by the operator's stop.
func TestRecordRestoreNotItsOwn(t *testing.T) {
	ctx := context.Background()
	e, restores := restoreEnv(t)
	sbs, m := e.Managers()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := m.Create(ctx, podID, containertest.CtrConfig("app", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(e.Dir, "node-data")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, bad := range []string{victim, filepath.Join(restores, "other"), restores + "/" + id + "/../../node-data"} {
		setRestore(t, e.CtrStore, id, bad)
		_, m = e.Managers()
		if _, err := m.Get(id); err == nil {
			t.Fatalf("restore %q: the record was taken", bad)
		}
		entry := keptEntry(t, e.CtrStore, id)
		if !strings.Contains(entry.Reason, "restore") || !strings.Contains(entry.Reason, bad) {
			t.Errorf("restore %q: quarantine reason %q", bad, entry.Reason)
		}
		if _, err := store.RequestStop(filepath.Join(e.Dir, "containers"), id); err != nil {
			t.Fatal(err)
		}
		if done := m.StopRequested(ctx, nil); len(done) != 1 {
			t.Fatalf("StopRequested = %v", done)
		}
		if !exists(victim) {
			t.Fatalf("restore %q: the path was removed", bad)
		}
		// The next round: the container again, under a record of its own.
		if id, err = m.Create(ctx, podID, containertest.CtrConfig(fmt.Sprintf("app-%d", i), "busybox")); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	setRestore(t, e.CtrStore, id, filepath.Join(restores, id))
	_, m = e.Managers()
	if _, err := m.Get(id); err != nil {
		t.Errorf("a record restored from its own directory: %v", err)
	}
}

// At start, <restore dir> keeps only what a restore still to come needs (audit R13): a
// checkpoint no record names, one a started container's start left (a crash before its
// removal), and that of a container without a record whose task no runtime runs go; a
// created container's, to be restored at its start, stays.
func TestRecoverySweepsRestores(t *testing.T) {
	ctx := context.Background()
	e, restores := restoreEnv(t)
	sbs, m := e.Managers()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := m.Create(ctx, podID, containertest.CtrConfig("waiting", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	started, err := m.Create(ctx, podID, containertest.CtrConfig("started", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, started); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{waiting, started} {
		setRestore(t, e.CtrStore, id, unpacked(t, restores, id))
	}
	stray := unpacked(t, restores, strings.Repeat("5", 64))
	// A directory whose record was lost, of a container no runtime runs.
	lost := strings.Repeat("7", 64)
	lostDir := filepath.Join(e.Dir, "run", "containers", lost)
	if err := os.MkdirAll(lostDir, 0o711); err != nil {
		t.Fatal(err)
	}
	lostRestore := unpacked(t, restores, lost)

	sbs, m = e.Managers()
	if !exists(filepath.Join(restores, waiting)) {
		t.Error("the checkpoint of a restore still to come was removed")
	}
	for what, p := range map[string]string{"started": filepath.Join(restores, started), "stray": stray, "lost": lostRestore, "lost run dir": lostDir} {
		if exists(p) {
			t.Errorf("%s: %s left", what, p)
		}
	}
	if err := m.Remove(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(restores, waiting)) {
		t.Error("the removal of a container to be restored left its checkpoint")
	}
	if err := sbs.Stop(ctx, podID, m); err != nil {
		t.Fatal(err)
	}
	if err := sbs.Remove(ctx, podID, m); err != nil {
		t.Fatal(err)
	}
	e.Clean(t)
}

// fakeMonitor serves a container's monitor socket as rtshim-monitor does for a
// container that waits for its start: `exit` is answered ok (then it ends, closing every
// connection) or refused with refuse; `watch` is held until it ends.
type fakeMonitor struct {
	ln     *net.UnixListener
	refuse string
	asked  atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	once   sync.Once
}

func serveMonitor(t *testing.T, dir, refuse string) *fakeMonitor {
	t.Helper()
	// The run directory is deeper than a socket path may be long: bound through a descriptor.
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: fmt.Sprintf("/proc/self/fd/%d/%s", fd, monitor.SocketFile), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	f := &fakeMonitor{ln: ln, refuse: refuse}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			go f.handle(c)
		}
	}()
	t.Cleanup(f.end)
	return f
}

func (f *fakeMonitor) handle(c net.Conn) {
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	if strings.TrimSpace(line) != monitor.CmdExit {
		return // watch: held until the monitor ends
	}
	f.asked.Store(true)
	if f.refuse != "" {
		fmt.Fprintf(c, "error %s\n", f.refuse)
		c.Close()
		return
	}
	fmt.Fprint(c, "ok\n")
	f.end()
}

func (f *fakeMonitor) end() {
	f.once.Do(func() {
		f.ln.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
}

// pendingRestore makes the run directory of a container whose record was lost while it
// waited to be restored at its start: its bundle, its monitor's config and a live
// monitor, and its unpacked checkpoint. No runtime knows such a task.
func pendingRestore(t *testing.T, e *containertest.Env, restores, podID, id, refuse string) (string, *fakeMonitor) {
	t.Helper()
	dir := filepath.Join(e.Dir, "run", "containers", id)
	spec := &specs.Spec{Version: oci.SpecVersion, Annotations: map[string]string{oci.AnnotationSandboxID: podID, oci.AnnotationContainerName: "restored"}}
	if err := oci.WriteBundle(dir, spec); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(monitor.Config{ID: id, Dir: dir, Runtime: "runc", Bundle: dir, RestoreImage: filepath.Join(unpacked(t, restores, id), "checkpoint")})
	if err := os.WriteFile(filepath.Join(dir, monitor.ConfigFile), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, serveMonitor(t, dir, refuse)
}

// A restore still waiting for its start whose record was lost (audit R13): no runtime
// knows its task, so recovery ends its waiting monitor before it removes the directory
// (with it gone, nothing could reach the monitor again), and its unpacked checkpoint.
func TestRecoveryEndsWaitingMonitor(t *testing.T) {
	ctx := context.Background()
	e, restores := restoreEnv(t)
	sbs, _ := e.Managers()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("9", 64)
	dir, mon := pendingRestore(t, e, restores, podID, id, "")

	_, m := e.Managers()
	if !mon.asked.Load() {
		t.Error("the waiting monitor was not told to exit")
	}
	if monitor.Alive(dir) {
		t.Error("the waiting monitor still serves")
	}
	for _, p := range []string{dir, filepath.Join(restores, id)} {
		if exists(p) {
			t.Errorf("%s left", p)
		}
	}
	if q, _ := e.CtrStore.ListQuarantined(); len(q) != 0 {
		t.Errorf("quarantined: %+v", q)
	}
	if err := sbs.Stop(ctx, podID, m); err != nil {
		t.Fatal(err)
	}
	if err := sbs.Remove(ctx, podID, m); err != nil {
		t.Fatal(err)
	}
	e.Clean(t)
}

// A monitor that refuses to end has started its container, which no ready runtime knows
// (its row is not ready, say): the container may run, so it is kept with its files.
func TestRecoveryKeepsRefusingMonitor(t *testing.T) {
	ctx := context.Background()
	e, restores := restoreEnv(t)
	sbs, _ := e.Managers()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("8", 64)
	dir, mon := pendingRestore(t, e, restores, podID, id, "container was started; it ends when its process does")

	_, m := e.Managers()
	if !mon.asked.Load() {
		t.Error("the monitor was not asked")
	}
	entry := keptEntry(t, e.CtrStore, id)
	if !strings.Contains(entry.Reason, "monitor") {
		t.Errorf("kept entry's reason: %q", entry.Reason)
	}
	for _, p := range []string{dir, filepath.Join(restores, id)} {
		if !exists(p) {
			t.Errorf("%s removed", p)
		}
	}
	// Asked to stop it, the daemon still finds it serving: its files stay.
	if _, err := store.RequestStop(filepath.Join(e.Dir, "containers"), id); err != nil {
		t.Fatal(err)
	}
	if done := m.StopRequested(ctx, nil); len(done) != 0 {
		t.Errorf("StopRequested = %v, want none stopped", done)
	}
	if !exists(dir) {
		t.Error("its directory was removed by a stop that could not end it")
	}
}
