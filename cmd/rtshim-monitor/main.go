// rtshim-monitor supervises one container for rtshimd: it runs the OCI runtime's
// `create`, reports the result on fd 3, holds the container's stdio (writing it to the CRI
// log), starts the container when asked, reaps the container's processes as a child
// subreaper, and records the init's exit in exit.json. It runs in its own session so the
// daemon can restart freely. Standard library and x/sys only: one of these runs per
// container, so it must stay small.
//
// The daemon talks to it over monitor.sock, one command line per connection:
//
//	watch    answered with the exit record (JSON line) once the container has exited
//	start    runs `<runtime> start`; answered "ok" or "error <text>"
//	reopen   reopens the CRI log file (after kubelet rotated it); "ok" or "error <text>"
//	exit     for a container that was never started: stop supervising it
//
// `rtshim-monitor logger <dir>` is logger mode (logger.go): the binary logger a shim v2
// runs for one container, writing its CRI log and serving attach and reopen.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/pkg/monitor"
	"github.com/rtshimd/rtshimd/pkg/store"
	"github.com/rtshimd/rtshimd/pkg/unixsock"
)

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if len(os.Args) == 3 && os.Args[1] == monitor.LoggerMode {
		if err := runLogger(os.Args[2]); err != nil {
			log.Printf("logger: %v", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: rtshim-monitor <dir>/monitor.json | logger <dir> (started by rtshimd or a shim)")
		os.Exit(2)
	}
	syncPipe := os.NewFile(3, "sync")
	if err := run(os.Args[1], syncPipe); err != nil {
		log.Printf("monitor: %v", err)
		os.Exit(1)
	}
}

func report(sync *os.File, res monitor.Result) {
	_ = json.NewEncoder(sync).Encode(res)
	sync.Close()
}

// mon is the state the command handlers share.
type mon struct {
	cfg  monitor.Config
	sink *monitor.CRILog

	mu       sync.Mutex
	exitLine []byte        // set once the container has exited
	watchers []net.Conn    // waiting for exitLine
	started  bool          // start succeeded
	exited   chan exitNote // the container's end, from reap or `runtime wait`
	reaper   *reaper
	// startStdio are the container's stdout and stderr for a runtime that wires them at
	// start; startStdin and console its stdin and terminal.
	startStdio []*os.File
	startStdin *os.File
	console    *net.UnixListener
	att        *attachers
	// loggerOnly: logger mode (logger.go), which serves attach and reopen only.
	loggerOnly bool
}

type exitNote struct {
	e  monitor.Exit
	ok bool // false: supervision ended without an exit (never started, then removed)
}

func run(cfgPath string, sync *os.File) error {
	m := &mon{exited: make(chan exitNote, 2), att: &attachers{conns: map[net.Conn]bool{}}}
	b, err := os.ReadFile(cfgPath)
	if err == nil {
		err = json.Unmarshal(b, &m.cfg)
	}
	if err != nil {
		report(sync, monitor.Result{Error: fmt.Sprintf("monitor: read config: %v", err)})
		return err
	}
	cfg := m.cfg
	log.SetPrefix(cfg.ID[:min(12, len(cfg.ID))] + " ")
	// Orphans of the runtime (runc's init, runsc's sandbox and gofer) become our children,
	// so we can wait for the init and reap the rest promptly.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report(sync, monitor.Result{Error: fmt.Sprintf("monitor: set child subreaper: %v", err)})
		return err
	}
	// Relative to our working directory (the run dir): the full path can exceed the
	// 108 bytes a socket address holds.
	if err := os.Chdir(cfg.Dir); err != nil {
		report(sync, monitor.Result{Error: fmt.Sprintf("monitor: %v", err)})
		return err
	}
	_ = os.Remove(monitor.SocketFile)
	ln, err := unixsock.Listen(monitor.SocketFile, 0o600)
	if err != nil {
		report(sync, monitor.Result{Error: fmt.Sprintf("monitor: listen %s: %v", monitor.SocketFile, err)})
		return err
	}
	go m.serve(ln)
	m.reaper = newReaper()

	pid, err := m.create()
	if err != nil {
		report(sync, monitor.Result{Error: err.Error()})
		return err
	}
	report(sync, monitor.Result{Pid: pid})
	log.Printf("container %s created, pid %d", cfg.ID, pid)

	if !cfg.WaitWithRuntime {
		go func() { m.exited <- exitNote{e: exitOf(pid, m.reaper.wait(pid)), ok: true} }()
	}
	note := <-m.exited
	if note.ok {
		data, _ := json.Marshal(note.e)
		if err := store.WriteFileAtomic(filepath.Join(cfg.Dir, monitor.ExitFile), data, 0o600); err != nil {
			log.Printf("write exit file: %v", err)
		}
		log.Printf("container exited with status %d", note.e.Status)
		m.notify(append(data, '\n'))
		m.att.end()
	} else {
		log.Printf("supervision ended without a start")
		m.notify([]byte("{}\n"))
	}
	ln.Close()
	_ = os.Remove(monitor.SocketFile)
	// Give the log copiers a moment for the last lines; never wait for EOF (runsc holds
	// the pipes of every container in its sandbox).
	// The reaper goroutine takes the runtime's remaining helpers for a moment more.
	time.Sleep(100 * time.Millisecond)
	return nil
}

// create runs `<runtime> create` with the container's stdio wired to the log writer and
// returns the pid the runtime reports. On failure the error carries the runtime's words.
func (m *mon) create() (int, error) {
	cfg := m.cfg
	if cfg.LogPath != "" {
		var err error
		if m.sink, err = monitor.OpenCRILog(cfg.LogDir, cfg.LogPath); err != nil {
			return 0, fmt.Errorf("open container log %s: %w", cfg.LogPath, err)
		}
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	stdin := devnull
	m.att.once = cfg.StdinOnce
	if cfg.Stdin && !cfg.Terminal {
		r, w, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		stdin, m.att.stdin = r, w
		if cfg.WaitWithRuntime {
			m.startStdin = r // runsc wires a subcontainer's stdio at start
		} else {
			defer r.Close()
		}
	}
	var console *net.UnixListener
	if cfg.Terminal {
		_ = os.Remove(consoleSocketFile)
		if console, err = net.ListenUnix("unix", &net.UnixAddr{Name: consoleSocketFile, Net: "unix"}); err != nil {
			return 0, fmt.Errorf("console socket: %w", err)
		}
		if cfg.WaitWithRuntime {
			m.console = console // runsc hands a subcontainer's terminal over at start
		} else {
			defer console.Close()
		}
	}
	// While create runs, its output is also the runtime's error text; keep the last part.
	out := &tailBuffer{max: 8 << 10}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	go copyStream(m.sink, "stdout", stdoutR, out, m.att.writer(monitor.FrameStdout))
	go copyStream(m.sink, "stderr", stderrR, out, m.att.writer(monitor.FrameStderr))

	pidFile := filepath.Join(cfg.Dir, monitor.PidFile)
	args := append(append([]string{}, cfg.RuntimeArgs...), "create", "--bundle", cfg.Bundle, "--pid-file", pidFile)
	if console != nil {
		args = append(args, "--console-socket", consoleSocketFile)
	}
	args = append(args, cfg.ID)
	// Bounded even if the daemon that waits for it is gone (see monitor.CreateTimeout).
	err = m.reaper.run(stdin, stdoutW, stderrW, cfg.Bundle, monitor.CreateTimeout, cfg.Runtime, args...)
	if cfg.WaitWithRuntime && err == nil {
		// A sandboxed subcontainer gets its stdio from `start` (runsc passes the start
		// command's own), so keep the write ends for it.
		m.startStdio = []*os.File{stdoutW, stderrW}
	} else {
		stdoutW.Close()
		stderrW.Close()
	}
	if err != nil {
		time.Sleep(20 * time.Millisecond) // let the copiers take the runtime's last words
		return 0, fmt.Errorf("%s create: %v: %s", filepath.Base(cfg.Runtime), err, out.String())
	}
	out.stop()
	if console != nil && !cfg.WaitWithRuntime {
		master, err := receiveConsole(console)
		if err != nil {
			return 0, fmt.Errorf("%s create: %w", filepath.Base(cfg.Runtime), err)
		}
		m.att.master, m.att.stdin = master, master
		// A terminal has one stream: the container's output, logged as stdout.
		go copyStream(m.sink, "stdout", master, &tailBuffer{stopped: true}, m.att.writer(monitor.FrameStdout))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("%s create: read pid file: %w", filepath.Base(cfg.Runtime), err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s create: bad pid file %q", filepath.Base(cfg.Runtime), b)
	}
	return pid, nil
}

func copyStream(sink *monitor.CRILog, stream string, r io.Reader, tee *tailBuffer, attached io.Writer) {
	r = io.TeeReader(io.TeeReader(r, tee), attached)
	if sink == nil {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	sink.Copy(stream, r)
}

// start runs `<runtime> start`; for sandboxed subcontainers (whose processes are not ours
// to wait for) it then follows them with `<runtime> wait`.
func (m *mon) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return nil
	}
	cfg := m.cfg
	var out string
	var err error
	if len(m.startStdio) == 2 {
		err = m.startWithStdio()
	} else {
		out, err = m.runtimeCmd(60*time.Second, "start", cfg.ID)
	}
	if err != nil {
		return fmt.Errorf("%s start: %v: %s", filepath.Base(cfg.Runtime), err, out)
	}
	if m.console != nil {
		master, err := receiveConsole(m.console)
		m.console.Close()
		m.console = nil
		if err != nil {
			return fmt.Errorf("%s start: %w", filepath.Base(cfg.Runtime), err)
		}
		m.att.mu.Lock()
		m.att.master, m.att.stdin = master, master
		m.att.mu.Unlock()
		go copyStream(m.sink, "stdout", master, &tailBuffer{stopped: true}, m.att.writer(monitor.FrameStdout))
	}
	m.started = true
	if cfg.WaitWithRuntime {
		go func() {
			out, err := m.runtimeCmd(0, "wait", cfg.ID)
			e := monitor.Exit{Status: 255, ExitedAt: time.Now()}
			var res struct {
				ExitStatus int `json:"exitStatus"`
			}
			// runsc reports the exit code (128+signal for a signal), not a raw wait status.
			if err == nil && json.Unmarshal([]byte(out), &res) == nil {
				e.Status = res.ExitStatus
			} else {
				log.Printf("%s wait: %v: %s", filepath.Base(cfg.Runtime), err, out)
			}
			m.exited <- exitNote{e: e, ok: true}
		}()
	}
	return nil
}

// startWithStdio runs `<runtime> start` with the container's stdout and stderr as its own
// (runsc hands a subcontainer the start command's stdio), then lets them go.
func (m *mon) startWithStdio() error {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	stdin := devnull
	if m.startStdin != nil {
		stdin = m.startStdin
		defer func() { m.startStdin.Close(); m.startStdin = nil }()
	}
	args := append(append([]string{}, m.cfg.RuntimeArgs...), "start", m.cfg.ID)
	err = m.reaper.run(stdin, m.startStdio[0], m.startStdio[1], m.cfg.Bundle, 60*time.Second, m.cfg.Runtime, args...)
	for _, f := range m.startStdio {
		f.Close()
	}
	m.startStdio = nil
	return err
}

// runtimeCmd runs one runtime subcommand with the container's global flags.
func (m *mon) runtimeCmd(timeout time.Duration, args ...string) (string, error) {
	return m.reaper.output(timeout, m.cfg.Runtime, append(append([]string{}, m.cfg.RuntimeArgs...), args...)...)
}

// reaper is the only caller of wait4 in this process: as a subreaper we inherit the
// runtime's orphans, and a second waiter (os/exec's) would race it for their statuses.
// Commands are started with spawn and waited for through it.
type reaper struct {
	mu       sync.Mutex
	waiters  map[int]chan unix.WaitStatus
	finished map[int]unix.WaitStatus
}

// maxFinished bounds the statuses kept for processes nobody waits for yet (the init can
// exit before its pid is known; other orphans, with a host PID namespace, are many).
const maxFinished = 64

func newReaper() *reaper {
	r := &reaper{waiters: map[int]chan unix.WaitStatus{}, finished: map[int]unix.WaitStatus{}}
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, unix.SIGCHLD)
	go r.loop(sigchld)
	return r
}

func (r *reaper) loop(sigchld chan os.Signal) {
	for {
		// WNOHANG: a wait4 that blocks would pin an OS thread (and make the runtime
		// start another) for the monitor's whole life.
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || pid <= 0 { // no children, or none has ended yet
				break
			}
			r.reaped(pid, ws)
		}
		// SIGCHLD says a child ended; the timeout is a safety net only.
		select {
		case <-sigchld:
		case <-time.After(10 * time.Second):
		}
	}
}

func (r *reaper) reaped(pid int, ws unix.WaitStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.waiters[pid]; ok {
		delete(r.waiters, pid)
		ch <- ws
		return
	}
	if len(r.finished) >= maxFinished {
		for k := range r.finished {
			delete(r.finished, k)
			break
		}
	}
	r.finished[pid] = ws
}

// wait blocks until pid (a child, or an orphan we inherited) has exited.
func (r *reaper) wait(pid int) unix.WaitStatus {
	r.mu.Lock()
	if ws, ok := r.finished[pid]; ok {
		delete(r.finished, pid)
		r.mu.Unlock()
		return ws
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiters[pid] = ch
	r.mu.Unlock()
	return <-ch
}

// spawn runs a command with the given stdio and waits for it through the reaper. Output
// pipes are the caller's; nothing waits for their EOF.
func (r *reaper) run(stdin, stdout, stderr *os.File, dir string, timeout time.Duration, name string, args ...string) error {
	// Register before the loop can see the process end, and drop any stale status of an
	// earlier process with the same pid.
	r.mu.Lock()
	p, err := os.StartProcess(name, append([]string{name}, args...), &os.ProcAttr{Dir: dir, Files: []*os.File{stdin, stdout, stderr}})
	if err != nil {
		r.mu.Unlock()
		return err
	}
	delete(r.finished, p.Pid)
	ch := make(chan unix.WaitStatus, 1)
	r.waiters[p.Pid] = ch
	r.mu.Unlock()
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, func() { _ = p.Signal(os.Kill) })
		defer timer.Stop()
	}
	ws := <-ch
	_ = p.Release()
	switch {
	case ws.Exited() && ws.ExitStatus() == 0:
		return nil
	case ws.Exited():
		return fmt.Errorf("exit status %d", ws.ExitStatus())
	default:
		return fmt.Errorf("killed by %v", ws.Signal())
	}
}

// output runs a command and returns what it printed (bounded wait for the pipe).
func (r *reaper) output(timeout time.Duration, name string, args ...string) (string, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return "", err
	}
	defer devnull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return "", err
	}
	done := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(io.LimitReader(pr, 1<<20)); done <- b }()
	err = r.run(devnull, pw, pw, "/", timeout, name, args...)
	pw.Close()
	var out []byte
	select {
	case out = <-done:
	case <-time.After(time.Second): // runsc's sandbox may hold the pipe
	}
	pr.Close()
	return strings.TrimSpace(string(out)), err
}

func exitOf(pid int, ws unix.WaitStatus) monitor.Exit {
	e := monitor.Exit{Pid: pid, ExitedAt: time.Now()}
	switch {
	case ws.Exited():
		e.Status = ws.ExitStatus()
	case ws.Signaled():
		e.Signal = int(ws.Signal())
		e.Status = 128 + e.Signal
	default:
		e.Status = 255
	}
	return e
}

func (m *mon) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go m.handle(c)
	}
}

func (m *mon) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	reply := func(err error) {
		if err != nil {
			fmt.Fprintf(c, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " | "))
		} else {
			fmt.Fprintln(c, "ok")
		}
		c.Close()
	}
	cmd := strings.TrimSpace(line)
	if m.loggerOnly && cmd != monitor.CmdAttach && cmd != monitor.CmdReopen {
		reply(fmt.Errorf("command %q is not served in logger mode", cmd))
		return
	}
	switch cmd {
	case monitor.CmdWatch:
		m.mu.Lock()
		if m.exitLine != nil {
			_, _ = c.Write(m.exitLine)
			c.Close()
		} else {
			m.watchers = append(m.watchers, c)
		}
		m.mu.Unlock()
	case monitor.CmdStart:
		reply(m.start())
	case monitor.CmdAttach:
		_ = c.SetReadDeadline(time.Time{})
		m.att.serve(c, br)
	case monitor.CmdReopen:
		if m.sink == nil {
			reply(errors.New("container has no log"))
			return
		}
		reply(m.sink.Reopen())
	case monitor.CmdExit:
		m.mu.Lock()
		started := m.started
		m.mu.Unlock()
		if started {
			reply(errors.New("container was started; it ends when its process does"))
			return
		}
		select {
		case m.exited <- exitNote{}:
		default:
		}
		reply(nil)
	default:
		reply(fmt.Errorf("unknown command %q", cmd))
	}
}

func (m *mon) notify(line []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.exitLine = line
	for _, c := range m.watchers {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(line)
		c.Close()
	}
	m.watchers = nil
}

// tailBuffer keeps the last max bytes written to it, until stopped.
type tailBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	max     int
	stopped bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return len(p), nil
	}
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) stop() {
	t.mu.Lock()
	t.stopped = true
	t.buf.Reset()
	t.mu.Unlock()
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.buf.String())
}
