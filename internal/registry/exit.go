package registry

import "sync"

// Exit is an object's end, known once: whichever of its monitor, a stop, a removal or
// recovery learns it first marks it, and every waiter selects on Done.
type Exit struct {
	once sync.Once
	ch   chan struct{}
}

// NewExit returns an end not yet known.
func NewExit() *Exit { return &Exit{ch: make(chan struct{})} }

// Mark records that the end is known; later calls do nothing.
func (e *Exit) Mark() { e.once.Do(func() { close(e.ch) }) }

// Done is closed once the end is known.
func (e *Exit) Done() <-chan struct{} { return e.ch }
