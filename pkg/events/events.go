// Package events fans container and sandbox lifecycle events out to CRI subscribers
// (GetContainerEvents). Publishing never blocks: a subscriber that falls behind is cut
// off, and its stream ends with an error, rather than slowing the daemon.
package events

import (
	"sync"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Buffer is how many events a subscriber may lag behind before it is cut off.
const Buffer = 1024

// Subscription is one subscriber's feed.
type Subscription struct {
	C chan *runtimeapi.ContainerEventResponse
	// Dropped is closed when the subscriber was cut off for falling behind.
	Dropped chan struct{}
}

// Bus delivers events to subscribers.
type Bus struct {
	mu   sync.Mutex
	subs map[*Subscription]bool
}

// Subscribe returns a new feed; call Unsubscribe when done.
func (b *Bus) Subscribe() *Subscription {
	s := &Subscription{C: make(chan *runtimeapi.ContainerEventResponse, Buffer), Dropped: make(chan struct{})}
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[*Subscription]bool{}
	}
	b.subs[s] = true
	b.mu.Unlock()
	return s
}

// Unsubscribe ends a feed.
func (b *Bus) Unsubscribe(s *Subscription) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
}

// Publish hands ev to every subscriber without waiting for any of them. A nil Bus
// publishes nothing.
func (b *Bus) Publish(ev *runtimeapi.ContainerEventResponse) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.C <- ev:
		default:
			logrus.Warn("event subscriber fell behind; cutting it off")
			close(s.Dropped)
			delete(b.subs, s)
		}
	}
}
