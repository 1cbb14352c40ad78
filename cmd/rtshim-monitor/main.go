// rtshim-monitor supervises one container for rtshimd: it runs the OCI runtime's
// `create`, reports the result on fd 3, holds the container's stdio (writing it to the CRI
// log), reaps the container's processes as a child subreaper, and records the init's exit
// in exit.json. It runs in its own session so the daemon can restart freely. Standard
// library and x/sys only: one of these runs per container, so it must stay small.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/pkg/monitor"
	"github.com/rtshimd/rtshimd/pkg/store"
)

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: rtshim-monitor <dir>/monitor.json (started by rtshimd)")
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

func run(cfgPath string, sync *os.File) error {
	var cfg monitor.Config
	b, err := os.ReadFile(cfgPath)
	if err == nil {
		err = json.Unmarshal(b, &cfg)
	}
	if err != nil {
		report(sync, monitor.Result{Error: fmt.Sprintf("monitor: read config: %v", err)})
		return err
	}
	log.SetPrefix(cfg.ID[:min(12, len(cfg.ID))] + " ")
	// Orphans of the runtime (runc's init, runsc's sandbox and gofer) become our children,
	// so we can wait for the init and reap the rest promptly.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report(sync, monitor.Result{Error: fmt.Sprintf("monitor: set child subreaper: %v", err)})
		return err
	}
	w := &watchers{}
	// Relative to our working directory (the run dir): the full path can exceed the
	// 108 bytes a socket address holds.
	if err := os.Chdir(cfg.Dir); err != nil {
		report(sync, monitor.Result{Error: fmt.Sprintf("monitor: %v", err)})
		return err
	}
	sockPath := monitor.SocketFile
	_ = os.Remove(sockPath)
	ln, err := net.Listen("unix", sockPath)
	if err != nil {
		report(sync, monitor.Result{Error: fmt.Sprintf("monitor: listen %s: %v", sockPath, err)})
		return err
	}
	go w.serve(ln)

	pid, err := create(cfg)
	if err != nil {
		report(sync, monitor.Result{Error: err.Error()})
		return err
	}
	report(sync, monitor.Result{Pid: pid})
	log.Printf("container %s created, init pid %d", cfg.ID, pid)

	exit := reap(pid)
	data, _ := json.Marshal(exit)
	if err := store.WriteFileAtomic(filepath.Join(cfg.Dir, monitor.ExitFile), data, 0o600); err != nil {
		log.Printf("write exit file: %v", err)
	}
	log.Printf("init %d exited with status %d", pid, exit.Status)
	w.notify(append(data, '\n'))
	ln.Close()
	_ = os.Remove(sockPath)
	reapRest(5 * time.Second)
	return nil
}

// create runs `<runtime> create` with the container's stdio wired to the log writer and
// returns the init pid. On failure the error carries the runtime's own words.
func create(cfg monitor.Config) (int, error) {
	var sink *monitor.CRILog
	if cfg.LogPath != "" {
		var err error
		if sink, err = monitor.OpenCRILog(cfg.LogPath); err != nil {
			return 0, fmt.Errorf("open container log %s: %w", cfg.LogPath, err)
		}
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
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
	// Never wait for EOF on these: runsc's sandbox keeps them open for ever.
	go copyStream(sink, "stdout", stdoutR, out)
	go copyStream(sink, "stderr", stderrR, out)

	pidFile := filepath.Join(cfg.Dir, monitor.PidFile)
	args := append(append([]string{}, cfg.RuntimeArgs...), "create", "--bundle", cfg.Bundle, "--pid-file", pidFile, cfg.ID)
	cmd := exec.Command(cfg.Runtime, args...)
	cmd.Stdin = devnull
	cmd.Stdout = stdoutW
	cmd.Stderr = stderrW
	cmd.Dir = cfg.Bundle
	err = cmd.Run()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		time.Sleep(20 * time.Millisecond) // let the copiers take the runtime's last words
		return 0, fmt.Errorf("%s create: %v: %s", filepath.Base(cfg.Runtime), err, out.String())
	}
	out.stop()
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

func copyStream(sink *monitor.CRILog, stream string, r io.Reader, tee *tailBuffer) {
	r = io.TeeReader(r, tee)
	if sink == nil {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	sink.Copy(stream, r)
}

// reap waits for children until pid exits and returns how it ended.
func reap(pid int) monitor.Exit {
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// No children at all: the init was never ours (or is gone); poll for it.
			if unix.Kill(pid, 0) == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return monitor.Exit{Pid: pid, Status: 255, ExitedAt: time.Now()}
		}
		if wpid != pid {
			continue
		}
		e := monitor.Exit{Pid: pid, ExitedAt: time.Now()}
		switch {
		case ws.Exited():
			e.Status = ws.ExitStatus()
		case ws.Signaled():
			e.Signal = int(ws.Signal())
			e.Status = 128 + e.Signal
		}
		return e
	}
}

// reapRest reaps the runtime's remaining helpers for a while, then gives up on them.
func reapRest(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err != nil {
			return // ECHILD: nothing left
		}
		if wpid == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// watchers holds the daemon's connections; each gets the exit line, then EOF.
type watchers struct {
	mu    sync.Mutex
	conns []net.Conn
	done  []byte
}

func (w *watchers) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		w.mu.Lock()
		if w.done != nil {
			_, _ = c.Write(w.done)
			c.Close()
		} else {
			w.conns = append(w.conns, c)
		}
		w.mu.Unlock()
	}
}

func (w *watchers) notify(line []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = line
	for _, c := range w.conns {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(line)
		c.Close()
	}
	w.conns = nil
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
