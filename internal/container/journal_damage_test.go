package container_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/container/containertest"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
	"github.com/rtshimd/rtshimd/internal/store"
)

// damageEntry compacts the store in dir's journal (one entry per record after it) and
// flips a byte of id's entry, as a bad sector would; the store is reopened on it.
func damageEntry(t *testing.T, st **store.Store, dir, id string) {
	t.Helper()
	big := strings.Repeat("x", 200<<10)
	for i := 0; i < 12; i++ {
		if err := (*st).Save("filler", map[string]string{"id": "filler"}, big); err != nil {
			t.Fatal(err)
		}
	}
	if err := (*st).Delete("filler"); err != nil {
		t.Fatal(err)
	}
	(*st).Close()
	j := filepath.Join(dir, "journal")
	b, err := os.ReadFile(j)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(id))
	if i < 0 || bytes.Count(b, []byte(id)) == 0 {
		t.Fatalf("no entry of %s in the journal", id)
	}
	b[i+len(id)+40] ^= 1
	if err := os.WriteFile(j, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if *st, err = store.New(dir); err != nil {
		t.Fatal(err)
	}
}

// keptEntry is the kept quarantine entry of id in st, or fails.
func keptEntry(t *testing.T, st *store.Store, id string) store.Quarantined {
	t.Helper()
	q, err := st.ListQuarantined()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range q {
		if e.ID == id && e.Kept {
			return e
		}
	}
	t.Fatalf("no kept quarantine entry of %s: %+v", id, q)
	return store.Quarantined{}
}

// One damaged journal entry must never cost a running container (audit N1): recovery
// keeps it running, with its files, listed as kept in quarantine, until an operator asks
// for its stop; then it is stopped before its files go.
func TestJournalDamageKeepsRunningContainer(t *testing.T) {
	for plan := range sandboxtest.Plans {
		t.Run(plan, func(t *testing.T) {
			ctx := context.Background()
			e := containertest.NewEnv(t, sandboxtest.Plans[plan])
			sbs, m := e.Managers()
			podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
			if err != nil {
				t.Fatal(err)
			}
			victim, err := m.Create(ctx, podID, containertest.CtrConfig("victim", "busybox"))
			if err != nil {
				t.Fatal(err)
			}
			other, err := m.Create(ctx, podID, containertest.CtrConfig("other", "busybox"))
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{victim, other} {
				if err := m.Start(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			damageEntry(t, &e.CtrStore, filepath.Join(e.Dir, "containers"), victim)
			// (A byte flipped in an ID names the garbled ID too: recovery finds nothing of it.)
			if lost := e.CtrStore.Lost(); !contains(lost, victim) {
				t.Errorf("store names as lost %v, want the victim among them", lost)
			}
			runDir := filepath.Join(e.Dir, "run", "containers", victim)

			// The restart: the victim is not listed (its record is gone) but kept.
			sbs, m = e.Managers()
			if _, err := m.Get(victim); err == nil {
				t.Errorf("victim listed without a record")
			}
			if st := e.RT.State(victim); st != kind.TaskRunning {
				t.Errorf("victim in the runtime after recovery: %q, want running", st)
			}
			if _, err := os.Stat(runDir); err != nil {
				t.Errorf("victim's run dir: %v", err)
			}
			if left := e.Images.Left(); !contains(left, victim) {
				t.Errorf("victim's rootfs removed: %v", left)
			}
			for _, c := range e.RT.Calls() {
				if strings.Contains(c, victim) && (strings.HasPrefix(c, "kill") || strings.HasPrefix(c, "delete")) {
					t.Errorf("recovery called %q on the kept victim", c)
				}
			}
			entry := keptEntry(t, e.CtrStore, victim)
			if !strings.Contains(entry.Reason, "record lost") {
				t.Errorf("kept entry's reason: %q", entry.Reason)
			}
			if st := containertest.CtrState(t, m, other); st.State.String() != "CONTAINER_RUNNING" {
				t.Errorf("the other container: %v", st.State)
			}
			// kubelet, which no longer sees the victim, creates it again (audit R7): refused,
			// whatever the attempt, not a second copy beside it.
			for attempt := range uint32(2) {
				cfg := containertest.CtrConfig("victim", "busybox")
				cfg.Metadata.Attempt = attempt
				if _, err := m.Create(ctx, podID, cfg); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "rtshimd quarantine stop "+victim) {
					t.Errorf("CreateContainer of the kept container, attempt %d: %v", attempt, err)
				}
			}

			// A second restart keeps it under the same entry.
			_, m = e.Managers()
			if q, _ := e.CtrStore.ListQuarantined(); len(q) != 1 {
				t.Errorf("after a second restart: %+v, want the one entry", q)
			}

			// The operator's stop: ended in the runtime before its files go.
			if _, err := store.RequestStop(filepath.Join(e.Dir, "containers"), victim); err != nil {
				t.Fatal(err)
			}
			if done := m.StopRequested(ctx, nil); len(done) != 1 || done[0] != victim {
				t.Fatalf("StopRequested = %v", done)
			}
			if st := e.RT.State(victim); st != "" {
				t.Errorf("victim in the runtime after its stop: %q", st)
			}
			if _, err := os.Stat(runDir); !os.IsNotExist(err) {
				t.Errorf("victim's run dir after its stop: %v", err)
			}
			if q, _ := e.CtrStore.ListQuarantined(); len(q) != 1 || q[0].Kept {
				t.Errorf("entry after the stop: %+v", q)
			}
			again, err := m.Create(ctx, podID, containertest.CtrConfig("victim", "busybox"))
			if err != nil {
				t.Fatalf("CreateContainer once the kept container was stopped: %v", err)
			}
			if err := m.Remove(ctx, again); err != nil {
				t.Fatal(err)
			}
			if err := sbs.Stop(ctx, podID, m); err != nil {
				t.Fatal(err)
			}
			if err := m.Remove(ctx, other); err != nil {
				t.Fatal(err)
			}
			if err := sbs.Remove(ctx, podID, m); err != nil {
				t.Fatal(err)
			}
			e.Clean(t)
		})
	}
}

// A pod whose record a damaged journal lost is kept with its sandbox and its containers
// while it runs; its stop stops the containers first, then the pod, and tears it down.
func TestJournalDamageKeepsRunningPod(t *testing.T) {
	for plan := range sandboxtest.Plans {
		t.Run(plan, func(t *testing.T) {
			ctx := context.Background()
			e := containertest.NewEnv(t, sandboxtest.Plans[plan])
			sbs, m := e.Managers()
			podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
			if err != nil {
				t.Fatal(err)
			}
			ctr, err := m.Create(ctx, podID, containertest.CtrConfig("app", "busybox"))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Start(ctx, ctr); err != nil {
				t.Fatal(err)
			}
			damageEntry(t, &e.PodStore, filepath.Join(e.Dir, "pods"), podID)
			sbs, m = e.Managers()
			if _, err := sbs.Get(podID); err == nil {
				t.Errorf("pod listed without a record")
			}
			if !sbs.Kept(podID) || !sbs.Holds(podID) {
				t.Errorf("pod not kept: Kept %v Holds %v", sbs.Kept(podID), sbs.Holds(podID))
			}
			if st := e.RT.State(ctr); st != kind.TaskRunning {
				t.Errorf("its container in the runtime: %q, want running", st)
			}
			if plan == "sandboxed" && e.RT.State(podID) != kind.TaskRunning {
				t.Errorf("its sandbox container: %q, want running", e.RT.State(podID))
			}
			if left := e.Node.Left(); len(left) == 0 {
				t.Errorf("the pod's pins and mounts were released")
			}
			keptEntry(t, e.PodStore, podID)
			keptEntry(t, e.CtrStore, ctr)
			// kubelet, which no longer sees the pod, runs it again (audit R7): refused,
			// whatever the attempt, not a second pod with the same UID and volumes.
			for attempt := range uint32(2) {
				cfg := e.PodConfig("web")
				cfg.Metadata.Attempt = attempt
				if _, _, err := sbs.Run(ctx, cfg, ""); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "rtshimd quarantine stop "+podID) {
					t.Errorf("RunPodSandbox of the kept pod, attempt %d: %v", attempt, err)
				}
			}
			if sbs.Unready() != "" || m.Unready() != "" {
				t.Errorf("one lost record makes the node unready: %q %q", sbs.Unready(), m.Unready())
			}

			if _, err := store.RequestStop(filepath.Join(e.Dir, "pods"), podID); err != nil {
				t.Fatal(err)
			}
			done := sbs.StopRequested(ctx, func(pod string) { m.StopRequested(ctx, []string{pod}) })
			if len(done) != 1 {
				t.Fatalf("StopRequested = %v", done)
			}
			again, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
			if err != nil {
				t.Fatalf("RunPodSandbox once the kept pod was stopped: %v", err)
			}
			if err := sbs.Remove(ctx, again, m); err != nil {
				t.Fatal(err)
			}
			e.Clean(t)
		})
	}
}

// unreadable makes the journal of the store in dir unreadable (a directory: EISDIR), as
// an I/O error would; the store is reopened on it.
func unreadable(t *testing.T, st **store.Store, dir string) {
	t.Helper()
	(*st).Close()
	j := filepath.Join(dir, "journal")
	if err := os.Remove(j); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(j, 0o700); err != nil {
		t.Fatal(err)
	}
	var err error
	if *st, err = store.New(dir); err != nil {
		t.Fatal(err)
	}
}

// Unreadable journals lose every record: every pod and container that still runs is
// kept, and kubelet would start them all again beside them (audit R7). Status then says
// RuntimeReady false (the managers' Unready) until an operator has decided on each.
func TestUnreadableJournalsUnready(t *testing.T) {
	ctx := context.Background()
	e := containertest.NewEnv(t, sandboxtest.Plans["namespaces"])
	sbs, m := e.Managers()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := m.Create(ctx, podID, containertest.CtrConfig("app", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, ctr); err != nil {
		t.Fatal(err)
	}
	if sbs.Unready() != "" || m.Unready() != "" {
		t.Errorf("unready before any damage: %q %q", sbs.Unready(), m.Unready())
	}
	unreadable(t, &e.PodStore, filepath.Join(e.Dir, "pods"))
	unreadable(t, &e.CtrStore, filepath.Join(e.Dir, "containers"))

	sbs, m = e.Managers()
	if !sbs.Kept(podID) {
		t.Fatal("the pod is not kept")
	}
	if why := sbs.Unready(); !strings.Contains(why, "1 pods") || !strings.Contains(why, "could not be read") {
		t.Errorf("pods' Unready: %q", why)
	}
	if why := m.Unready(); !strings.Contains(why, "1 containers") {
		t.Errorf("containers' Unready: %q", why)
	}
	if _, _, err := sbs.Run(ctx, e.PodConfig("web"), ""); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("RunPodSandbox of the kept pod: %v", err)
	}

	if _, err := store.RequestStop(filepath.Join(e.Dir, "pods"), podID); err != nil {
		t.Fatal(err)
	}
	if done := sbs.StopRequested(ctx, func(pod string) { m.StopRequested(ctx, []string{pod}) }); len(done) != 1 {
		t.Fatalf("StopRequested = %v", done)
	}
	if sbs.Unready() != "" || m.Unready() != "" {
		t.Errorf("unready once nothing is kept: %q %q", sbs.Unready(), m.Unready())
	}
	e.Clean(t)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
