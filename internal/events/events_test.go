package events

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSlowSubscriberIsCutOffNotWaitedFor(t *testing.T) {
	var b Bus
	slow, fast := b.Subscribe(), b.Subscribe()
	for i := 0; i < Buffer+5; i++ {
		b.Publish(&runtimeapi.ContainerEventResponse{ContainerId: "c"})
		<-fast.C // the fast one keeps up
	}
	select {
	case <-slow.Dropped:
	default:
		t.Fatal("a subscriber that fell behind was not cut off")
	}
	b.Publish(&runtimeapi.ContainerEventResponse{ContainerId: "after"})
	if ev := <-fast.C; ev.ContainerId != "after" {
		t.Errorf("fast subscriber got %q", ev.ContainerId)
	}
	var nilBus *Bus
	nilBus.Publish(&runtimeapi.ContainerEventResponse{}) // must not panic
}

func TestEarlyEventsReachTheFirstSubscribers(t *testing.T) {
	b := NewBus()
	b.Publish(&runtimeapi.ContainerEventResponse{ContainerId: "exited-while-down"})
	s := b.Subscribe()
	if ev := <-s.C; ev.ContainerId != "exited-while-down" {
		t.Errorf("first subscriber got %q", ev.ContainerId)
	}
	b.Publish(&runtimeapi.ContainerEventResponse{ContainerId: "live"})
	if ev := <-s.C; ev.ContainerId != "live" {
		t.Errorf("then %q", ev.ContainerId)
	}
	late := &Bus{} // no backlog window
	late.Publish(&runtimeapi.ContainerEventResponse{ContainerId: "x"})
	select {
	case ev := <-late.Subscribe().C:
		t.Errorf("a bus without a window replayed %q", ev.ContainerId)
	default:
	}
}
