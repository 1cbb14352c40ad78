package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/pkg/errdefs"
	"github.com/rtshimd/rtshimd/pkg/monitor"
)

// TerminalSize is a terminal's width and height in characters.
type TerminalSize struct{ Width, Height uint16 }

// ExitCodeError is a command that ran and exited non-zero.
type ExitCodeError struct{ Code int }

func (e *ExitCodeError) Error() string { return fmt.Sprintf("command exited with status %d", e.Code) }

// ExecStream runs cmd in the running container with the given streams (streaming Exec).
// With tty the process gets a terminal (the runtime hands its master over a console
// socket), resized as resize says. It returns an *ExitCodeError for a non-zero exit; when
// ctx ends (the client went away) the process is killed.
func (m *Manager) ExecStream(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.Writer, tty bool, resize <-chan TerminalSize) error {
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	x, err := m.prepareExec(c, cmd, tty)
	if err != nil {
		return err
	}
	defer x.cleanup()
	args, pidFile := x.args, x.pidFile
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
	out, errw = watch(out), watch(errw)
	if out == nil {
		out = io.Discard
	}
	run := exec.Command(c.Runtime.Path, append(args, c.ID)...)
	var master *os.File
	if tty {
		// The runtime runs in the foreground on a terminal of ours and relays it to the
		// container's: it resizes the container's terminal when ours is resized (SIGWINCH)
		// and we can wait for it. (A console socket needs a detached exec, whose process
		// nobody could then wait for.)
		var slave *os.File
		if master, slave, err = openPTY(); err != nil {
			return fmt.Errorf("exec in %s: allocate a terminal: %w", c.ID, err)
		}
		defer master.Close()
		run.Stdin, run.Stdout, run.Stderr = slave, slave, slave
		run.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		err = run.Start()
		slave.Close()
	} else {
		run.Stdin, run.Stdout, run.Stderr = in, out, errw
		run.WaitDelay = 2 * time.Second
		err = run.Start()
	}
	if err != nil {
		return fmt.Errorf("handler %q: exec in %s: %w", c.Handler, c.ID, err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	if tty {
		go func() {
			for sz := range resize {
				_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Height, Col: sz.Width})
			}
		}()
		if in != nil {
			go func() { _, _ = io.Copy(master, in) }()
		}
		copied := make(chan struct{})
		go func() { _, _ = io.Copy(out, master); close(copied) }()
		defer func() {
			select { // the last output, without waiting on a terminal someone else holds
			case <-copied:
			case <-time.After(time.Second):
			}
		}()
	}
	select {
	case werr := <-done:
		return exitError(werr)
	case <-gone:
		m.killExec(c, pidFile)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = run.Process.Kill()
			<-done
		}
		return errors.New("the client went away; the process was killed")
	case <-ctx.Done():
		m.killExec(c, pidFile)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = run.Process.Kill()
			<-done
		}
		return ctx.Err()
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func exitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &ExitCodeError{Code: ee.ExitCode()}
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		return nil
	}
	return err
}

// openPTY allocates a pseudo-terminal pair.
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// Attach connects streams to the running container's stdio through its monitor: output as
// it comes (not the past: that is in the log), stdin if the container keeps one, and
// terminal resizes. It returns when the container exits or ctx ends.
func (m *Manager) Attach(ctx context.Context, id string, in io.Reader, out, errw io.Writer, resize <-chan TerminalSize) error {
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	if st := c.Status().State; st != StateRunning {
		return fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	conn, err := monitor.Attach(ctx, c.Dir)
	if err != nil {
		return err
	}
	defer conn.Close()
	var wmu sync.Mutex
	send := func(kind byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return monitor.WriteFrame(conn, kind, p)
	}
	if in != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if n > 0 && send(monitor.FrameStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = send(monitor.FrameCloseStdin, nil)
					return
				}
			}
		}()
	}
	go func() {
		for sz := range resize {
			_ = send(monitor.FrameResize, []byte{byte(sz.Width >> 8), byte(sz.Width), byte(sz.Height >> 8), byte(sz.Height)})
		}
	}()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	for {
		kind, p, err := monitor.ReadFrame(conn)
		if err != nil {
			return nil // the container ended or the client left
		}
		w := out
		if kind == monitor.FrameStderr && errw != nil {
			w = errw
		}
		if w != nil {
			if _, err := w.Write(p); err != nil {
				return nil
			}
		}
	}
}
