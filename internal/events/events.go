// Package events fans container and sandbox lifecycle events out to CRI subscribers
// (GetContainerEvents). Publishing never blocks: a subscriber that falls behind is cut
// off, and its stream ends with an error, rather than slowing the daemon.
package events

import (
	"sync"
	"time"

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
	// backlog holds what was published before anyone could subscribe (the daemon's
	// recovery: containers that exited while it was down), for the subscribers of the
	// first minute after start.
	backlog      []*runtimeapi.ContainerEventResponse
	backlogUntil time.Time
}

// BacklogWindow is how long after NewBus early events are replayed to new subscribers.
const BacklogWindow = time.Minute

// NewBus returns a Bus that keeps the events published before its first subscriber for
// the subscribers of the next BacklogWindow.
func NewBus() *Bus { return &Bus{backlogUntil: time.Now().Add(BacklogWindow)} }

// Subscribe returns a new feed; call Unsubscribe when done.
func (b *Bus) Subscribe() *Subscription {
	s := &Subscription{C: make(chan *runtimeapi.ContainerEventResponse, Buffer), Dropped: make(chan struct{})}
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[*Subscription]bool{}
	}
	b.subs[s] = true
	if time.Now().Before(b.backlogUntil) {
		for _, ev := range b.backlog {
			s.C <- ev // fits: the backlog is at most Buffer long
		}
	} else {
		b.backlog = nil
	}
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
	if len(b.subs) == 0 && time.Now().Before(b.backlogUntil) && len(b.backlog) < Buffer {
		b.backlog = append(b.backlog, ev)
	}
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
