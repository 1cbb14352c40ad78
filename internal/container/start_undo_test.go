package container_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/container/containertest"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/kind/kindtest"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
)

// A start that fails after the runtime started the container (the request's deadline
// passed while the monitor ran the start, runc start killed at its limit while poststart
// hooks ran, a shim's Start timing out) is undone: the container is killed and recorded
// exited, with a reason, so kubelet's next attempt is not a second copy beside it. The
// request's context has ended by then: the undo runs with a context of its own (audit
// 2026-11-26, N7).
func TestStartFailedAfterTheRuntimeStartedIsUndone(t *testing.T) {
	for name, plan := range sandboxtest.Plans {
		t.Run(name, func(t *testing.T) {
			e := containertest.NewEnv(t, plan)
			sbs, m := e.Managers()
			podID, _, err := sbs.Run(context.Background(), e.PodConfig("web"), "")
			if err != nil {
				t.Fatal(err)
			}
			id, err := m.Create(context.Background(), podID, containertest.CtrConfig("app", "busybox"))
			if err != nil {
				t.Fatal(err)
			}
			e.RT.StrictContexts()
			e.RT.StartThenFail(1)
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the request's deadline passed while the runtime started it
			if err := m.Start(ctx, id); !errors.Is(err, kindtest.ErrInjected) {
				t.Fatalf("start: %v, want the runtime's error", err)
			}
			if st := e.RT.State(id); st == kind.TaskRunning {
				t.Errorf("the runtime still runs the container whose start failed (%q); calls %q", st, e.RT.Calls())
			}
			for _, call := range []string{"status " + id, "kill " + id} {
				if !slices.Contains(e.RT.Calls(), call) {
					t.Errorf("no %q among the runtime's calls %q", call, e.RT.Calls())
				}
			}
			sandboxtest.Await(t, "the killed container's exit", func() bool {
				return containertest.CtrState(t, m, id).State == runtimeapi.ContainerState_CONTAINER_EXITED
			})
			if st := containertest.CtrState(t, m, id); st.Reason == "" || st.ExitCode != 137 || st.FinishedAt == 0 {
				t.Errorf("recorded: reason %q code %d finished %d, want a reason, 137 (SIGKILL)", st.Reason, st.ExitCode, st.FinishedAt)
			}
			if err := sbs.Remove(context.Background(), podID, m); err != nil {
				t.Fatal(err)
			}
			e.Clean(t)
		})
	}
}
