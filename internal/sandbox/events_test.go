package sandbox

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/events"
	"github.com/rtshimd/rtshimd/internal/handlers"
)

type podContainers map[string][]*runtimeapi.ContainerStatus

func (p podContainers) PodStatuses(id string) []*runtimeapi.ContainerStatus {
	return p[id]
}

// A pod's events carry its containers' statuses: kubelet's Evented PLEG replaces its view
// of the pod with what an event carries, and a stopped pod still has its containers.
func TestEventsCarryContainers(t *testing.T) {
	bus := events.NewBus()
	m := &Manager{opts: Options{Runtimes: handlers.NewRuntimes(handlers.Env{}), Events: bus,
		Containers: podContainers{"p1": {{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_EXITED}}}}}
	sb, err := m.decodeRecord("p1", []byte(`{"id":"p1","kind":"oci","dir":"/run/x/p1","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":{"metadata":{"name":"p","namespace":"n","uid":"u"}}}`), []byte(`{"state":"notready"}`))
	if err != nil {
		t.Fatal(err)
	}
	sub := bus.Subscribe()
	defer bus.Unsubscribe(sub)
	m.publish(sb, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	select {
	case ev := <-sub.C:
		if ev.PodSandboxStatus.GetId() != "p1" || len(ev.ContainersStatuses) != 1 || ev.ContainersStatuses[0].GetId() != "c1" {
			t.Errorf("stopped pod's event: pod %q containers %v, want p1 with c1", ev.PodSandboxStatus.GetId(), ev.ContainersStatuses)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
}
