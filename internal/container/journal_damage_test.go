package container_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/container/containertest"
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

			if _, err := store.RequestStop(filepath.Join(e.Dir, "pods"), podID); err != nil {
				t.Fatal(err)
			}
			done := sbs.StopRequested(ctx, func(pod string) { m.StopRequested(ctx, []string{pod}) })
			if len(done) != 1 {
				t.Fatalf("StopRequested = %v", done)
			}
			e.Clean(t)
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
