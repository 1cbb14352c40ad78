//go:build integration

package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestCluster brings up a cluster of two rtshimd nodes (make cluster) and checks what a
// cluster gives its pods beyond one node: every node Ready with kube-system running on
// rtshimd; pods on the two nodes reach each other by their addresses; a ClusterIP Service
// answers from a pod and a NodePort from the other node; kubernetes.default resolves in a
// pod through the cluster's DNS; kubectl logs; a Deployment rolls to a new image; a Job
// completes; an admission webhook served by a pod is asked by the API server; each node
// labels itself with its ready handlers (with kubelet's credentials, which kubeadm writes
// after the runtime started); a pod of the RuntimeClass test-handler runs on that row (runc,
// or runsc with RTSHIMD_CLUSTER_TEST_HANDLER=runsc). Its cleanup takes every node down and
// fails on anything of theirs left on this machine.
func TestCluster(t *testing.T) {
	if os.Getenv("RTSHIMD_CLUSTER") == "" {
		t.Skip("make cluster runs it (RTSHIMD_CLUSTER=1): a control plane and two nodes take minutes")
	}
	c := startCluster(t, 2)
	agnhost := "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	for i, n := range c.nodes {
		c.mustKubectl("run", fmt.Sprintf("web-%d", i), "--image", agnhost, "--restart", "Never", "--labels", fmt.Sprintf("app=web-%d", i),
			"--overrides", fmt.Sprintf(`{"spec":{"nodeName":%q}}`, n.Name), "--", "netexec", "--http-port", "8080")
	}
	ips := make([]string, len(c.nodes))
	for i := range c.nodes {
		waitFor(t, 3*time.Minute, fmt.Sprintf("pod web-%d running", i), func() (bool, string) {
			out, err := c.kubectl("get", "pod", fmt.Sprintf("web-%d", i), "-o", "jsonpath={.status.phase} {.status.podIP}")
			f := strings.Fields(out)
			if err != nil || len(f) != 2 || f[0] != "Running" {
				return false, out
			}
			ips[i] = f[1]
			return true, out
		})
	}
	// connect runs agnhost's connect in pod web-<from> against addr.
	connect := func(from int, addr string) error {
		_, err := c.kubectl("exec", fmt.Sprintf("web-%d", from), "--", "/agnhost", "connect", addr, "--timeout", "5s")
		return err
	}
	t.Run("pods on two nodes reach each other", func(t *testing.T) {
		for i := range c.nodes {
			other := (i + 1) % len(c.nodes)
			if err := connect(i, ips[other]+":8080"); err != nil {
				t.Errorf("web-%d (%s) to web-%d (%s): %v", i, c.nodes[i].Name, other, ips[other], err)
			}
		}
	})
	c.mustKubectl("expose", "pod", "web-1", "--name", "web", "--port", "80", "--target-port", "8080", "--type", "NodePort")
	t.Run("ClusterIP", func(t *testing.T) {
		ip := strings.TrimSpace(c.mustKubectl("get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"))
		waitFor(t, time.Minute, "the Service's ClusterIP to answer from the other node's pod", func() (bool, string) {
			err := connect(0, ip+":80")
			return err == nil, fmt.Sprint(err)
		})
	})
	t.Run("NodePort", func(t *testing.T) {
		port := strings.TrimSpace(c.mustKubectl("get", "service", "web", "-o", "jsonpath={.spec.ports[0].nodePort}"))
		// From node 0's own network, to node 1's address: kube-proxy's rules on node 1.
		waitFor(t, time.Minute, "the NodePort to answer", func() (bool, string) {
			out, err := c.nodes[0].Exec(30*time.Second, "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s && printf 'GET /hostname HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3", c.nodes[1].IP, port))
			return err == nil && strings.Contains(out, "web-1"), out
		})
	})
	t.Run("kubernetes.default resolves", func(t *testing.T) {
		waitFor(t, 2*time.Minute, "kubernetes.default to resolve in a pod", func() (bool, string) {
			out, err := c.kubectl("exec", "web-0", "--", "/agnhost", "connect", "kubernetes.default:443", "--timeout", "5s")
			return err == nil, out
		})
	})
	t.Run("kubectl logs", func(t *testing.T) {
		for i := range c.nodes {
			out, err := c.kubectl("logs", fmt.Sprintf("web-%d", i))
			if err != nil || !strings.Contains(out, "Started HTTP server on port 8080") {
				t.Errorf("kubectl logs web-%d: %v: want netexec's start line, got %q", i, err, out)
			}
		}
	})
	t.Run("a Deployment rolls to a new image", func(t *testing.T) { clusterRollout(t, c, agnhost) })
	t.Run("a Job completes", func(t *testing.T) {
		c.mustKubectl("create", "job", "once", "--image", agnhost, "--", "/agnhost", "logs-generator", "--log-lines-total", "3", "--run-duration", "1s")
		if out, err := c.kubectl("wait", "--for=condition=Complete", "job/once", "--timeout=3m"); err != nil {
			t.Fatalf("job once: %v\n%s\n%s", err, out, c.mustKubectl("describe", "job", "once"))
		}
		out := c.mustKubectl("logs", "job/once")
		if n := strings.Count(out, "/api/v1/namespaces/"); n != 3 {
			t.Errorf("job once logged %d generated lines, want 3:\n%s", n, out)
		}
	})
	t.Run("an admission webhook runs on the cluster", func(t *testing.T) { clusterWebhook(t, c, agnhost) })
	t.Run("each node labels itself with its ready handlers", func(t *testing.T) {
		for i, n := range c.nodes {
			waitFor(t, time.Minute, n.Name+"'s runtime labels", func() (bool, string) {
				out, err := c.kubectl("get", "node", n.Name, "-o", "jsonpath={.metadata.labels}")
				runsc := strings.Contains(out, `"runtime.rtshimd.io/runsc":"true"`)
				return err == nil && strings.Contains(out, `"runtime.rtshimd.io/runc":"true"`) &&
					strings.Contains(out, `"runtime.rtshimd.io/test-handler":"true"`) && runsc == (i == 0), out
			})
		}
	})
	t.Run("RuntimeClasses on nodes that differ", func(t *testing.T) { clusterRuntimeClasses(t, c, agnhost) })
	t.Run("a pod runs on the RuntimeClass test-handler", func(t *testing.T) {
		c.nodes[0].WriteFile("/etc/kubernetes/runtimeclass.yaml", `apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: test-handler}
handler: test-handler
`)
		c.mustKubectl("apply", "-f", "/etc/kubernetes/runtimeclass.yaml")
		c.mustKubectl("run", "classed", "--image", agnhost, "--restart", "Never",
			"--overrides", `{"spec":{"runtimeClassName":"test-handler"}}`, "--", "pause")
		if out, err := c.kubectl("wait", "--for=condition=Ready", "pod/classed", "--timeout=3m"); err != nil {
			t.Fatalf("pod classed: %v\n%s\n%s", err, out, c.mustKubectl("describe", "pod", "classed"))
		}
		node := strings.TrimSpace(c.mustKubectl("get", "pod", "classed", "-o", "jsonpath={.spec.nodeName}"))
		for _, n := range c.nodes {
			if n.Name != node {
				continue
			}
			out := n.MustExec(toolPath(t, "crictl"), "--runtime-endpoint", "unix:///run/rtshimd/rtshimd.sock", "pods", "--name", "^classed$", "-o", "json")
			if !strings.Contains(out, `"runtimeHandler": "test-handler"`) {
				t.Errorf("the pod's sandbox on %s does not name test-handler:\n%s", n.Name, out)
			}
		}
	})
}

// clusterRuntimeClasses checks, on a cluster where only node 0 has a runsc row, what
// rtshimd tells the cluster: the RuntimeClasses `rtshimd runtimeclasses --admission` writes
// place runsc pods only on node 0, and its policy refuses at creation a runsc pod asking for
// the host's PID namespace; a reload that points the runc row at another binary leaves a
// running pod on the one it started with while a new pod gets the new one; a reload that
// takes the runsc row away takes node 0's label with it and leaves its pods running.
func clusterRuntimeClasses(t *testing.T, c *cluster, image string) {
	n0 := c.nodes[0]
	kubectl := toolPath(t, "kubectl") + " --kubeconfig /etc/kubernetes/admin.conf"
	if out, err := n0.Exec(time.Minute, "sh", "-c", "rtshimd runtimeclasses --admission | "+kubectl+" apply -f -"); err != nil {
		t.Fatalf("rtshimd runtimeclasses --admission | kubectl apply: %v\n%s", err, out)
	}
	n0.WriteFile("/etc/kubernetes/gvisor.yaml", fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: gvisor}
spec:
  replicas: 3
  selector: {matchLabels: {app: gvisor}}
  template:
    metadata: {labels: {app: gvisor}}
    spec:
      runtimeClassName: runsc
      containers: [{name: agnhost, image: %s, args: [pause]}]
`, image))
	c.mustKubectl("apply", "-f", "/etc/kubernetes/gvisor.yaml")
	if out, err := c.kubectl("rollout", "status", "deployment/gvisor", "--timeout=3m"); err != nil {
		t.Fatalf("the runsc Deployment: %v\n%s\n%s", err, out, c.mustKubectl("describe", "deployment", "gvisor"))
	}
	where := c.mustKubectl("get", "pods", "-l", "app=gvisor", "--field-selector", "status.phase=Running", "-o", "jsonpath={.items[*].spec.nodeName}")
	if f := strings.Fields(where); len(f) != 3 || strings.Count(where, n0.Name) != 3 {
		t.Errorf("runsc pods ran on %q, want all three on %s (the only node with runsc)", where, n0.Name)
	}

	n0.WriteFile("/etc/kubernetes/hostpid.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hostpid}
spec:
  runtimeClassName: runsc
  hostPID: true
  containers: [{name: c, image: %s, args: [pause]}]
`, image))
	waitFor(t, time.Minute, "the admission policy to refuse a runsc pod with hostPID", func() (bool, string) {
		out, err := c.kubectl("create", "-f", "/etc/kubernetes/hostpid.yaml")
		if err == nil {
			_, _ = c.kubectl("delete", "pod", "hostpid", "--wait=false")
		}
		return err != nil && strings.Contains(out, "spec.hostPID") && strings.Contains(out, "handler runsc"), out
	})

	// Rolling the runc row: a copy of runc under another name, for new pods only.
	pod := func(name string) {
		c.mustKubectl("run", name, "--image", image, "--restart", "Never",
			"--overrides", fmt.Sprintf(`{"spec":{"nodeName":%q}}`, n0.Name), "--", "pause")
		if out, err := c.kubectl("wait", "--for=condition=Ready", "pod/"+name, "--timeout=3m"); err != nil {
			t.Fatalf("pod %s: %v\n%s", name, err, out)
		}
	}
	runtimePath := func(name string) string {
		crictl := toolPath(t, "crictl") + " --runtime-endpoint unix:///run/rtshimd/rtshimd.sock"
		// crictl warns on stderr that it has no config file: only stdout is JSON.
		out, err := n0.Exec(time.Minute, "sh", "-c", "exec 2>/dev/null; "+crictl+" inspectp $("+crictl+" pods -q --name '^"+name+"$')")
		if err != nil {
			t.Fatalf("crictl inspectp %s: %v\n%s", name, err, out)
		}
		var st struct {
			Info struct {
				Metadata struct {
					Runtime struct{ Path string } `json:"runtime"`
				} `json:"metadata"`
			} `json:"info"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("crictl inspectp %s: %v\n%s", name, err, out)
		}
		return st.Info.Metadata.Runtime.Path
	}
	pod("before")
	old := n0.Config.Handlers["runc"].RuntimePath
	next := "/usr/local/bin/runc-next"
	n0.MustExec("cp", old, next)
	n0.Config.Handlers["runc"].RuntimePath = next
	n0.WriteConfig()
	n0.MustExec("rtshimd", "reload")
	pod("after")
	if got := runtimePath("before"); got != old {
		t.Errorf("the pod started before the reload runs on %q, want %q", got, old)
	}
	if got := runtimePath("after"); got != next {
		t.Errorf("the pod started after the reload runs on %q, want %q", got, next)
	}
	if out := c.mustKubectl("get", "pod", "before", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].restartCount}"); out != "Running 0" {
		t.Errorf("the pod started before the reload: %q, want Running 0", out)
	}

	// Taking the runsc row away: the label goes, the running pods stay.
	delete(n0.Config.Handlers, "runsc")
	n0.WriteConfig()
	n0.MustExec("rtshimd", "reload")
	waitFor(t, time.Minute, n0.Name+"'s runsc label to go", func() (bool, string) {
		out, err := c.kubectl("get", "node", n0.Name, "-o", "jsonpath={.metadata.labels}")
		return err == nil && !strings.Contains(out, "runtime.rtshimd.io/runsc") && strings.Contains(out, "runtime.rtshimd.io/runc"), out
	})
	if out := c.mustKubectl("get", "pods", "-l", "app=gvisor", "--field-selector", "status.phase=Running", "-o", "name"); len(strings.Fields(out)) != 3 {
		t.Errorf("runsc pods running after the row went: %q, want 3", out)
	}
}

// clusterRollout creates a Deployment of two replicas, rolls it to agnhost's other tag (an
// image of its own) and checks that both replicas run the new image.
func clusterRollout(t *testing.T, c *cluster, image string) {
	c.mustKubectl("create", "deployment", "roll", "--image", image, "--replicas", "2", "--", "/agnhost", "pause")
	rollout := func() {
		if out, err := c.kubectl("rollout", "status", "deployment/roll", "--timeout=3m"); err != nil {
			t.Fatalf("rollout: %v\n%s\n%s", err, out, c.mustKubectl("describe", "deployment", "roll"))
		}
	}
	rollout()
	next := strings.TrimSuffix(image, ":2.66.1") + ":2.55"
	c.mustKubectl("set", "image", "deployment/roll", "agnhost="+next)
	rollout()
	waitFor(t, 2*time.Minute, "the old replicas to go", func() (bool, string) {
		out, err := c.kubectl("get", "pods", "-l", "app=roll", "-o", `jsonpath={range .items[*]}{.spec.containers[0].image} {.status.phase}{"\n"}{end}`)
		return err == nil && strings.Count(out, next+" Running") == 2 && strings.Count(out, "\n") == 2, out
	})
}

// clusterWebhook runs agnhost's admission webhook behind a Service, with a serving
// certificate the test makes, registers it to deny ConfigMaps labelled webhook=deny, and
// checks that the API server (on node 0's host network, through kube-proxy) asks it.
func clusterWebhook(t *testing.T, c *cluster, image string) {
	ca, cert, key := webhookCert(t, "webhook.default.svc")
	n := c.nodes[0]
	n.WriteFile("/etc/kubernetes/webhook/tls.crt", string(cert))
	n.WriteFile("/etc/kubernetes/webhook/tls.key", string(key))
	c.mustKubectl("create", "secret", "tls", "webhook-tls", "--cert", "/etc/kubernetes/webhook/tls.crt", "--key", "/etc/kubernetes/webhook/tls.key")
	n.WriteFile("/etc/kubernetes/webhook/webhook.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: webhook, labels: {app: webhook}}
spec:
  containers:
  - name: webhook
    image: %s
    args: [webhook, --tls-cert-file=/certs/tls.crt, --tls-private-key-file=/certs/tls.key, --port=8443]
    readinessProbe: {httpGet: {scheme: HTTPS, port: 8443, path: /readyz}, periodSeconds: 1}
    volumeMounts: [{name: certs, mountPath: /certs, readOnly: true}]
  volumes: [{name: certs, secret: {secretName: webhook-tls}}]
---
apiVersion: v1
kind: Service
metadata: {name: webhook}
spec: {selector: {app: webhook}, ports: [{port: 443, targetPort: 8443}]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: rtshimd-deny}
webhooks:
- name: deny.rtshimd.test
  clientConfig: {service: {namespace: default, name: webhook, path: /always-deny}, caBundle: %s}
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}]
  objectSelector: {matchLabels: {webhook: deny}}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Fail
  timeoutSeconds: 5
`, image, base64.StdEncoding.EncodeToString(ca)))
	c.mustKubectl("apply", "-f", "/etc/kubernetes/webhook/webhook.yaml")
	t.Cleanup(func() { _, _ = c.kubectl("delete", "validatingwebhookconfiguration", "rtshimd-deny") })
	if out, err := c.kubectl("wait", "--for=condition=Ready", "pod/webhook", "--timeout=3m"); err != nil {
		t.Fatalf("webhook pod: %v\n%s", err, out)
	}
	configMap := func(name, label string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, labels: {webhook: %s}}\ndata: {k: v}\n", name, label)
	}
	n.WriteFile("/etc/kubernetes/webhook/allowed.yaml", configMap("allowed", "allow"))
	c.mustKubectl("create", "-f", "/etc/kubernetes/webhook/allowed.yaml")
	n.WriteFile("/etc/kubernetes/webhook/denied.yaml", configMap("denied", "deny"))
	waitFor(t, time.Minute, "the webhook to deny a labelled ConfigMap", func() (bool, string) {
		out, err := c.kubectl("create", "-f", "/etc/kubernetes/webhook/denied.yaml")
		if err == nil {
			_, _ = c.kubectl("delete", "configmap", "denied")
		}
		return err != nil && strings.Contains(out, "this webhook denies all requests"), out
	})
}

// webhookCert makes a CA and a serving certificate for dnsName signed by it (PEM).
func webhookCert(t *testing.T, dnsName string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rtshimd test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// TestClusterConformance runs Kubernetes' e2e [Conformance] suite against a cluster of two
// rtshimd nodes (make cluster-conformance): e2e.test at the pinned version under ginkgo, in
// the cluster's network namespace (where the nodes' and the API server's addresses are),
// with the images its specs pull built by hack/conformance/images (-set cluster: the real
// agnhost and sample API server, stand-ins for the rest) under registry.k8s.io on the test's registry. The report
// is checked by hack/conformance/check against conformance/cluster/ with the node suites'
// rules: a listed spec that fails, or a failure no exception explains, fails the test.
// RTSHIMD_CLUSTER_FOCUS narrows the run (a regular expression; the check is then partial),
// RTSHIMD_CLUSTER_PROCS sets ginkgo's processes (default 4), and
// RTSHIMD_CLUSTER_UPDATE=1 rewrites conformance/cluster/runc.txt from the specs that passed.
func TestClusterConformance(t *testing.T) {
	if os.Getenv("RTSHIMD_CLUSTER_CONFORMANCE") == "" {
		t.Skip("make cluster-conformance runs it (RTSHIMD_CLUSTER_CONFORMANCE=1): hours on two cores")
	}
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Dir(filepath.Dir(file))
	c := startCluster(t, 2)
	out := t.TempDir()
	// The suite's images, beside the cluster's, in the same registry.
	bin := filepath.Join(out, "bin")
	for _, s := range []string{"nginx", "labutils", "nnp"} {
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(bin, s), "./hack/conformance/standins/"+s)
		build.Dir, build.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build the %s stand-in: %v\n%s", s, err, b)
		}
	}
	copyFile(t, filepath.Join(repo, "bin", "rtshim-pause"), filepath.Join(bin, "pause"))
	copyFile(t, toolPath(t, "agnhost"), filepath.Join(bin, "agnhost"))
	copyFile(t, toolPath(t, "sample-apiserver"), filepath.Join(bin, "sample-apiserver"))
	ksrc := kubeSource(t)
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		copyFile(t, filepath.Join(ksrc, "test/images/agnhost/porter", f), filepath.Join(bin, f))
	}
	for _, pic := range []string{"kitten", "nautilus"} {
		copyFile(t, filepath.Join(ksrc, "test/images", pic, "html", pic+".jpg"), filepath.Join(bin, pic+".jpg"))
		copyFile(t, filepath.Join(ksrc, "test/images", pic, "html", "data.json"), filepath.Join(bin, pic+".json"))
	}
	images := exec.Command("go", "run", "./hack/conformance/images", "-set", "cluster", "-registry", c.registry,
		"-busybox", toolPath(t, "busybox"), "-bin", bin, "-out", filepath.Join(out, "images.txt"))
	images.Dir = repo
	if b, err := images.CombinedOutput(); err != nil {
		t.Fatalf("the suite's images: %v\n%s", err, b)
	}
	// The admin's kubeconfig: its server, node 0's address, is reached in the namespace.
	admin := filepath.Join(out, "admin.conf")
	copyFile(t, c.nodes[0].Path("/etc/kubernetes/admin.conf"), admin)

	procs := os.Getenv("RTSHIMD_CLUSTER_PROCS")
	if procs == "" {
		procs = "4"
	}
	focus := os.Getenv("RTSHIMD_CLUSTER_FOCUS")
	// ginkgo ORs repeated --focus flags: a narrowed run is one expression.
	re := `\[Conformance\]`
	if focus != "" {
		re = `\[Conformance\].*(` + focus + `)|(` + focus + `).*\[Conformance\]`
	}
	args := []string{"netns", "exec", c.ns, toolPath(t, "ginkgo"), "--procs=" + procs, "--timeout=6h", "--no-color",
		"--focus=" + re, "--json-report=report.json", "--output-dir=" + out}
	args = append(args, toolPath(t, "e2e.test"), "--", "--kubeconfig="+admin, "--provider=skeleton",
		"--kubectl-path="+toolPath(t, "kubectl"), "--dns-domain=cluster.local", "--report-dir="+out, "--disable-log-dump=true")
	suite := exec.Command("ip", args...)
	log, err := os.Create(filepath.Join(out, "e2e.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	suite.Stdout, suite.Stderr = log, log
	start := time.Now()
	runErr := suite.Run()
	code := 0
	if runErr != nil {
		code = suite.ProcessState.ExitCode()
	}
	t.Logf("e2e.test: exit %d in %v (log: %s)", code, time.Since(start).Round(time.Second), log.Name())
	check := []string{"run", "./hack/conformance/check", "-suite", "cluster", "-handler", "runc",
		"-dir", "conformance/cluster", "-report", filepath.Join(out, "report.json"), "-exit-code", fmt.Sprint(code)}
	if focus != "" {
		check = append(check, "-partial")
	}
	if os.Getenv("RTSHIMD_CLUSTER_UPDATE") != "" {
		check = append(check, "-update")
	}
	cmd := exec.Command("go", check...)
	cmd.Dir = repo
	b, err := cmd.CombinedOutput()
	t.Logf("%s", b)
	if err != nil {
		t.Errorf("the conformance check failed (report %s): %v", filepath.Join(out, "report.json"), err)
	}
}

// copyFile copies src to dst (made 0755: programs and the TLS pair alike).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// kubeSource is the k8s.io/kubernetes module the tools were built from (its test data).
func kubeSource(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join(toolsDir(), "src", "kubernetes-"+kubeVersion)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("the k8s.io/kubernetes module: %v", err)
	}
	return strings.TrimSpace(string(b))
}
