package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/pkg/monitor"
)

// consoleSocketFile is where the runtime hands over a terminal container's pty master;
// relative to the run dir (our cwd and the runtime's), so the path stays short.
const consoleSocketFile = "console.sock"

// attachers holds the attach sessions and the container's stdin.
type attachers struct {
	mu     sync.Mutex
	conns  map[net.Conn]bool
	stdin  *os.File // pipe write end, or the pty master; nil without stdin
	master *os.File // the pty master of a terminal container
	once   bool     // close stdin when the first client's stdin ends
	closed bool
}

// writer fans one output stream out to every attached client.
func (a *attachers) writer(kind byte) *fanout { return &fanout{a: a, kind: kind} }

type fanout struct {
	a    *attachers
	kind byte
}

func (f *fanout) Write(p []byte) (int, error) {
	f.a.mu.Lock()
	defer f.a.mu.Unlock()
	for c := range f.a.conns {
		// A slow client must not stall the container's output (or its log).
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if err := monitor.WriteFrame(c, f.kind, p); err != nil {
			c.Close()
			delete(f.a.conns, c)
		}
	}
	return len(p), nil
}

// serve runs one attach session until the client goes or the container ends.
func (a *attachers) serve(c net.Conn, r io.Reader) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		c.Close()
		return
	}
	if len(a.conns) >= monitor.MaxAttach {
		a.mu.Unlock()
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_ = monitor.WriteFrame(c, monitor.FrameError, []byte(fmt.Sprintf("too many attach sessions (%d)", monitor.MaxAttach)))
		c.Close()
		return
	}
	a.conns[c] = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.conns, c)
		a.mu.Unlock()
		c.Close()
	}()
	for {
		kind, payload, err := monitor.ReadFrame(r)
		if err != nil {
			return
		}
		switch kind {
		case monitor.FrameStdin:
			if in := a.stdinFile(); in != nil {
				_, _ = in.Write(payload)
			}
		case monitor.FrameResize:
			if a.master != nil && len(payload) == 4 {
				ws := &unix.Winsize{Col: uint16(payload[0])<<8 | uint16(payload[1]), Row: uint16(payload[2])<<8 | uint16(payload[3])}
				_ = unix.IoctlSetWinsize(int(a.master.Fd()), unix.TIOCSWINSZ, ws)
			}
		case monitor.FrameCloseStdin:
			if a.once {
				a.mu.Lock()
				if a.stdin != nil && a.stdin != a.master {
					a.stdin.Close()
				}
				a.stdin = nil
				a.mu.Unlock()
			}
		}
	}
}

func (a *attachers) stdinFile() *os.File {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stdin
}

// end closes every session: the container has exited.
func (a *attachers) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for c := range a.conns {
		c.Close()
	}
	a.conns = nil
}

// receiveConsole accepts the runtime's connection on the console socket and returns the
// pty master it sends, within 10 s for both: a peer that connects and sends nothing must
// not hold the monitor.
func receiveConsole(ln *net.UnixListener) (*os.File, error) {
	deadline := time.Now().Add(10 * time.Second)
	_ = ln.SetDeadline(deadline)
	conn, err := ln.AcceptUnix()
	if err != nil {
		return nil, fmt.Errorf("wait for the terminal: %w", err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(deadline)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := conn.ReadMsgUnix(make([]byte, 4096), oob)
	if err != nil {
		return nil, fmt.Errorf("wait for the terminal: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		return nil, errors.New("no terminal received")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) == 0 {
		return nil, errors.New("no terminal received")
	}
	for _, fd := range fds[1:] {
		unix.Close(fd)
	}
	// Whoever reached the console socket could send any file: the container's stdio and
	// its log would then go to and come from it.
	if _, err := unix.IoctlGetTermios(fds[0], unix.TCGETS); err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("the file received on %s is not a terminal: %v", consoleSocketFile, err)
	}
	log.Printf("terminal received")
	return os.NewFile(uintptr(fds[0]), "pty-master"), nil
}
