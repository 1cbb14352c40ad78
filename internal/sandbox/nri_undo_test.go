package sandbox

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
)

// slowNRI stands for NRI's adaptation with a plugin so slow that the request's context
// ends while it is asked about the pod: RunPodSandbox fails with the context's error. As
// the adaptation, a call made with a context that has ended reaches no plugin.
type slowNRI struct {
	expire context.CancelFunc // ends the request's context

	mu     sync.Mutex
	events []string
}

func (n *slowNRI) record(ev string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, ev)
}

func (n *slowNRI) Events() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.events)
}

func (n *slowNRI) RunPodSandbox(ctx context.Context, sb *Sandbox) error {
	n.record("RunPodSandbox")
	n.expire()
	<-ctx.Done()
	return fmt.Errorf("nri: run pod sandbox %s: %w", sb.ID, ctx.Err())
}

func (n *slowNRI) RemovePodSandbox(ctx context.Context, _ *Sandbox) {
	if ctx.Err() != nil {
		n.record("RemovePodSandbox not delivered: " + ctx.Err().Error())
		return
	}
	if _, ok := ctx.Deadline(); !ok {
		n.record("RemovePodSandbox without a deadline")
		return
	}
	n.record("RemovePodSandbox")
}

func (n *slowNRI) StopPodSandbox(context.Context, *Sandbox) { n.record("StopPodSandbox") }
func (n *slowNRI) UpdatePodSandbox(context.Context, *Sandbox, *runtimeapi.LinuxContainerResources, *runtimeapi.LinuxContainerResources) error {
	return nil
}
func (n *slowNRI) PostUpdatePodSandbox(context.Context, *Sandbox) {}
func (n *slowNRI) BlockSync() func()                              { return func() {} }

// A pod that NRI's RunPodSandbox failed because the request's context ended (its
// deadline passed while a slow plugin was asked) is undone to the plugins with a context
// of its own, with a deadline: with the request's, no plugin would hear RemovePodSandbox
// and those that reserved something for the pod would keep it (audit 2026-11-26, N5; the
// containers' undo is create.go's, 9c71c25).
func TestRunUndoneToNRIWhenTheRequestExpired(t *testing.T) {
	for _, plan := range []string{"namespaces", "sandboxed"} {
		t.Run(plan, func(t *testing.T) {
			e := newEnv(t, sandboxtest.Plans[plan])
			m := e.manager()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			nri := &slowNRI{expire: cancel}
			m.opts.NRI = nri
			if _, _, err := m.Run(ctx, sandboxtest.PodConfig("web"), ""); err == nil {
				t.Fatal("Run succeeded; want NRI's error")
			}
			if got, want := nri.Events(), []string{"RunPodSandbox", "RemovePodSandbox"}; !slices.Equal(got, want) {
				t.Errorf("NRI heard %q, want %q", got, want)
			}
			e.clean(t)
		})
	}
}
