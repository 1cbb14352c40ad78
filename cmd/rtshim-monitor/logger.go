package main

import (
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/pkg/monitor"
	"github.com/rtshimd/rtshimd/pkg/unixsock"
)

// Logger mode: we write one container's output to its CRI log and serve monitor.sock in
// <dir> (attach, reopen) until the output ends, independent of the daemon. Two ways in:
//   - a shim v2 runs us as the container's binary logger (binary:///path/rtshim-monitor?
//     logger=<dir>, see monitor.LoggerURI), with its stdout and stderr on fds 3 and 4 and
//     fd 5 to close once we are ready;
//   - the daemon runs us (monitor.StartLogger) on the FIFOs it gives the shim, named in
//     the config, with fd 3 to close once we are ready. This is the way for a stdin: the
//     runc shim gives a binary logger's container none.
const (
	loggerStdoutFd = 3
	loggerStderrFd = 4
	loggerReadyFd  = 5
	fifoReadyFd    = 3
)

// drainGrace is how long a SIGTERM waits for the output's end: the shim closes its ends
// of the pipes and then signals us (task delete); what is still in them is logged.
const drainGrace = 2 * time.Second

func runLogger(dir string) error {
	// Before anything can say we are ready: a SIGTERM right after must drain, not kill us.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	// Which way we came in is in the config; read it before touching any fd.
	var cfg monitor.LoggerConfig
	b, cfgErr := os.ReadFile(filepath.Join(dir, monitor.LoggerConfigFile))
	if cfgErr == nil {
		cfgErr = json.Unmarshal(b, &cfg)
	}
	readyFd := loggerReadyFd
	if cfg.Stdout != "" {
		readyFd = fifoReadyFd
	}
	ready := os.NewFile(uintptr(readyFd), "ready")
	// Until it is closed the shim's create waits: close it on every path.
	defer ready.Close()
	// The shim gives us /dev/null for stdout and stderr; our diagnostics go to a file.
	if f, err := os.OpenFile(filepath.Join(dir, monitor.LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		log.SetOutput(f)
		defer f.Close()
	}
	id := os.Getenv("CONTAINER_ID")
	log.SetPrefix(id[:min(12, len(id))] + " logger ")

	m := &mon{loggerOnly: true, att: &attachers{conns: map[net.Conn]bool{}}}
	// Whatever fails here, keep reading the output: a logger that went away would leave
	// the container's writes failing with EPIPE (or SIGPIPE).
	var err error
	if err = cfgErr; err != nil {
		log.Printf("read config: %v; the output is discarded", err)
	}
	if cfg.LogPath != "" {
		if m.sink, err = monitor.OpenCRILog(cfg.LogDir, cfg.LogPath); err != nil {
			log.Printf("open container log %s: %v; the output is discarded", cfg.LogPath, err)
		}
	}
	if cfg.Stdin != "" {
		// O_RDWR: opening a FIFO for writing alone blocks (or fails) until a reader is there.
		if f, err := os.OpenFile(cfg.Stdin, os.O_RDWR, 0); err != nil {
			log.Printf("open stdin %s: %v", cfg.Stdin, err)
		} else {
			m.att.stdin, m.att.once = f, cfg.StdinOnce
		}
	}
	var ln net.Listener
	// Relative to dir: its full path can exceed what a socket address holds.
	if err := os.Chdir(dir); err != nil {
		log.Printf("attach unavailable: %v", err)
	} else {
		_ = os.Remove(monitor.SocketFile)
		if ln, err = unixsock.Listen(monitor.SocketFile, 0o600); err != nil {
			log.Printf("attach unavailable: listen %s: %v", monitor.SocketFile, err)
		} else {
			go m.serve(ln)
		}
	}

	streams := []struct {
		fd   int
		fifo string
		name string
		kind byte
	}{{loggerStdoutFd, cfg.Stdout, "stdout", monitor.FrameStdout}, {loggerStderrFd, cfg.Stderr, "stderr", monitor.FrameStderr}}
	var wg sync.WaitGroup
	for _, s := range streams {
		if cfg.Stdout != "" && s.fifo == "" {
			continue // FIFO mode without this stream (a terminal has no stderr)
		}
		var f *os.File
		if s.fifo == "" {
			if f = os.NewFile(uintptr(s.fd), s.name); f == nil {
				return fmt.Errorf("no %s on fd %d", s.name, s.fd)
			}
		}
		// With a terminal the output is all on stdout; the shim leaves its end of the
		// stderr pipe to the garbage collector, so its EOF is not waited for.
		waited := !cfg.Terminal || s.name == "stdout"
		if waited {
			wg.Add(1)
		}
		go func() {
			if f == nil {
				// Opening a FIFO for reading waits for its writer, the shim (or the daemon,
				// which opens and closes it once to release us from a task never created).
				var err error
				if f, err = os.OpenFile(s.fifo, os.O_RDONLY, 0); err != nil {
					log.Printf("open %s: %v", s.fifo, err)
					if waited {
						wg.Done()
					}
					return
				}
			}
			copyStream(m.sink, s.name, f, &tailBuffer{stopped: true}, m.att.writer(s.kind))
			f.Close()
			if waited {
				wg.Done()
			}
		}()
	}
	ready.Close()
	log.Printf("logging to %q", cfg.LogPath)

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case sig := <-sigs:
		select {
		case <-done:
		case <-time.After(drainGrace):
			log.Printf("%v: the output did not end within %v", sig, drainGrace)
		}
	}
	log.Printf("output ended")
	m.att.end()
	if ln != nil {
		ln.Close()
		_ = os.Remove(monitor.SocketFile)
	}
	if in := m.att.stdinFile(); in != nil {
		in.Close()
	}
	return nil
}
