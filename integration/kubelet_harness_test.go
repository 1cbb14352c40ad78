//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Kubelet is a real kubelet (hack/tools.sh builds it) pointed at a daemon's socket:
// standalone with static pods from a manifest dir, or registered with an API server when a
// kubeconfig is given. Its own HTTPS API (/pods, /containerLogs, /run) on loopback, with
// anonymous access, is how the tests read kubelet's view.
type Kubelet struct {
	t          testing.TB
	Dir        string
	Manifests  string // staticPodPath
	Root       string // --root-dir
	CgroupRoot string // cgroupRoot, under every hierarchy
	NodeName   string
	Port       int
	cmd        *exec.Cmd
	exited     chan struct{}
	client     *http.Client
	newDirs    []string // fixed paths kubelet creates outside --root-dir that were not there before
}

// kubeletFixedDirs are made by kubelet whatever its --root-dir (device plugins, log links).
var kubeletFixedDirs = []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/var/log/containers"}

// kubeletCgroupRoot is the cgroup parent of every kubelet the tests start; kubelet puts
// kubepods (and its QoS classes) under it.
const kubeletCgroupRoot = "/rtshimd-kubelet"

// startKubelet runs kubelet against d; kubeconfig "" runs it standalone. extra are lines
// added to its KubeletConfiguration (featureGates, say).
func startKubelet(t testing.TB, d *Daemon, kubeconfig string, extra ...string) *Kubelet {
	t.Helper()
	bin := toolPath(t, "kubelet")
	dir := t.TempDir()
	k := &Kubelet{
		t: t, Dir: dir, Manifests: filepath.Join(dir, "manifests"), Root: filepath.Join(dir, "root"),
		CgroupRoot: kubeletCgroupRoot, NodeName: "rtshimd-node", Port: freeLoopbackPort(t),
		exited: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // kubelet's self-signed serving cert
		}},
	}
	for _, p := range []string{k.Manifests, k.Root} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range kubeletFixedDirs {
		if _, err := os.Stat(d); err != nil {
			k.newDirs = append(k.newDirs, d)
		}
	}
	// kubelet refuses a cgroupRoot that does not exist in every hierarchy.
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		hierarchies = []string{"/sys/fs/cgroup/cgroup.procs"}
	}
	for _, h := range hierarchies {
		if err := os.MkdirAll(filepath.Join(filepath.Dir(h), k.CgroupRoot), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %q
fileCheckFrequency: 1s
syncFrequency: 5s
containerRuntimeEndpoint: "unix://%s"
imageServiceEndpoint: "unix://%s"
cgroupDriver: cgroupfs
cgroupRoot: %q
failCgroupV1: false
failSwapOn: false
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
podLogsDir: %q
volumePluginDir: %q
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
serializeImagePulls: false
registerNode: %v
`, k.Manifests, d.Socket, d.Socket, k.CgroupRoot, k.Port, freeLoopbackPort(t),
		filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins"), kubeconfig != "")
	for _, l := range extra {
		cfg += l + "\n"
	}
	cfgPath := filepath.Join(dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfgPath, "--root-dir", k.Root, "--cert-dir", filepath.Join(dir, "pki"),
		"--hostname-override", k.NodeName, "--v=2"}
	if kubeconfig != "" {
		args = append(args, "--kubeconfig", kubeconfig)
	}
	logf, err := os.Create(filepath.Join(dir, "kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	k.cmd = exec.Command(bin, args...)
	k.cmd.Stdout, k.cmd.Stderr = logf, logf
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := k.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = k.cmd.Wait(); logf.Close(); close(k.exited) }()
	t.Cleanup(k.cleanup)
	waitFor(t, 90*time.Second, "kubelet to serve /pods", func() (bool, string) {
		select {
		case <-k.exited:
			t.Fatalf("kubelet exited during start-up:\n%s", lastLines(k.Log(), 40))
		default:
		}
		_, err := k.get("/pods")
		return err == nil, fmt.Sprint(err)
	})
	return k
}

// Log is kubelet's log so far.
func (k *Kubelet) Log() string {
	b, _ := os.ReadFile(filepath.Join(k.Dir, "kubelet.log"))
	return string(b)
}

func (k *Kubelet) get(path string) ([]byte, error) {
	return k.do(http.MethodGet, path)
}

func (k *Kubelet) do(method, path string) ([]byte, error) {
	req, err := http.NewRequest(method, fmt.Sprintf("https://127.0.0.1:%d%s", k.Port, path), nil)
	if err != nil {
		return nil, err
	}
	return send(k.client, req)
}

// send sends a request and returns the body of a 2xx answer; any other answer is an error
// naming the request, the status and the body.
func send(c *http.Client, req *http.Request) ([]byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return b, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// kubePod is the part of a v1.Pod the tests read from kubelet.
type kubePod struct {
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		UID       string            `json:"uid"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		RuntimeClassName string `json:"runtimeClassName,omitempty"`
		NodeName         string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		PodIP      string `json:"podIP"`
		QOSClass   string `json:"qosClass"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		InitContainerStatuses []kubeContainerStatus `json:"initContainerStatuses"`
		ContainerStatuses     []kubeContainerStatus `json:"containerStatuses"`
	} `json:"status"`
}

type kubeContainerState struct {
	Running *struct {
		StartedAt string `json:"startedAt"`
	} `json:"running"`
	Terminated *struct {
		ExitCode int    `json:"exitCode"`
		Reason   string `json:"reason"`
	} `json:"terminated"`
	Waiting *struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"waiting"`
}

type kubeContainerStatus struct {
	Name         string             `json:"name"`
	Ready        bool               `json:"ready"`
	RestartCount int                `json:"restartCount"`
	ContainerID  string             `json:"containerID"`
	State        kubeContainerState `json:"state"`
	LastState    kubeContainerState `json:"lastState"`
}

func (p *kubePod) condition(typ string) string {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func (p *kubePod) container(name string) *kubeContainerStatus {
	for _, list := range [][]kubeContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// summary is a one-line account of a pod for failure messages.
func (p *kubePod) summary() string {
	s := fmt.Sprintf("%s phase=%s ready=%s ip=%s", p.Metadata.Name, p.Status.Phase, p.condition("Ready"), p.Status.PodIP)
	for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		state := "?"
		switch {
		case c.State.Running != nil:
			state = "running"
		case c.State.Terminated != nil:
			state = fmt.Sprintf("terminated(%d %s)", c.State.Terminated.ExitCode, c.State.Terminated.Reason)
		case c.State.Waiting != nil:
			state = fmt.Sprintf("waiting(%s: %s)", c.State.Waiting.Reason, c.State.Waiting.Message)
		}
		s += fmt.Sprintf(" [%s %s ready=%v restarts=%d]", c.Name, state, c.Ready, c.RestartCount)
	}
	return s
}

// Pods is kubelet's /pods: the pods it runs, with the statuses it computed.
func (k *Kubelet) Pods() (map[string]*kubePod, error) {
	b, err := k.get("/pods")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []*kubePod `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("decode /pods: %w", err)
	}
	out := map[string]*kubePod{}
	for _, p := range list.Items {
		out[p.Metadata.Name] = p
	}
	return out, nil
}

// WaitPod waits until kubelet reports pod name (static pods are named <name>-<node>) in a
// state cond accepts, and returns it.
func (k *Kubelet) WaitPod(name string, limit time.Duration, what string, cond func(*kubePod) bool) *kubePod {
	k.t.Helper()
	var got *kubePod
	waitFor(k.t, limit, name+" "+what, func() (bool, string) {
		pods, err := k.Pods()
		if err != nil {
			return false, err.Error()
		}
		got = pods[name]
		if got == nil {
			return false, "not in /pods"
		}
		return cond(got), got.summary()
	})
	return got
}

// runningReady: kubelet reports the pod Running and Ready.
func runningReady(p *kubePod) bool {
	return p.Status.Phase == "Running" && p.condition("Ready") == "True"
}

// onePod is the manifest of a static pod in namespace default with one container, main,
// running cmd; restart is its restartPolicy ("" for kubelet's default) and resources its
// container's resources as a YAML flow mapping ("" for none).
func onePod(name, image, restart, resources string, cmd ...string) string {
	command, _ := json.Marshal(cmd)
	m := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: default}\nspec:\n", name)
	if restart != "" {
		m += "  restartPolicy: " + restart + "\n"
	}
	m += fmt.Sprintf("  terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: %s\n    command: %s\n", image, command)
	if resources != "" {
		m += "    resources: " + resources + "\n"
	}
	return m
}

// AddStaticPod writes a manifest into staticPodPath.
func (k *Kubelet) AddStaticPod(file, manifest string) {
	k.t.Helper()
	if err := os.WriteFile(filepath.Join(k.Manifests, file), []byte(manifest), 0o644); err != nil {
		k.t.Fatal(err)
	}
}

// RemoveStaticPod deletes a manifest: kubelet stops the pod and tears it down.
func (k *Kubelet) RemoveStaticPod(file string) {
	k.t.Helper()
	if err := os.Remove(filepath.Join(k.Manifests, file)); err != nil {
		k.t.Fatal(err)
	}
}

// ContainerLogs reads a container's log through kubelet (/containerLogs), as kubectl logs does.
func (k *Kubelet) ContainerLogs(ns, pod, ctr string, previous bool) (string, error) {
	b, err := k.get(fmt.Sprintf("/containerLogs/%s/%s/%s?previous=%v", ns, pod, ctr, previous))
	return string(b), err
}

// Run runs a command in a container through kubelet's /run (ExecSync underneath).
func (k *Kubelet) Run(ns, pod, ctr string, cmd ...string) (string, error) {
	q := url.Values{}
	q.Set("cmd", strings.Join(cmd, " "))
	b, err := k.do(http.MethodPost, fmt.Sprintf("/run/%s/%s/%s?%s", ns, pod, ctr, q.Encode()))
	return string(b), err
}

// PodCgroup is the directory of a pod's cgroup in the given v1 controller (or the v2
// unified tree when controller is ""), following kubelet's cgroupfs layout.
func (k *Kubelet) PodCgroup(controller string, p *kubePod) string {
	qos := map[string]string{"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}[p.Status.QOSClass]
	return filepath.Join("/sys/fs/cgroup", controller, k.CgroupRoot, "kubepods", qos, "pod"+p.Metadata.UID)
}

// Stop ends kubelet (its pods keep running, as when kubelet restarts).
func (k *Kubelet) Stop() {
	if k.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-k.exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.exited
	}
}

// cleanup removes every static pod and waits until kubelet has torn them down, then stops
// kubelet, unmounts anything left under its root dir (failing the test) and removes its
// cgroup tree. The daemon's own cleanup then checks nothing of the pods is left.
func (k *Kubelet) cleanup() {
	t := k.t
	select {
	case <-k.exited:
	default:
		entries, _ := os.ReadDir(k.Manifests)
		for _, e := range entries {
			_ = os.Remove(filepath.Join(k.Manifests, e.Name()))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		for ctx.Err() == nil {
			pods, err := k.Pods()
			if err == nil && len(pods) == 0 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		cancel()
		k.Stop()
	}
	// kubelet makes its root dir a shared bind mount of itself; anything below is a volume.
	m := mountsUnder(k.Root)
	for i := len(m) - 1; i >= 0; i-- {
		if m[i] != k.Root {
			t.Errorf("kubelet volume mount left: %s", m[i])
		}
		_ = syscall.Unmount(m[i], syscall.MNT_DETACH)
	}
	removeCgroupTree(k.CgroupRoot)
	// kubelet drops a container's log link when it garbage-collects the container, which a
	// stopped kubelet no longer does: drop the links into this kubelet's pod logs.
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, k.Dir+"/") {
			_ = os.Remove(l)
		}
	}
	for _, d := range k.newDirs {
		_ = os.Remove(filepath.Join(d, "kubelet.sock"))
		_ = os.Remove(d) // only when empty
	}
	if t.Failed() {
		// The whole log outlives the test's temp dir.
		saved := filepath.Join(os.TempDir(), "rtshimd-kubelet-"+strings.ReplaceAll(t.Name(), "/", "_")+".log")
		_ = os.WriteFile(saved, []byte(k.Log()), 0o644)
		t.Logf("kubelet log (all of it in %s):\n%s", saved, lastLines(k.Log(), 40))
	}
}

// removeCgroupTree removes a cgroup and everything under it, in every hierarchy.
func removeCgroupTree(rel string) {
	roots, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", rel))
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", rel, "cgroup.controllers")); err == nil {
		roots = append(roots, filepath.Join("/sys/fs/cgroup", rel))
	}
	for _, root := range roots {
		for _, dir := range cgroupDirsBottomUp(root) {
			_ = os.Remove(dir)
		}
	}
}
