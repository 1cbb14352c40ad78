package image

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/containers/image/v5/docker"
	dockerref "github.com/containers/image/v5/docker/reference"
	"github.com/containers/image/v5/types"
)

// The watch's clock: it runs only while something waits on the registry, and every byte
// sets it back (audit 2026-11-26, N8).
func TestProgressWatchClock(t *testing.T) {
	const timeout = time.Minute
	t0 := time.Now()
	w := newProgressWatch(t0)
	if w.stalled(t0.Add(time.Hour), timeout) {
		t.Error("stalled with nothing waiting")
	}
	w.begin()
	if w.stalled(time.Now().Add(timeout/2), timeout) {
		t.Error("stalled after half the timeout")
	}
	if !w.stalled(time.Now().Add(timeout+time.Second), timeout) {
		t.Error("not stalled after waiting longer than the timeout")
	}
	w.end(1)
	w.begin()
	if w.stalled(time.Now().Add(timeout/2), timeout) {
		t.Error("a byte did not set the clock back")
	}
	w.end(0)
	// Time with nothing waiting (a layer being stored) does not count.
	w.idleSince = w.idleSince.Add(-2 * timeout)
	w.begin()
	if w.stalled(time.Now().Add(timeout/2), timeout) {
		t.Error("time with nothing waiting counted")
	}
	w.end(0)
	// A read that returns no bytes is no progress.
	w = newProgressWatch(time.Now())
	w.begin()
	w.end(0)
	w.begin()
	if !w.stalled(time.Now().Add(timeout+time.Second), timeout) {
		t.Error("empty reads set the clock back")
	}
	w.end(0)
}

// blockingReader sends n bytes, one every `every`, then blocks until closed.
type blockingReader struct {
	n      int
	every  time.Duration
	closed chan struct{}
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		<-r.closed
		return 0, io.ErrClosedPipe
	}
	time.Sleep(r.every)
	r.n--
	p[0] = 'x'
	return 1, nil
}

func (r *blockingReader) Close() error { close(r.closed); return nil }

// A reader that keeps sending, slower than any read but faster than the timeout, for
// several timeouts, is not cut; once it stops, the watch ends the pull's context with
// the stall's error.
func TestWatchProgressSlowThenStalled(t *testing.T) {
	named, _ := dockerref.ParseNormalizedNamed("127.0.0.1:5000/slow:1")
	ref, err := docker.NewReference(named)
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 300 * time.Millisecond
	ctx, watched, stop := watchProgress(context.Background(), ref, timeout)
	w := watched.(watchedRef).w
	src := watchedSource{w: w}
	r := watchedReader{ReadCloser: &blockingReader{n: 12, every: timeout / 3, closed: make(chan struct{})}, w: src.w}
	start := time.Now()
	buf := make([]byte, 16)
	for range 12 {
		if _, err := r.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("a slow but steady transfer of %v was cut: %v", time.Since(start), context.Cause(ctx))
	}
	go func() { <-ctx.Done(); r.Close() }()
	stalledAt := time.Now()
	_, _ = r.Read(buf)
	if took := time.Since(stalledAt); took < timeout || took > 10*timeout {
		t.Errorf("stall noticed after %v, want about %v", took, timeout)
	}
	serr := stop()
	var se *stallError
	if !errors.As(serr, &se) || !errors.As(context.Cause(ctx), &se) {
		t.Fatalf("stop: %v, cause %v; want the stall", serr, context.Cause(ctx))
	}
	err = pullError(named, serr)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v is not DeadlineExceeded", err)
	}
	for _, want := range []string{"image.pull_progress_timeout", "127.0.0.1:5000/slow:1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
	// A watch with a timeout of 0 watches nothing.
	if _, ref2, stop2 := watchProgress(context.Background(), ref, 0); ref2 != types.ImageReference(ref) || stop2() != nil {
		t.Error("timeout 0 still watched")
	}
}
