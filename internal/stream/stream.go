// Package stream serves the CRI streaming endpoints (Exec, Attach, PortForward) through
// k8s.io/cri-streaming: the RPCs hand out URLs of this server, and kubectl or crictl connect
// to it with SPDY or WebSocket. It adapts those calls to the container manager and enters
// pod network namespaces for port forwarding.
package stream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/sandbox"
)

// Server is the streaming server, already listening.
type Server struct {
	streaming.Server
	http *http.Server
}

// New listens on addr ("127.0.0.1:0" picks a free port), over TLS when certFile and
// keyFile are set, and serves in the background. Listening here, not later, means a bad
// address stops the daemon at start and every URL handed out names the real port.
func New(addr, certFile, keyFile string, ctrs *container.Manager, sandboxes *sandbox.Manager) (*Server, error) {
	cfg := streaming.DefaultConfig
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("streaming.tls_cert_file %q / tls_key_file %q: %w", certFile, keyFile, err)
		}
		cfg.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("streaming.addr %q: %w", addr, err)
	}
	cfg.Addr = ln.Addr().String()
	if host, _, _ := net.SplitHostPort(cfg.Addr); cfg.TLSConfig == nil && !net.ParseIP(host).IsLoopback() {
		logrus.WithField("addr", cfg.Addr).Warn("streaming server reachable beyond this node without TLS: whoever reaches it can exec into pods")
	}
	srv, err := streaming.NewServer(cfg, &runtimeAdapter{ctrs: ctrs, sandboxes: sandboxes})
	if err != nil {
		ln.Close()
		return nil, err
	}
	ln = notifyListener{ln}
	hs := &http.Server{Handler: srv, TLSConfig: cfg.TLSConfig, ReadHeaderTimeout: 30 * time.Second, ConnContext: withConn}
	go func() {
		var err error
		if cfg.TLSConfig != nil {
			err = hs.ServeTLS(ln, "", "")
		} else {
			err = hs.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			logrus.WithError(err).Error("streaming server stopped")
		}
	}()
	logrus.WithField("addr", cfg.Addr).Info("streaming server listening")
	return &Server{Server: srv, http: hs}, nil
}

// Stop closes the listener and every session.
func (s *Server) Stop() error { return s.http.Close() }

// sizes turns the remotecommand resize channel (nil without a terminal) into ours, and
// ends with ctx.
func sizes(ctx context.Context, resize <-chan remotecommandserver.TerminalSize) <-chan container.TerminalSize {
	out := make(chan container.TerminalSize)
	if resize == nil {
		close(out)
		return out
	}
	go func() {
		defer close(out)
		for {
			select {
			case s, ok := <-resize:
				if !ok {
					return
				}
				select {
				case out <- container.TerminalSize{Width: s.Width, Height: s.Height}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

type runtimeAdapter struct {
	ctrs      *container.Manager
	sandboxes *sandbox.Manager
}

// exitError is what the remotecommand server turns into the exit code the client sees.
type exitError struct{ code int }

func (e exitError) Error() string   { return "command terminated with exit code " + strconv.Itoa(e.code) }
func (e exitError) String() string  { return e.Error() }
func (e exitError) Exited() bool    { return true }
func (e exitError) ExitStatus() int { return e.code }

func (r *runtimeAdapter) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommandserver.TerminalSize) error {
	ctx, cancel := untilClientGone(ctx)
	defer cancel()
	var o, e io.Writer
	if out != nil {
		o = out
	}
	if errw != nil {
		e = errw
	}
	err := r.ctrs.ExecStream(ctx, id, cmd, in, o, e, tty, sizes(ctx, resize))
	var ec *container.ExitCodeError
	if errors.As(err, &ec) {
		return exitError{ec.Code}
	}
	return err
}

func (r *runtimeAdapter) Attach(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommandserver.TerminalSize) error {
	ctx, cancel := untilClientGone(ctx)
	defer cancel()
	var o, e io.Writer
	if out != nil {
		o = out
	}
	if errw != nil {
		e = errw
	}
	return r.ctrs.Attach(ctx, id, in, o, e, sizes(ctx, resize))
}

// PortForward connects the stream to port on the pod's localhost: through the kind where
// the pod has a network stack of its own (gVisor's netstack), else from inside the pod's
// network namespace.
func (r *runtimeAdapter) PortForward(ctx context.Context, podID string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	sb, err := r.sandboxes.Get(podID)
	if err != nil {
		return err
	}
	if port <= 0 || port > 65535 {
		return fmt.Errorf("port %d is not a TCP port: %w", port, errdefs.ErrInvalidArgument)
	}
	var conn net.Conn
	ok := false
	if d, is := sb.KindRuntime().(kind.PortDialer); is {
		conn, ok, err = d.DialPort(ctx, sb.Task(), port)
	}
	if !ok && err == nil {
		conn, err = dialIn(sb.NetNS, fmt.Sprintf("127.0.0.1:%d", port))
	}
	if err != nil {
		return fmt.Errorf("port-forward to pod %s port %d: %w", sb.ID, port, err)
	}
	defer conn.Close()
	// Client to pod until the client half-closes, then the pod's reply to its end.
	replied := make(chan struct{})
	go func() { _, _ = io.Copy(stream, conn); close(replied) }()
	_, _ = io.Copy(conn, stream)
	if hc, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	}
	select {
	case <-replied:
	case <-ctx.Done():
	}
	return nil
}

// dialIn dials addr from inside the network namespace file netns ("" = the node's). The
// socket is created on a thread that enters the namespace and is then discarded.
func dialIn(netns, addr string) (net.Conn, error) {
	if netns == "" {
		return net.Dial("tcp", addr)
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine instead of carrying the
		// pod's namespace into the rest of the daemon.
		runtime.LockOSThread()
		fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("enter %s: %w", netns, err)}
			return
		}
		c, err := net.Dial("tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// The streaming library gives an exec or attach the request's context, which a hijacked
// connection never cancels: an exec whose process writes nothing would run on after its
// client went away. The listener's connections say when they are closed (the SPDY layer
// closes its connection once the client's side is gone), and each request's context
// carries its connection.
type notifyListener struct{ net.Listener }

func (l notifyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &notifyConn{Conn: c, closed: make(chan struct{})}, nil
}

type notifyConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *notifyConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if nc, ok := c.(*notifyConn); ok {
		return context.WithValue(ctx, connKey{}, nc)
	}
	return ctx
}

// untilClientGone is ctx, also cancelled when the request's connection closes.
func untilClientGone(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if nc, ok := ctx.Value(connKey{}).(*notifyConn); ok {
		go func() {
			select {
			case <-nc.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}
