//go:build integration

package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/rtshimd/rtshimd/internal/config"
)

// spdyConnect upgrades a streaming URL to SPDY with protocol, as kubectl does.
func spdyConnect(t *testing.T, url, protocol string) httpstream.Connection {
	t.Helper()
	// The TLS test's server has a self-signed certificate.
	rt, err := spdy.NewRoundTripper(&tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Add(httpstream.HeaderProtocolVersion, protocol)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("upgrade %s: %v", url, err)
	}
	conn, err := rt.NewConnection(resp)
	if err != nil {
		t.Fatalf("SPDY connection: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

type execResult struct {
	stdout, stderr string
	exitCode       string // "" for success, else the code the server reported
}

// streamExec runs an Exec through the streaming server with the remotecommand v4 protocol.
func streamExec(t *testing.T, d *Daemon, id string, cmd []string, stdin string, tty bool, size *[2]uint16) execResult {
	t.Helper()
	resp, err := d.RS.Exec(ctxT(t), &runtimeapi.ExecRequest{ContainerId: id, Cmd: cmd, Stdout: true, Stderr: !tty, Stdin: stdin != "", Tty: tty})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	return streamSession(t, resp.Url, stdin, tty, size)
}

// streamAttach attaches through the streaming server, as `kubectl attach` does.
func streamAttach(t *testing.T, d *Daemon, id string, stdin string, tty bool, size *[2]uint16) execResult {
	t.Helper()
	resp, err := d.RS.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: id, Stdout: true, Stderr: !tty, Stdin: stdin != "", Tty: tty})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	return streamSession(t, resp.Url, stdin, tty, size)
}

// streamSession drives one remotecommand session: stdin (then closed), a resize, and
// stdout/stderr read to their end.
func streamSession(t *testing.T, url, stdin string, tty bool, size *[2]uint16) execResult {
	t.Helper()
	conn := spdyConnect(t, url, "v4.channel.k8s.io")
	stream := func(typ string) httpstream.Stream {
		h := http.Header{}
		h.Set("streamType", typ)
		s, err := conn.CreateStream(h)
		if err != nil {
			t.Fatalf("create %s stream: %v", typ, err)
		}
		return s
	}
	errStream := stream("error")
	out := stream("stdout")
	var errOut httpstream.Stream
	if !tty {
		errOut = stream("stderr")
	}
	if tty {
		rs := stream("resize")
		if size != nil {
			_ = json.NewEncoder(rs).Encode(map[string]uint16{"Width": size[0], "Height": size[1]})
		}
	}
	if stdin != "" {
		in := stream("stdin")
		_, _ = io.WriteString(in, stdin)
		in.Close()
	}
	var res execResult
	done := make(chan struct{})
	go func() {
		b, _ := io.ReadAll(out)
		res.stdout = string(b)
		close(done)
	}()
	if errOut != nil {
		b, _ := io.ReadAll(errOut)
		res.stderr = string(b)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("exec output did not end")
	}
	raw, _ := io.ReadAll(errStream)
	if len(raw) > 0 {
		var st struct {
			Status  string `json:"status"`
			Details struct {
				Causes []struct {
					Reason, Message string
				} `json:"causes"`
			} `json:"details"`
		}
		_ = json.Unmarshal(raw, &st)
		for _, c := range st.Details.Causes {
			if c.Reason == "ExitCode" {
				res.exitCode = c.Message
			}
		}
		if res.exitCode == "" && st.Status != "Success" {
			res.exitCode = "error: " + string(raw)
		}
	}
	return res
}

// Exec with and without a terminal, stdin, resize and exit codes; port-forward into the
// pod's network namespace; on runc and runsc, driven by a SPDY client as kubectl is.
func TestStreaming(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			podID, pod := e.pod("stream-"+handler, handler)
			id := e.run(podID, pod, e.ctrConfig("server", "sh", "-c", "while true; do echo hello-through-port-forward | nc -l -p 8080; done"))

			res := streamExec(t, e.d, id, []string{"sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"}, "", false, nil)
			if res.stdout != "to-stdout\n" || res.stderr != "to-stderr\n" || res.exitCode != "3" {
				t.Errorf("exec: %+v", res)
			}
			res = streamExec(t, e.d, id, []string{"cat"}, "from-stdin\n", false, nil)
			if res.stdout != "from-stdin\n" || res.exitCode != "" {
				t.Errorf("exec with stdin: %+v", res)
			}
			res = streamExec(t, e.d, id, []string{"sh", "-c", "sleep 1; tty; stty size"}, "", true, &[2]uint16{123, 45})
			out := strings.ReplaceAll(res.stdout, "\r", "")
			// stty fails without a terminal; gVisor's `tty` cannot name a host terminal.
			if !strings.Contains(out, "45 123") || (handler == "runc" && !strings.Contains(out, "/dev/pts/")) {
				t.Errorf("exec with a terminal resized to 123x45: %q (%s)", out, res.exitCode)
			}

			// Port-forward: a data and an error stream for the port, as kubectl opens them.
			pf, err := e.d.RS.PortForward(ctxT(t), &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{8080}})
			if err != nil {
				t.Fatal(err)
			}
			var got string
			waitFor(t, 20*time.Second, "the server through port-forward", func() (bool, string) {
				conn := spdyConnect(t, pf.Url, "portforward.k8s.io")
				h := http.Header{}
				h.Set("streamType", "error")
				h.Set("port", "8080")
				h.Set("requestID", "1")
				errS, err := conn.CreateStream(h)
				if err != nil {
					return false, err.Error()
				}
				h.Set("streamType", "data")
				data, err := conn.CreateStream(h)
				if err != nil {
					return false, err.Error()
				}
				b := make([]byte, 64)
				n, _ := io.ReadAtLeast(data, b, len("hello-through-port-forward"))
				got = strings.TrimSpace(string(b[:n]))
				data.Close()
				errS.Close()
				conn.Close()
				return got == "hello-through-port-forward", fmt.Sprintf("%q", got)
			})

			// Attach to a container's output as it comes.
			talker := e.run(podID, pod, e.ctrConfig("talker", "sh", "-c", "sleep 2; echo said-after-attach; sleep 1"))
			if res := streamAttach(t, e.d, talker, "", false, nil); !strings.Contains(res.stdout, "said-after-attach") {
				t.Errorf("attach to output: %+v", res)
			}
			if err := e.d.RS.RemovePodSandbox(ctxT(t), podID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Attach with stdin and with a terminal, as `kubectl attach -it` / `kubectl run -it` use
// it: the container reads what the client types, a resize reaches its terminal, and its
// output is logged too.
func TestAttachStdinAndTerminal(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			podID, pod := e.pod("attach-"+handler, handler)

			cfg := e.ctrConfig("reader", "sh", "-c", "read line; echo got:$line")
			cfg.Stdin, cfg.StdinOnce = true, true
			id := e.run(podID, pod, cfg)
			res := streamAttach(t, e.d, id, "typed-in\n", false, nil)
			if !strings.Contains(res.stdout, "got:typed-in") {
				t.Errorf("attach with stdin: %+v", res)
			}
			if st := e.waitExit(id); st.ExitCode != 0 {
				t.Errorf("reader exit %d", st.ExitCode)
			}

			// stdin_once: the client's stdin ending is the container's EOF (cat ends).
			cfg = e.ctrConfig("cat", "cat")
			cfg.Stdin, cfg.StdinOnce = true, true
			id = e.run(podID, pod, cfg)
			streamAttach(t, e.d, id, "to cat\n", false, nil)
			if st := e.waitExit(id); st.ExitCode != 0 {
				t.Errorf("cat after its stdin ended: exit %d", st.ExitCode)
			} else if log, _ := os.ReadFile(st.LogPath); !strings.Contains(string(log), "stdout F to cat") {
				t.Errorf("cat's output not in the CRI log: %q", log)
			}

			cfg = e.ctrConfig("shell", "sh")
			cfg.Stdin, cfg.Tty = true, true
			id = e.run(podID, pod, cfg)
			res = streamAttach(t, e.d, id, "sleep 1; stty size; exit 7\n", true, &[2]uint16{111, 22})
			if out := strings.ReplaceAll(res.stdout, "\r", ""); !strings.Contains(out, "22 111") {
				t.Errorf("attach to a terminal resized to 111x22: %q", out)
			}
			st := e.waitExit(id)
			if st.ExitCode != 7 {
				t.Errorf("shell exit %d, want 7", st.ExitCode)
			}
			if log, _ := os.ReadFile(st.LogPath); !strings.Contains(string(log), "stdout F 22 111") {
				t.Errorf("terminal output not in the CRI log: %q", log)
			}
			if err := e.d.RS.RemovePodSandbox(ctxT(t), podID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The streaming server over TLS, with a certificate from the config.
func TestStreamingTLS(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)

	reg := startRegistry(t, nil)
	reg.Push(t, "test/busybox", "1", ImageSpec{Layers: []Layer{busyboxLayer(t), toolsLayer()}}, nil)
	d := newDaemon(t, withRegistries(reg.Addr), withConfig(func(_ *Daemon, c *config.Config) {
		c.Streaming = config.Streaming{Addr: "127.0.0.1:0", TLSCertFile: certFile, TLSKeyFile: keyFile}
	}))
	e := &containerEnv{t: t, d: d, image: reg.Ref("test/busybox", "1"), logs: t.TempDir()}
	if _, err := d.IS.PullImage(ctxT(t), imgSpec(e.image), nil, nil); err != nil {
		t.Fatal(err)
	}
	podID, pod := e.pod("tls", "runc")
	id := e.run(podID, pod, e.ctrConfig("sleeper", "sleep", "1000"))
	resp, err := d.RS.Exec(ctxT(t), &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"echo", "over-tls"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Url, "https://") {
		t.Fatalf("exec URL %q is not https", resp.Url)
	}
	if res := streamSession(t, resp.Url, "", false, nil); res.stdout != "over-tls\n" {
		t.Errorf("exec over TLS: %+v", res)
	}
	_ = d.RS.RemovePodSandbox(ctxT(t), podID)
	removeTestCgroups(t)
}

// An exec session ends when its client goes away: the process the client started is
// killed, not left running in the container with nobody reading it.
func TestExecEndsWhenClientGoes(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range []string{"runc", "runsc"} {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			podID, pod := e.pod("exec-gone-"+handler, handler)
			id := e.run(podID, pod, e.ctrConfig("app", "sleep", "100000"))
			resp, err := e.d.RS.Exec(ctxT(t), &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", "echo ready; exec sleep 4242"}, Stdout: true})
			if err != nil {
				t.Fatal(err)
			}
			conn := spdyConnect(t, resp.Url, "v4.channel.k8s.io")
			h := http.Header{}
			h.Set("streamType", "error")
			if _, err := conn.CreateStream(h); err != nil {
				t.Fatal(err)
			}
			h.Set("streamType", "stdout")
			out, err := conn.CreateStream(h)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 16)
			if n, _ := io.ReadAtLeast(out, b, len("ready")); !strings.HasPrefix(string(b[:n]), "ready") {
				t.Fatalf("exec output %q", b[:n])
			}
			running := func() bool {
				ps, _ := e.exec(id, "ps")
				return strings.Contains(ps, "sleep 4242")
			}
			if !running() {
				t.Fatal("the exec'd process is not running before the client goes")
			}
			conn.Close()
			waitFor(t, 15*time.Second, "the exec'd process to end after its client went", func() (bool, string) {
				return !running(), "sleep 4242 still runs"
			})
			if err := e.d.RS.RemovePodSandbox(ctxT(t), podID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
