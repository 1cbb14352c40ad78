// Package monitor is the contract between rtshimd and rtshim-monitor, the small process
// that supervises one container: the files it reads and writes in the container's run
// directory, and the daemon's side of starting and watching it. The monitor itself is the
// C program in cmd/rtshim-monitor; docs/monitor-protocol.md states the protocol both
// sides keep.
package monitor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Files in a container's run directory.
const (
	ConfigFile = "monitor.json" // Config, written by the daemon
	ExitFile   = "exit.json"    // Exit, written by the monitor when the container's init ends
	SocketFile = "monitor.sock" // watch socket: one Exit line is sent to every client, then EOF
	LogFile    = "monitor.log"  // the monitor's own diagnostics
	PidFile    = "init.pid"     // written by the runtime (--pid-file)
)

// Config tells the monitor what to run.
type Config struct {
	ID string `json:"id"`
	// Dir is the container's run directory, where the files above live.
	Dir string `json:"dir"`
	// Runtime and RuntimeArgs: the OCI runtime binary and its global flags (--root ...).
	Runtime     string   `json:"runtime"`
	RuntimeArgs []string `json:"runtime_args,omitempty"`
	Bundle      string   `json:"bundle"`
	// LogPath receives the container's stdout and stderr in the CRI log format; empty
	// discards them.
	LogPath string `json:"log_path,omitempty"`
	// LogDir is the pod's log directory, below which LogPath lies: no symlink below it
	// is followed when the log is opened. Empty (an older daemon): LogPath's directory.
	LogDir string `json:"log_dir,omitempty"`
	// ExecFifo is runc's exec FIFO for the container (<root>/<id>/exec.fifo): start reads
	// it as `runc start` would, rather than run runc, when it is a FIFO there. Empty: start
	// runs `<runtime> start`.
	ExecFifo string `json:"exec_fifo,omitempty"`
	// RestoreImage is a CRIU image (a checkpoint's) the container is restored from: create
	// runs nothing and reports no pid; start runs `<runtime> restore --detach` with the
	// container's stdio pipes, CRIU's work files in RestoreWork.
	RestoreImage string `json:"restore_image,omitempty"`
	RestoreWork  string `json:"restore_work,omitempty"`
	// RestoreLSM is passed as the restore's --lsm-profile (TYPE:NAME).
	RestoreLSM string `json:"restore_lsm,omitempty"`
	// WaitWithRuntime: the container's processes are not host processes we can wait for
	// (a subcontainer of a runsc sandbox); follow it with `<runtime> wait` after start.
	WaitWithRuntime bool `json:"wait_with_runtime,omitempty"`
	// Stdin keeps a pipe to the container's stdin for attach clients; StdinOnce closes it
	// when the first attach client's stdin ends. Terminal gives the container a pty (the
	// runtime hands over its master), which then carries stdin and output.
	Stdin     bool `json:"stdin,omitempty"`
	StdinOnce bool `json:"stdin_once,omitempty"`
	Terminal  bool `json:"terminal,omitempty"`
}

// Commands the monitor answers on its socket, one per connection.
const (
	CmdWatch  = "watch"
	CmdStart  = "start"
	CmdReopen = "reopen"
	CmdExit   = "exit"
)

// Result is what the monitor reports over the sync pipe once `create` has returned (no
// pid for a container restored at start).
type Result struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// Exit is the end of a container's init process.
type Exit struct {
	Pid      int       `json:"pid"`
	Status   int       `json:"status"` // exit code, or 128+signal
	Signal   int       `json:"signal,omitempty"`
	ExitedAt time.Time `json:"exited_at"`
}

// CreateTimeout bounds a runtime's create when the caller's context has no deadline
// (kubelet's requests have one, 2 minutes by default; crictl without --timeout, a probe
// or recovery may not): a hung `runsc create` must not pin a container's name and a
// goroutine for ever. Longer than kubelet's, as a sandbox runtime's create on a loaded
// node may be slow. The monitor kills the runtime after it too, should the daemon be gone.
const CreateTimeout = 4 * time.Minute

// createTimeout is CreateTimeout, shorter in tests.
var createTimeout = CreateTimeout

// WithCreateDeadline returns ctx, given CreateTimeout's deadline if it has none.
func WithCreateDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, createTimeout)
}

// Process is a monitor the daemon started.
type Process struct {
	Pid     int // the monitor's pid
	InitPid int // the container's init pid, as the runtime reported it
	Dir     string
	done    <-chan struct{}
}

// Start launches the monitor binary for cfg, waits until the runtime's create has
// finished and returns the container's init pid, or the runtime's error text. If ctx ends
// first, the monitor's process group is killed and ctx's error returned; the caller still
// owes the runtime a forced delete.
func Start(ctx context.Context, binary string, cfg Config) (*Process, error) {
	ctx, cancel := WithCreateDeadline(ctx)
	defer cancel()
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if err := store.WriteFileAtomic(filepath.Join(cfg.Dir, ConfigFile), data, 0o600); err != nil {
		return nil, fmt.Errorf("write monitor config: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open monitor log: %w", err)
	}
	defer logf.Close()
	p, r, err := spawn(binary, []string{filepath.Join(cfg.Dir, ConfigFile)}, cfg.Dir, logf)
	if err != nil {
		return nil, fmt.Errorf("start monitor %s: %w", binary, err)
	}
	defer r.Close()

	type reply struct {
		res Result
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		var res Result
		err := json.NewDecoder(r).Decode(&res)
		ch <- reply{res, err}
	}()
	select {
	case rep := <-ch:
		if rep.err != nil {
			<-p.done
			return nil, fmt.Errorf("the container's monitor (%s) exited before reporting: %s", binary, tail(filepath.Join(cfg.Dir, LogFile)))
		}
		if rep.res.Error != "" {
			<-p.done
			return nil, errors.New(rep.res.Error)
		}
		p.InitPid = rep.res.Pid
		return p, nil
	case <-ctx.Done():
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		<-p.done
		return nil, fmt.Errorf("waiting for runtime create: %w", ctx.Err())
	}
}

// spawn starts binary with args in dir, in a session of its own (a signal to the
// daemon's process group never reaches containers, and it outlives the daemon), its
// output to out (nil: none), and a pipe on fd 3 through which it reports: the read end
// is returned. The daemon reaps it: Process.done closes when it exits.
func spawn(binary string, args []string, dir string, out *os.File, env ...string) (*Process, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// PATH only: the runtime inherits it, and runc with the GOMAXPROCS=1 GOGC=50 the Go
	// monitor once had took 6 ms longer to create a container.
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	done, err := startReaped(cmd)
	w.Close()
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return &Process{Pid: cmd.Process.Pid, Dir: dir, done: done}, r, nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 512 {
		s = s[len(s)-512:]
	}
	return s
}

// Watch blocks until the container supervised in dir has exited and returns its Exit. It
// works for monitors started by an earlier daemon too: it holds a connection to the
// monitor's socket, which the monitor answers when the init ends (or the kernel closes
// when the monitor dies). ok is false if the monitor ended without recording an exit.
func Watch(ctx context.Context, dir string) (Exit, bool, error) {
	var line []byte
	conn, err := dial(ctx, dir)
	if err == nil {
		_, _ = conn.Write([]byte(CmdWatch + "\n"))
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		// The exit is read from its file; the answer (the exit line, under 256 bytes) is
		// kept for a monitor that could not write the file. Read in small steps, not with
		// a 4 KiB bufio.Reader held by every watch for the life of its container.
		var b [64]byte
		for len(line) < 512 {
			n, err := conn.Read(b[:])
			line = append(line, b[:n]...)
			if err != nil || bytes.IndexByte(b[:n], '\n') >= 0 {
				break
			}
		}
		stop()
		conn.Close()
		if ctx.Err() != nil {
			return Exit{}, false, ctx.Err()
		}
	}
	e, err := ReadExit(dir)
	if err != nil {
		// The monitor could not write exit.json and served the exit to this watch instead.
		if l, _, ok := bytes.Cut(line, []byte("\n")); ok && json.Unmarshal(l, &e) == nil && !e.ExitedAt.IsZero() {
			return e, true, nil
		}
		return Exit{}, false, nil
	}
	return e, true, nil
}

// Command sends cmd (CmdStart, CmdReopen, CmdExit) to the monitor in dir and returns its
// answer as an error.
func Command(ctx context.Context, dir, cmd string) error {
	conn, err := dial(ctx, dir)
	if err != nil {
		return fmt.Errorf("the monitor of %s is not running (it exited or was killed); remove and recreate it: %w", filepath.Base(dir), errdefs.ErrFailedPrecondition)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := conn.Write([]byte(cmd + "\n")); err != nil {
		return fmt.Errorf("monitor %s: %w", cmd, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("monitor %s: %w", cmd, ctx.Err())
		}
		return fmt.Errorf("monitor %s: no answer: %w", cmd, err)
	}
	line = strings.TrimSpace(line)
	if line == "ok" {
		return nil
	}
	return errors.New(strings.TrimPrefix(line, "error "))
}

// ReadExit reads the exit file in dir; os.ErrNotExist means the init has not exited (or
// its monitor died before it could say).
func ReadExit(dir string) (Exit, error) {
	var e Exit
	b, err := os.ReadFile(filepath.Join(dir, ExitFile))
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("parse %s: %w", filepath.Join(dir, ExitFile), err)
	}
	return e, nil
}

// Alive reports whether a monitor is serving in dir.
func Alive(dir string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := dial(ctx, dir)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// dial connects to the monitor socket in dir. Run directories are deeper than a socket
// path may be long (108 bytes), so the path goes through an O_PATH descriptor of dir.
func dial(ctx context.Context, dir string) (net.Conn, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", fd, SocketFile))
}
