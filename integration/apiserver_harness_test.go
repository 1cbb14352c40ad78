//go:build integration

package integration

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// APIServer is a real kube-apiserver on loopback over a real etcd (both built by
// hack/tools.sh), with a static admin token, for the parts of kubelet that need one
// (RuntimeClass lookups, projected volumes). No scheduler or controller manager runs: pods
// are bound by nodeName.
type APIServer struct {
	t          testing.TB
	Dir        string
	URL        string
	Token      string
	Kubeconfig string
	client     *http.Client
}

// background runs a process in its own process group for the length of the test and
// returns a function that tells whether it has exited.
func background(t testing.TB, name, logPath string, args ...string) func() bool {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(toolPath(t, name), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, lastLines(string(b), 30))
		}
	})
	return func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

func startAPIServer(t testing.TB) *APIServer {
	t.Helper()
	dir := t.TempDir()
	a := &APIServer{t: t, Dir: dir, Token: "rtshimd-test-admin-token",
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // self-signed serving cert
		}}}

	// etcd, loopback only.
	client, peer := freeLoopbackPort(t), freeLoopbackPort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	etcdExited := background(t, "etcd", filepath.Join(dir, "etcd.log"),
		"--data-dir", filepath.Join(dir, "etcd"), "--name", "rtshimd-test",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "rtshimd-test="+peerURL, "--unsafe-no-fsync")
	waitFor(t, 60*time.Second, "etcd to be healthy", func() (bool, string) {
		if etcdExited() {
			t.Fatal("etcd exited during start-up")
		}
		resp, err := http.Get(etcdURL + "/health")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})

	// Service-account keys are required even though no pod here uses a token.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	saKey := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(a.Token+",admin,admin-uid,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freeLoopbackPort(t)
	a.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	apiExited := background(t, "kube-apiserver", filepath.Join(dir, "kube-apiserver.log"),
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(port), "--cert-dir", filepath.Join(dir, "pki"),
		"--token-auth-file", tokens, "--authorization-mode", "AlwaysAllow",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", saKey,
		"--service-account-signing-key-file", saKey, "--service-cluster-ip-range", "10.254.0.0/24",
		// No controller manager creates the default service account.
		"--disable-admission-plugins", "ServiceAccount", "--enable-priority-and-fairness=false",
		// A loopback advertise address is refused unless no kubernetes Service endpoint is kept.
		"--endpoint-reconciler-type", "none")
	waitFor(t, 3*time.Minute, "kube-apiserver to be ready", func() (bool, string) {
		if apiExited() {
			t.Fatal("kube-apiserver exited during start-up")
		}
		_, err := a.Do(http.MethodGet, "/readyz", "")
		return err == nil, fmt.Sprint(err)
	})

	a.Kubeconfig = filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, a.URL, a.Token)
	if err := os.WriteFile(a.Kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

// Do sends a request as the admin, with a YAML body if body is not empty, and returns the
// body of a 2xx answer.
func (a *APIServer) Do(method, path, body string) ([]byte, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.URL+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	if body != "" {
		// YAML is what people write; the API server takes it.
		req.Header.Set("Content-Type", "application/yaml")
	}
	return send(a.client, req)
}

// Create posts a YAML object to a collection path, failing the test on error.
func (a *APIServer) Create(path, yaml string) {
	a.t.Helper()
	if _, err := a.Do(http.MethodPost, path, yaml); err != nil {
		a.t.Fatal(err)
	}
}

// Pod reads a pod as the API server has it (its status written by kubelet).
func (a *APIServer) Pod(ns, name string) (*kubePod, error) {
	b, err := a.Do(http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/"+name, "")
	if err != nil {
		return nil, err
	}
	var p kubePod
	return &p, json.Unmarshal(b, &p)
}
