// Package cri serves the CRI v1 RuntimeService and ImageService over gRPC. One file per
// RPC group: each hands the request to the manager that owns the work, which validates
// it (naming the field and the value), and answers.
// Error kinds become gRPC codes here and nowhere else.
package cri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/events"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/metrics"
	"github.com/rtshimd/rtshimd/internal/network"
	"github.com/rtshimd/rtshimd/internal/nodelabels"
	"github.com/rtshimd/rtshimd/internal/nrihost"
	"github.com/rtshimd/rtshimd/internal/podcidr"
	"github.com/rtshimd/rtshimd/internal/reload"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/stats"
	"github.com/rtshimd/rtshimd/internal/tracing"
)

// Version is rtshimd's version, reported by the Version RPC and `rtshimd version`.
var Version = "0.1.0"

// Server implements the CRI services.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	// Config is the config the daemon started with (socket, cgroup driver: what a reload
	// does not change); Reload holds the one served now.
	Config     *config.Config
	Reload     *reload.Reloader
	Handlers   *handlers.Live
	Sandboxes  *sandbox.Manager
	Images     *image.Stores
	Containers *container.Manager
	Stats      *stats.Service
	Network    *network.Manager
	Streaming  streaming.Server
	Events     *events.Bus
	// PodCIDR is what kubelet's UpdateRuntimeConfig sent.
	PodCIDR *podcidr.Store
	// NRI hosts NRI plugins; nil when NRI is off.
	NRI *nrihost.Host
	// Tracer records a span per call; nil when tracing is off.
	Tracer *tracing.Tracer
	// NodeLabels keeps the Node's labels in step with the table; nil when [node] is off.
	NodeLabels *nodelabels.Syncer

	// stopping closes when Serve's context ends: long-lived streams end at once instead of
	// holding the graceful stop for its whole grace period.
	stopping <-chan struct{}
}

// Serve listens on the config's Unix socket (0660, parent directory created 0700) and
// serves until ctx ends. ready is called once the socket accepts connections.
func (s *Server) Serve(ctx context.Context, ready func()) error {
	path := s.Config.Socket
	ln, err := listenSocket(path)
	if err != nil {
		return err
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unaryInterceptor),
		grpc.ChainStreamInterceptor(streamInterceptor),
		grpc.MaxRecvMsgSize(16 << 20), grpc.MaxSendMsgSize(16 << 20),
	}
	if s.Tracer != nil {
		opts = append(opts, s.Tracer.ServerOption())
	}
	g := grpc.NewServer(opts...)
	s.stopping = ctx.Done()
	runtimeapi.RegisterRuntimeServiceServer(g, s)
	runtimeapi.RegisterImageServiceServer(g, s)
	go func() {
		<-ctx.Done()
		// In-flight RPCs (a long pull, a StopContainer's grace period) get a moment to
		// finish; kubelet retries whatever is cut off.
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			g.Stop()
		}
	}()
	logrus.WithField("socket", path).Info("serving CRI")
	if ready != nil {
		ready()
	}
	err = g.Serve(ln)
	_ = os.Remove(path)
	return err
}

// listenSocket listens on the Unix socket path, which is 0660 from the moment it can be
// reached whatever the umask: it is bound under a temporary name, set 0660, then renamed
// into place. A missing parent directory is made 0700; an existing one is left as it is
// (by default it is the run root, which must stay searchable for user-namespaced pods;
// the socket's own mode is what connect checks).
func listenSocket(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create socket dir: %w", err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("chmod socket dir: %w", err)
		}
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The listener must not unlink the final path's namesake at Close: it is renamed.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, 0o660); err != nil {
		return fail(fmt.Errorf("chmod socket: %w", err))
	}
	// Rename replaces a stale socket of an earlier run in one step.
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("move socket into place at %s: %w", path, err))
	}
	return ln, nil
}

// toStatus turns a manager's error into a gRPC status by its kind.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Unknown
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			code = k.code
			break
		}
	}
	return status.Error(code, trimKind(err))
}

// errorKinds maps the daemon's error kinds (and a context's end) to gRPC codes, first
// match wins; one table for the code and for trimming the kind's suffix (a context's
// "deadline exceeded" stays in the text: it says what happened).
var errorKinds = []struct {
	err      error
	code     codes.Code
	keepText bool
}{
	{errdefs.ErrNotFound, codes.NotFound, false},
	{errdefs.ErrInvalidArgument, codes.InvalidArgument, false},
	{errdefs.ErrAlreadyExists, codes.AlreadyExists, false},
	{errdefs.ErrFailedPrecondition, codes.FailedPrecondition, false},
	{errdefs.ErrUnavailable, codes.Unavailable, false},
	{errdefs.ErrNotImplemented, codes.Unimplemented, false},
	{context.DeadlineExceeded, codes.DeadlineExceeded, true},
	{context.Canceled, codes.Canceled, true},
}

// trimKind drops the trailing ": not found" style suffix an error kind adds to a message.
func trimKind(err error) string {
	msg := err.Error()
	for _, k := range errorKinds {
		suffix := ": " + k.err.Error()
		if !k.keepText && errors.Is(err, k.err) && strings.HasSuffix(msg, suffix) {
			return strings.TrimSuffix(msg, suffix)
		}
	}
	return msg
}

func unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			logrus.WithFields(logrus.Fields{"method": info.FullMethod, "panic": r}).Errorf("panic in RPC\n%s", debug.Stack())
			resp, err = nil, status.Errorf(codes.Internal, "%s: internal error (panic: %v); see the daemon log", filepath.Base(info.FullMethod), r)
		}
		logCall(info.FullMethod, start, err)
	}()
	resp, err = handler(ctx, req)
	return resp, toStatus(err)
}

func streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			logrus.WithFields(logrus.Fields{"method": info.FullMethod, "panic": r}).Errorf("panic in RPC\n%s", debug.Stack())
			err = status.Errorf(codes.Internal, "%s: internal error (panic: %v); see the daemon log", filepath.Base(info.FullMethod), r)
		}
		logCall(info.FullMethod, start, err)
	}()
	return toStatus(handler(srv, ss))
}

func logCall(method string, start time.Time, err error) {
	took := time.Since(start)
	code := status.Code(err)
	name := filepath.Base(method)
	metrics.RPCDuration.WithLabelValues(name, code.String()).Observe(took.Seconds())
	if err != nil {
		metrics.RPCErrors.WithLabelValues(name, code.String()).Inc()
	} else if !logrus.IsLevelEnabled(logrus.DebugLevel) {
		return // no entry to build: kubelet's every-second calls at info level
	}
	entry := logrus.WithFields(logrus.Fields{"method": method, "duration": took, "code": code.String()})
	switch {
	case err == nil:
		// Kubelet polls List*, Status and friends every second: keep them out of info.
		entry.Debug("rpc")
	case code == codes.Unimplemented || code == codes.NotFound:
		entry.WithError(err).Debug("rpc")
	default:
		entry.WithError(err).Warn("rpc failed")
	}
}
