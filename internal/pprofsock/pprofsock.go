// Package pprofsock serves net/http/pprof on a unix socket that only root can reach: the
// daemon's CPU, allocation, goroutine and lock profiles, for finding where its time goes
// (docs/operating.md, [debug]). It is off unless the config names a socket.
package pprofsock

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
)

// Server is the running pprof server.
type Server struct {
	http *http.Server
	path string
}

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	err := s.http.Close()
	_ = os.Remove(s.path)
	return err
}

// Serve serves /debug/pprof/ on the unix socket path until the server is closed; nil and
// no error when path is empty. The socket is 0600 from the moment it can be reached: it is
// bound under a temporary name, set 0600, then renamed into place (over a stale socket of
// an earlier run).
func Serve(path string) (*Server, error) {
	if path == "" {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("debug.pprof_socket: create its directory: %w", err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("debug.pprof_socket %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	fail := func(err error) (*Server, error) {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("debug.pprof_socket %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	mux := http.NewServeMux()
	// pprof.Index serves the named profiles (heap, allocs, goroutine, block, mutex, ...)
	// under /debug/pprof/<name>; the others need handlers of their own.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No write timeout: a CPU profile or trace answers after the seconds it was asked for.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logrus.WithError(err).WithField("socket", path).Error("pprof server stopped")
		}
	}()
	logrus.WithField("socket", path).Info("serving pprof")
	return &Server{http: srv, path: path}, nil
}
