package image

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/containers/image/v5/types"
	digest "github.com/opencontainers/go-digest"
)

// stallError is the error of a pull the progress watchdog ended.
type stallError struct{ timeout time.Duration }

func (e *stallError) Error() string {
	return fmt.Sprintf("nothing received for %v while waiting on the registry (image.pull_progress_timeout)", e.timeout)
}

// progressWatch is a pull's clock of waiting without progress: it runs while a request to
// the registry or a read of its bytes is waiting, stops while none is (the pull stores a
// layer, or waits for its turn), and goes back to zero with every byte that arrives. So
// a registry that stalls ends the pull, and a slow one that keeps sending, or a layer
// long to store, does not: containerd's image_pull_progress_timeout, which counts only
// while a request is open (audit 2026-11-26, N8).
type progressWatch struct {
	mu        sync.Mutex
	waiting   int       // requests and reads waiting on the registry
	last      time.Time // the last byte, moved on by the time nothing waited
	idleSince time.Time // when waiting became 0
}

func newProgressWatch(now time.Time) *progressWatch {
	return &progressWatch{last: now, idleSince: now}
}

// begin is a request or read starting to wait on the registry.
func (w *progressWatch) begin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting == 0 {
		// Time spent waiting on nothing does not count.
		w.last = w.last.Add(time.Since(w.idleSince))
	}
	w.waiting++
}

// end is it done, with n bytes (or a response) received.
func (w *progressWatch) end(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if n > 0 {
		w.last = now
	}
	w.waiting--
	if w.waiting == 0 {
		w.idleSince = now
	}
}

// stalled says whether something has waited on the registry for timeout without a byte.
func (w *progressWatch) stalled(now time.Time, timeout time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting > 0 && now.Sub(w.last) >= timeout
}

// watchProgress pulls from ref under a watchdog: the returned context ends once the pull
// has waited timeout for the registry without a byte, and stop, called when the copy is
// over, ends the watch and returns the stall's error if it fired. A timeout of 0 watches
// nothing.
func watchProgress(ctx context.Context, ref types.ImageReference, timeout time.Duration) (context.Context, types.ImageReference, func() error) {
	if timeout <= 0 {
		return ctx, ref, func() error { return nil }
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w := newProgressWatch(time.Now())
	tick := min(max(timeout/10, 10*time.Millisecond), time.Second)
	quit, done := make(chan struct{}), make(chan struct{})
	var stall error
	go func() {
		defer close(done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				if w.stalled(now, timeout) {
					stall = &stallError{timeout: timeout}
					cancel(stall)
					return
				}
			}
		}
	}()
	return ctx, watchedRef{ImageReference: ref, w: w}, func() error {
		close(quit)
		<-done
		cancel(nil)
		return stall
	}
}

// watchedRef is an image reference whose source's requests and blob reads are watched.
// copy.Image asks it only for its source; everything else is the reference's own. The
// wrapped source offers copy.Image only the public ImageSource: no partial (chunked)
// pulls, which the store leaves off (enable_partial_images), and signatures read as
// simple signing ones, which no policy here checks.
type watchedRef struct {
	types.ImageReference
	w *progressWatch
}

func (r watchedRef) NewImageSource(ctx context.Context, sys *types.SystemContext) (types.ImageSource, error) {
	r.w.begin() // the registry's ping and token
	src, err := r.ImageReference.NewImageSource(ctx, sys)
	r.w.end(1)
	if err != nil {
		return nil, err
	}
	return watchedSource{ImageSource: src, w: r.w}, nil
}

type watchedSource struct {
	types.ImageSource
	w *progressWatch
}

func (s watchedSource) GetManifest(ctx context.Context, instance *digest.Digest) ([]byte, string, error) {
	s.w.begin()
	b, mt, err := s.ImageSource.GetManifest(ctx, instance)
	s.w.end(len(b))
	return b, mt, err
}

func (s watchedSource) GetBlob(ctx context.Context, info types.BlobInfo, cache types.BlobInfoCache) (io.ReadCloser, int64, error) {
	s.w.begin()
	rc, size, err := s.ImageSource.GetBlob(ctx, info, cache)
	if err != nil {
		s.w.end(0)
		return nil, 0, err
	}
	s.w.end(1) // the response's head arrived
	return watchedReader{ReadCloser: rc, w: s.w}, size, nil
}

type watchedReader struct {
	io.ReadCloser
	w *progressWatch
}

func (r watchedReader) Read(p []byte) (int, error) {
	r.w.begin()
	n, err := r.ReadCloser.Read(p)
	r.w.end(n)
	return n, err
}
