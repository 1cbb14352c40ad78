//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// GetContainerEvents streams a pod's and a container's whole life, in order, to more
// than one subscriber; a container that exits by itself is reported stopped.
func TestContainerEvents(t *testing.T) {
	e := newContainerEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subs := []chan *runtimeapi.ContainerEventResponse{make(chan *runtimeapi.ContainerEventResponse, 100), make(chan *runtimeapi.ContainerEventResponse, 100)}
	for _, ch := range subs {
		// The server sends the stream's header once it has subscribed: waiting for it
		// orders the subscription before the pod below.
		ready := make(chan error, 1)
		go func() {
			_ = e.d.RS.GetContainerEvents(ctx, ch, func(c runtimeapi.RuntimeService_GetContainerEventsClient) {
				_, err := c.Header()
				ready <- err
			})
		}()
		select {
		case err := <-ready:
			if err != nil {
				t.Fatalf("event stream: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("event stream not subscribed")
		}
	}

	podID, pod := e.pod("events", "runc")
	id := e.run(podID, pod, e.ctrConfig("short", "sh", "-c", "sleep 1; exit 2"))
	e.waitExit(id)
	// kubelet's Evented PLEG reads the pod's containers from PodSandboxStatus alone.
	if resp, err := e.d.RS.PodSandboxStatus(ctxT(t), podID, false); err != nil || len(resp.GetContainersStatuses()) != 1 ||
		resp.ContainersStatuses[0].Id != id || resp.ContainersStatuses[0].ExitCode != 2 {
		t.Errorf("PodSandboxStatus containers_statuses %v, %v; want the exited container", resp.GetContainersStatuses(), err)
	}
	if err := e.d.RS.RemoveContainer(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RS.StopPodSandbox(ctxT(t), podID); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RS.RemovePodSandbox(ctxT(t), podID); err != nil {
		t.Fatal(err)
	}

	type ev struct {
		id  string
		typ runtimeapi.ContainerEventType
	}
	want := []ev{
		{podID, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT},
		{podID, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT},
		{id, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT},
		{id, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT},
		{id, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT},
		{id, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT},
		{podID, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT},
		{podID, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT},
	}
	for n, ch := range subs {
		for i, w := range want {
			select {
			case got := <-ch:
				if got.ContainerId != w.id || got.ContainerEventType != w.typ {
					t.Fatalf("subscriber %d event %d: %s %v, want %s %v", n, i, got.ContainerId[:12], got.ContainerEventType, w.id[:12], w.typ)
				}
				if got.PodSandboxStatus.GetId() != podID {
					t.Errorf("event %d carries pod status %v", i, got.PodSandboxStatus.GetId())
				}
				if w.id == id && (len(got.ContainersStatuses) != 1 || got.ContainersStatuses[0].Id != id) {
					t.Errorf("container event %d without the container's status", i)
				}
				if w.typ == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT && w.id == id && got.ContainersStatuses[0].ExitCode != 2 {
					t.Errorf("stopped event exit code %d, want 2", got.ContainersStatuses[0].ExitCode)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("subscriber %d: no event %d (%v)", n, i, w.typ)
			}
		}
	}
}

// A container that exits while the daemon is down is reported stopped to the subscribers
// that connect after the restart.
func TestEventsAfterRestart(t *testing.T) {
	e := newContainerEnv(t)
	podID, pod := e.pod("events-restart", "runc")
	id := e.run(podID, pod, e.ctrConfig("brief", "sh", "-c", "sleep 2; exit 4"))
	p := runningProcess(t, e.d, id)
	e.d.Kill()
	p.waitExitedWhileDown(t)
	e.d.Start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan *runtimeapi.ContainerEventResponse, 100)
	go func() { _ = e.d.RS.GetContainerEvents(ctx, ch, nil) }()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ev.ContainerId == id && ev.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
				if ev.ContainersStatuses[0].ExitCode != 4 {
					t.Errorf("exit code %d, want 4", ev.ContainersStatuses[0].ExitCode)
				}
				_ = e.d.RS.RemovePodSandbox(ctxT(t), podID)
				return
			}
		case <-deadline:
			t.Fatal("no STOPPED event for the container that exited while the daemon was down")
		}
	}
}

// A daemon that stops ends its event streams at once with a reason, rather than holding
// its graceful stop until the grace period runs out (kubelet's evented PLEG and
// `crictl events` keep one open all the time).
func TestEventsEndOnShutdown(t *testing.T) {
	d := newDaemon(t)
	ch := make(chan *runtimeapi.ContainerEventResponse, 10)
	ready, ended := make(chan struct{}), make(chan error, 1)
	go func() {
		ended <- d.RS.GetContainerEvents(context.Background(), ch, func(runtimeapi.RuntimeService_GetContainerEventsClient) { close(ready) })
	}()
	<-ready
	d.Stop()
	err := <-ended
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "rtshimd is shutting down") {
		t.Errorf("event stream ended with %v, want Unavailable naming the shutdown", err)
	}
}
