package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
)

// TerminalSize is a terminal's width and height in characters.
type TerminalSize = kind.TerminalSize

// ExitCodeError is a command that ran and exited non-zero.
type ExitCodeError struct{ Code int }

func (e *ExitCodeError) Error() string { return fmt.Sprintf("command exited with status %d", e.Code) }

// ExecStream runs cmd in the running container with the given streams (streaming Exec).
// With tty the process gets a terminal, resized as resize says. It returns an
// *ExitCodeError for a non-zero exit; when ctx ends or the client goes away the process
// is killed.
func (m *Manager) ExecStream(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.Writer, tty bool, resize <-chan TerminalSize) error {
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	x, err := m.prepareExec(c, cmd, tty)
	if err != nil {
		return err
	}
	defer os.RemoveAll(x.Dir)
	// A client that goes away shows as a failed write: then the process is ended too.
	gone := make(chan struct{})
	var goneOnce sync.Once
	watch := func(w io.Writer) io.Writer {
		if w == nil {
			return nil
		}
		return writerFunc(func(p []byte) (int, error) {
			n, err := w.Write(p)
			if err != nil {
				goneOnce.Do(func() { close(gone) })
			}
			return n, err
		})
	}
	x.Stdin, x.Stdout, x.Stderr, x.Resize = in, watch(out), watch(errw), resize
	if x.Stdout == nil {
		x.Stdout = io.Discard
	}
	p, err := c.rt.Exec(ctx, c.Task(), x)
	if err != nil {
		return err
	}
	var code int
	var werr error
	done := make(chan struct{})
	go func() { code, werr = p.Wait(); close(done) }()
	select {
	case <-done:
		if werr != nil {
			return werr
		}
		if code != 0 {
			return &ExitCodeError{Code: code}
		}
		return nil
	case <-gone:
		p.Kill()
		waitKilled(done)
		return errors.New("the client went away; the process was killed")
	case <-ctx.Done():
		p.Kill()
		waitKilled(done)
		return ctx.Err()
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Attach connects streams to the running container's stdio through its runtime: output
// as it comes (not the past: that is in the log), stdin if the container keeps one, and
// terminal resizes. It returns when the container exits or ctx ends.
func (m *Manager) Attach(ctx context.Context, id string, in io.Reader, out, errw io.Writer, resize <-chan TerminalSize) error {
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	if st := c.Status().State; st != StateRunning {
		return fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	return c.rt.Attach(ctx, c.Task(), kind.AttachStreams{Stdin: in, Stdout: out, Stderr: errw, Resize: resize})
}
