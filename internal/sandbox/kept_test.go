package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
	"github.com/rtshimd/rtshimd/internal/store"
)

// A pod whose record was lost and whose sandbox container still runs is kept, and its
// name with it (audit R7): kubelet, which cannot see it, runs the pod again (attempt 0,
// or the next) and is refused, naming the kept pod and `rtshimd quarantine`, instead of a
// second sandbox running beside the first with the same UID and volumes. Other pods run;
// once the operator has stopped the kept pod, the pod runs again.
func TestKeptPodNameReserved(t *testing.T) {
	e := newEnv(t, sandboxtest.Plans["sandboxed"])
	m := e.manager()
	ctx := context.Background()
	id, _, err := m.Run(ctx, sandboxtest.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if err := e.store.Delete(id); err != nil { // the record is lost; the pod runs on
		t.Fatal(err)
	}
	m = e.manager()
	if !m.Kept(id) {
		t.Fatal("the pod without a record is not kept")
	}
	for attempt := range uint32(2) {
		cfg := sandboxtest.PodConfig("web")
		cfg.Metadata.Attempt = attempt
		_, _, err := m.Run(ctx, cfg, "")
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "rtshimd quarantine stop "+id) {
			t.Errorf("RunPodSandbox of the kept pod, attempt %d: %v", attempt, err)
		}
	}
	if n := len(e.rt.Tasks()); n != 1 {
		t.Errorf("the runtime runs %d tasks, want the kept pod's alone", n)
	}
	other, _, err := m.Run(ctx, sandboxtest.PodConfig("db"), "")
	if err != nil {
		t.Fatalf("another pod: %v", err)
	}

	if _, err := store.RequestStop(filepath.Join(e.dir, "state"), id); err != nil {
		t.Fatal(err)
	}
	if done := m.StopRequested(ctx, nil); len(done) != 1 {
		t.Fatalf("StopRequested = %v", done)
	}
	again, _, err := m.Run(ctx, sandboxtest.PodConfig("web"), "")
	if err != nil {
		t.Fatalf("RunPodSandbox once the kept pod was stopped: %v", err)
	}
	for _, id := range []string{again, other} {
		if err := m.Remove(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.clean(t)
}
