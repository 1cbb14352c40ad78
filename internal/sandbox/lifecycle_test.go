package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/kind/kindtest"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
	"github.com/rtshimd/rtshimd/internal/store"
)

// The lifecycle tests drive the manager through a fake runtime (kindtest) and a fake node
// (sandboxtest) with a real store on disk: every step of run, stop, remove and recovery,
// failures at each, and what is left afterwards, without root.

// env is one node: its store, run dir, runtime and node fakes. A manager built from it
// is a daemon; another built from the same env after the first is dropped is the
// daemon after a kill -9.
type env struct {
	t     *testing.T
	dir   string
	rt    *kindtest.Runtime
	node  *sandboxtest.Node
	store *store.Store
}

func newEnv(t *testing.T, plan kind.PodPlan) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := store.New(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, dir: dir, rt: kindtest.New(kind.OCI, plan), node: sandboxtest.NewNode(), store: st}
}

// manager is a daemon's sandbox manager on the env, recovered from its store.
func (e *env) manager() *Manager {
	e.t.Helper()
	m, err := NewManager(Options{
		Handlers: sandboxtest.NewHandlers(e.rt, filepath.Join(e.dir, "runtime")), Runtimes: kindtest.Maker{Runtime: e.rt}, Store: e.store,
		RunDir: filepath.Join(e.dir, "run"), PauseRootfs: filepath.Join(e.dir, "pause"),
		CgroupDriver: config.CgroupfsDriver, Node: e.node,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(m.Close)
	if err := m.Recover(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// clean fails unless nothing of any pod is left: no task in the runtime, nothing pinned
// or mounted, no pod directory, no record.
func (e *env) clean(t *testing.T) {
	t.Helper()
	sandboxtest.CheckLeft(t, e.rt, e.node, e.store)
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "run")); len(ents) > 0 {
		t.Errorf("run dir still has %v", ents)
	}
}

func state(t *testing.T, m *Manager, id string) string {
	t.Helper()
	sb, err := m.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return sb.Status().State
}

// Run, stop and remove a pod of each shape: what each step makes, and nothing left after.
// A pod whose containers share a PID namespace has a sandbox container on every kind.
func TestPodLifecycle(t *testing.T) {
	for _, c := range []struct {
		name      string
		plan      kind.PodPlan
		sharedPID bool
	}{{"namespaces", sandboxtest.Plans["namespaces"], false}, {"namespaces-shared-pid", sandboxtest.Plans["namespaces"], true}, {"sandboxed", sandboxtest.Plans["sandboxed"], false}} {
		t.Run(c.name, func(t *testing.T) {
			plan := c.plan
			e := newEnv(t, plan)
			m := e.manager()
			ctx := context.Background()
			cfg := sandboxtest.PodConfig("web")
			if c.sharedPID {
				cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
			}
			id, handler, err := m.Run(ctx, cfg, "")
			if err != nil || handler != "fake" {
				t.Fatalf("run: %v (handler %q)", err, handler)
			}
			if s := state(t, m, id); s != StateReady {
				t.Errorf("state after run %q", s)
			}
			sb, _ := m.Get(id)
			if b, err := os.ReadFile(filepath.Join(sb.Files, "hostname")); err != nil || strings.TrimSpace(string(b)) != "web" {
				t.Errorf("hostname file %q %v", b, err)
			}
			pins := []string{sb.NetNS}
			if plan.PinIPCUTS {
				pins = append(pins, sb.IPCNS, sb.UTSNS)
			}
			for _, p := range pins {
				if p == "" || !e.node.IsPinned(p) {
					t.Errorf("namespace %q not pinned", p)
				}
			}
			infra := plan.SandboxContainer || c.sharedPID
			if got := e.rt.State(id); infra != (got == kind.TaskRunning) {
				t.Errorf("sandbox container: %q", got)
			}
			if _, _, err := m.Run(ctx, sandboxtest.PodConfig("web"), ""); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("second pod of the name: %v", err)
			}

			if err := m.Stop(ctx, id, nil); err != nil {
				t.Fatal(err)
			}
			if s := state(t, m, id); s != StateNotReady {
				t.Errorf("state after stop %q", s)
			}
			switch got := e.rt.State(id); {
			case plan.SandboxContainer && got != "":
				t.Errorf("sandbox container after stop: %q (DeleteSandboxAtStop)", got)
			case c.sharedPID && got != kind.TaskStopped:
				t.Errorf("sandbox container after stop: %q, want it stopped until the pod is removed", got)
			}
			if err := m.Stop(ctx, id, nil); err != nil {
				t.Errorf("second stop: %v", err)
			}
			if err := m.Remove(ctx, id, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Get(id); err == nil {
				t.Error("removed pod still there")
			}
			if err := m.Remove(ctx, id, nil); err != nil {
				t.Errorf("second remove: %v", err)
			}
			e.clean(t)
			// The name is free again.
			if _, _, err := m.Run(ctx, sandboxtest.PodConfig("web"), ""); err != nil {
				t.Errorf("run after remove: %v", err)
			}
		})
	}
}

// A run that fails at any step leaves nothing behind and frees the pod's name.
func TestPodRunFailsAtEachStep(t *testing.T) {
	type step struct {
		fake, op string
		plans    []string // the shapes that have the step
	}
	for _, s := range []step{
		{"node", "pin", []string{"namespaces", "sandboxed"}},
		{"node", "tmpfs", []string{"namespaces", "sandboxed"}},
		{"runtime", "create", []string{"sandboxed"}},
		{"runtime", "start", []string{"sandboxed"}},
	} {
		for _, name := range s.plans {
			t.Run(s.op+"/"+name, func(t *testing.T) {
				e := newEnv(t, sandboxtest.Plans[name])
				m := e.manager()
				if s.fake == "node" {
					e.node.FailNext(s.op, 1)
				} else {
					e.rt.FailNext(s.op, 1)
				}
				_, _, err := m.Run(context.Background(), sandboxtest.PodConfig("web"), "")
				if !errors.Is(err, sandboxtest.ErrInjected) && !errors.Is(err, kindtest.ErrInjected) {
					t.Fatalf("run: %v, want the injected failure", err)
				}
				if pods := m.List(nil); len(pods) > 0 {
					t.Errorf("failed pod listed: %v", pods)
				}
				e.clean(t)
				if _, _, err := m.Run(context.Background(), sandboxtest.PodConfig("web"), ""); err != nil {
					t.Errorf("run again: %v", err)
				}
			})
		}
	}
}

// A failed run whose cleanup fails too keeps the pod listed NOTREADY with its record (it
// still holds what was not undone) until a removal succeeds; a daemon started meanwhile
// finds it the same way.
func TestPodCleanupFailureKept(t *testing.T) {
	e := newEnv(t, sandboxtest.Plans["namespaces"])
	m := e.manager()
	e.node.FailNext("tmpfs", 1)
	e.node.FailNext("unpin", 1)
	_, _, err := m.Run(context.Background(), sandboxtest.PodConfig("web"), "")
	if !errors.Is(err, sandboxtest.ErrInjected) {
		t.Fatalf("run: %v", err)
	}
	pods := m.List(nil)
	if len(pods) != 1 || pods[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("kept pod: %v", pods)
	}
	id := pods[0].Id
	if len(e.node.Left()) == 0 {
		t.Error("the pin cleanup failed to undo is not held")
	}
	// A daemon started now (the first one killed) lists it from its record.
	m2 := e.manager()
	if s := state(t, m2, id); s != StateNotReady {
		t.Errorf("recovered kept pod: %q", s)
	}
	if err := m2.Remove(context.Background(), id, nil); err != nil {
		t.Fatal(err)
	}
	e.clean(t)
}

// After a kill -9 the next daemon finds every pod as its record says, follows sandbox
// containers again (an exit while it was down or after is seen), and marks NOTREADY a pod
// whose namespaces were lost.
func TestPodRecovery(t *testing.T) {
	for name, plan := range sandboxtest.Plans {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, plan)
			m := e.manager()
			ctx := context.Background()
			var ids []string
			for _, n := range []string{"a", "b", "c"} {
				id, _, err := m.Run(ctx, sandboxtest.PodConfig(n), "")
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			if err := m.Stop(ctx, ids[2], nil); err != nil {
				t.Fatal(err)
			}
			m.Close() // the daemon is killed: nothing is stopped

			sb1, _ := m.Get(ids[1])
			e.node.Drop(sb1.NetNS) // pod b's namespace went while the daemon was down
			m2 := e.manager()
			got := map[string]string{}
			for _, id := range ids {
				got[id] = state(t, m2, id)
			}
			want := map[string]string{ids[0]: StateReady, ids[1]: StateNotReady, ids[2]: StateNotReady}
			for id, w := range want {
				if got[id] != w {
					t.Errorf("pod %s after restart: %q, want %q", id[:8], got[id], w)
				}
			}
			if _, _, err := m2.Run(ctx, sandboxtest.PodConfig("a"), ""); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("the recovered pod's name is free: %v", err)
			}
			if plan.SandboxContainer {
				// The sandbox container of pod a ends: the new daemon sees it.
				e.rt.Exit(ids[0], 0)
				sandboxtest.Await(t, "pod a not ready after its sandbox container exited", func() bool { return state(t, m2, ids[0]) == StateNotReady })
			}
			for _, id := range ids {
				if err := m2.Remove(ctx, id, nil); err != nil {
					t.Fatal(err)
				}
			}
			e.clean(t)
		})
	}
}

// Removing a pod whose teardown fails half-way keeps it (and its record) for a retry; the
// retry finishes the job.
func TestPodRemoveRetried(t *testing.T) {
	e := newEnv(t, sandboxtest.Plans["sandboxed"])
	m := e.manager()
	ctx := context.Background()
	id, _, err := m.Run(ctx, sandboxtest.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"unmount", "unpin"} {
		e.node.FailNext(op, 1)
		if err := m.Remove(ctx, id, nil); !errors.Is(err, sandboxtest.ErrInjected) {
			t.Fatalf("remove with %s failing: %v", op, err)
		}
		if _, err := m.Get(id); err != nil {
			t.Fatalf("pod gone after a failed removal: %v", err)
		}
		if ids := sandboxtest.Records(e.t, e.store); !slices.Contains(ids, id) {
			t.Fatalf("record gone after a failed removal: %v", ids)
		}
	}
	if err := m.Remove(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	e.clean(t)
}
