//go:build integration

package integration

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rtshimd/rtshimd/internal/config"
)

// A registry that stops sending in the middle of a layer, with its connection open, fails
// the pull after image.pull_progress_timeout, not at the pull's 30-minute bound, with an
// error naming the image and the setting, and leaves nothing stored; one that sends
// slowly but steadily, for longer than the timeout in all, is not cut (audit 2026-11-26,
// N8).
func TestPullProgressTimeout(t *testing.T) {
	const timeout = 3 * time.Second
	reg := startRegistry(t, nil)
	// Random bytes: the layer's gzip is about as long as its content.
	noise := make([]byte, 48<<10)
	rand.New(rand.NewSource(1)).Read(noise)
	layer := Layer{Files: []File{{Path: "/noise", Content: string(noise)}}}
	reg.Push(t, "slow/noise", "1", ImageSpec{Layers: []Layer{layer}}, nil)
	stalling := startSlowProxy(t, reg.Addr, 1024, 0, 0)
	// 4 KiB every 400 ms: the ~48 KiB layer takes some 5 s, longer than the timeout.
	trickling := startSlowProxy(t, reg.Addr, 0, 4<<10, 400*time.Millisecond)
	d := newDaemon(t, withRegistries(reg.Addr, stalling, trickling), withConfig(func(_ *Daemon, c *config.Config) {
		c.Image.PullProgressTimeout = config.Duration{Duration: timeout}
	}))
	ctx := ctxT(t)

	ref := stalling + "/slow/noise:1"
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second) // well within the pull's own 30 minutes
	defer cancel()
	_, err := d.IS.PullImage(sctx, imgSpec(ref), nil, nil)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("pull from a registry that stopped sending succeeded")
	}
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(msg, "image.pull_progress_timeout") || !strings.Contains(msg, ref) {
		t.Errorf("stalled pull: %v; want DeadlineExceeded naming %s and image.pull_progress_timeout", err, ref)
	}
	if took < timeout || took > 5*timeout {
		t.Errorf("stalled pull failed after %v, want about %v", took, timeout)
	}
	if imgs, _ := d.IS.ListImages(ctx, nil); len(imgs) != 0 {
		t.Errorf("images after a stalled pull: %v", imgs)
	}
	if n := storedLayers(t, d); n != 0 {
		t.Errorf("%d layers left in the store by a stalled pull", n)
	}

	start = time.Now()
	if _, err := d.IS.PullImage(ctx, imgSpec(trickling+"/slow/noise:1"), nil, nil); err != nil {
		t.Fatalf("slow but steady pull: %v", err)
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("the slow pull took %v, not longer than the timeout %v: it proves nothing", took, timeout)
	}
}

// startSlowProxy is a reverse proxy on a new 127.0.0.1 port to target ("127.0.0.1:PORT").
// It forwards everything, but a blob GET (path contains "/blobs/sha256:") gets the status
// line, the headers (with the full Content-Length) and the first headBytes bytes of the
// body at once; then, with every > 0, the rest chunk bytes every `every`, or with every 0
// nothing more, the connection held open (a stalled registry) until the client closes it
// or the test ends. Stopped in t.Cleanup. Returns its "127.0.0.1:PORT".
func startSlowProxy(t testing.TB, target string, headBytes, chunk int, every time.Duration) string {
	t.Helper()
	targetURL := &url.URL{Scheme: "http", Host: target}
	transport := &http.Transport{DisableCompression: true}
	var (
		connsMu sync.Mutex
		conns   []net.Conn
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		out := req.Clone(req.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = targetURL.Scheme, targetURL.Host
		out.Host = req.Host // the registry builds Location URLs from Host: keep them on the proxy
		resp, err := transport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/blobs/sha256:") || resp.StatusCode != http.StatusOK {
			for k, vs := range resp.Header {
				w.Header()[k] = vs
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, bufrw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		connsMu.Lock()
		conns = append(conns, conn)
		connsMu.Unlock()
		defer conn.Close()
		h := resp.Header.Clone()
		h.Del("Content-Length")
		h.Del("Transfer-Encoding")
		h.Del("Connection")
		fmt.Fprintf(bufrw, "HTTP/1.1 %s\r\nContent-Length: %d\r\nConnection: close\r\n", resp.Status, len(body))
		_ = h.Write(bufrw)
		_, _ = bufrw.WriteString("\r\n")
		head := min(headBytes, len(body))
		_, _ = bufrw.Write(body[:head])
		if err := bufrw.Flush(); err != nil {
			return
		}
		body = body[head:]
		if every <= 0 {
			if len(body) > 0 {
				_, _ = conn.Read(make([]byte, 1)) // until the client or the cleanup closes it
				return
			}
		}
		for len(body) > 0 {
			time.Sleep(every)
			n := min(chunk, len(body))
			if _, err := conn.Write(body[:n]); err != nil {
				return
			}
			body = body[n:]
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
		transport.CloseIdleConnections()
	})
	return l.Addr().String()
}
