package monitor

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
)

// CmdAttach turns a monitor connection into an attach session: frames both ways.
const CmdAttach = "attach"

// Frame kinds of an attach session.
const (
	FrameStdin      byte = 0 // client → monitor: bytes for the container's stdin
	FrameStdout     byte = 1 // monitor → client
	FrameStderr     byte = 2 // monitor → client
	FrameResize     byte = 3 // client → monitor: width, height (uint16 each, big-endian)
	FrameCloseStdin byte = 4 // client → monitor: the client's stdin ended
	FrameError      byte = 5 // monitor → client: the session is refused (why), then the end
)

// MaxAttach bounds a monitor's attach sessions at once. Past it an attach is refused with
// a FrameError: sessions must never take the connections the daemon's control requests
// (reopen, watch, start, exit) need, whoever may attach to the pod.
const MaxAttach = 32

// maxFrame bounds one frame's payload.
const maxFrame = 1 << 20

// WriteFrame writes one frame: kind, length (uint32, big-endian), payload.
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	var hdr [5]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame.
func ReadFrame(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("attach frame of %d bytes", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return hdr[0], buf, nil
}

// Attach opens an attach session with the monitor in dir.
func Attach(ctx context.Context, dir string) (net.Conn, error) {
	conn, err := dial(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("the monitor of %s is not running: %w", filepath.Base(dir), err)
	}
	if _, err := conn.Write([]byte(CmdAttach + "\n")); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// TerminalSize is a terminal's width and height in characters.
type TerminalSize struct{ Width, Height uint16 }

// AttachSession connects an attach client's streams to the supervisor in dir: output as
// it comes (not the past: that is in the log), stdin if the container keeps one, and
// terminal sizes, sent to the supervisor or, when resize is set, handed to it (a
// supervisor that does not own the terminal). It returns when the container's output ends
// or ctx ends.
func AttachSession(ctx context.Context, dir string, in io.Reader, out, errw io.Writer, sizes <-chan TerminalSize, resize func(TerminalSize)) error {
	conn, err := Attach(ctx, dir)
	if err != nil {
		return err
	}
	defer conn.Close()
	var wmu sync.Mutex
	send := func(kind byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return WriteFrame(conn, kind, p)
	}
	if in != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if n > 0 && send(FrameStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = send(FrameCloseStdin, nil)
					return
				}
			}
		}()
	}
	go func() {
		for sz := range sizes {
			if resize != nil {
				resize(sz)
				continue
			}
			_ = send(FrameResize, []byte{byte(sz.Width >> 8), byte(sz.Width), byte(sz.Height >> 8), byte(sz.Height)})
		}
	}()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	for {
		kind, p, err := ReadFrame(conn)
		if err != nil {
			return nil // the container ended or the client left
		}
		if kind == FrameError {
			return fmt.Errorf("attach to %s: %s", filepath.Base(dir), p)
		}
		w := out
		if kind == FrameStderr && errw != nil {
			w = errw
		}
		if w != nil {
			if _, err := w.Write(p); err != nil {
				return nil
			}
		}
	}
}
