//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestKubeletStaticPods runs workload-shaped static pods through a real kubelet standalone
// (no API server): init containers, containers sharing an emptyDir, HTTP and exec probes,
// a missing hostPath created, downward API volume and env, every QoS class with its
// cgroups, a crashing container restarted and a run-once pod completed, logs and exec through kubelet's own API, and a
// pod removed with its cgroups and mounts gone. kubelet's /pods is what is asserted, plus
// the node. Projected volumes need kubelet's API client: TestKubeletRuntimeClass has them.
func TestKubeletStaticPods(t *testing.T) {
	e := newContainerEnv(t)
	n := writeNetwork(t, e)
	k := startKubelet(t, e.d, "")
	hostDir := filepath.Join(t.TempDir(), "not", "there", "yet") // hostPath with no type

	k.AddStaticPod("workload.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: workload
  namespace: default
  labels: {app: workload, tier: test}
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: init
    image: %[1]s
    command: ["sh", "-c", "echo hello-from-init > /data/index.html"]
    volumeMounts: [{name: data, mountPath: /data}]
  containers:
  - name: web
    image: %[1]s
    command: ["httpd", "-f", "-p", "8080", "-h", "/data"]
    ports: [{containerPort: 8080}]
    env:
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: POD_UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}
    resources:
      requests: {cpu: 50m, memory: 16Mi}
      limits: {memory: 64Mi}
    readinessProbe:
      httpGet: {path: /index.html, port: 8080}
      periodSeconds: 1
    livenessProbe:
      exec: {command: ["cat", "/data/index.html"]}
      periodSeconds: 2
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: host, mountPath: /host}
    - {name: podinfo, mountPath: /etc/podinfo}
  - name: sidecar
    image: %[1]s
    command: ["sh", "-c", "cat /data/index.html; echo from-sidecar > /host/hello; while true; do sleep 1; done"]
    readinessProbe:
      exec: {command: ["test", "-f", "/host/hello"]}
      periodSeconds: 1
    volumeMounts:
    - {name: data, mountPath: /data, readOnly: true}
    - {name: host, mountPath: /host}
  volumes:
  - {name: data, emptyDir: {}}
  - {name: host, hostPath: {path: %[2]q}}
  - name: podinfo
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: name, fieldRef: {fieldPath: metadata.name}}
      - {path: mem-limit, resourceFieldRef: {containerName: web, resource: limits.memory, divisor: 1Mi}}
`, e.image, hostDir))
	k.AddStaticPod("guaranteed.yaml", onePod("guaranteed", e.image, "", "{limits: {cpu: 100m, memory: 32Mi}}", "sleep", "3600"))
	k.AddStaticPod("crasher.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: crasher, namespace: default}
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "echo crashing; exit 3"]
`, e.image))
	k.AddStaticPod("once.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: once, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: %s
    command: ["sh", "-c", "echo done once"]
`, e.image))

	node := "-" + k.NodeName
	running := runningReady
	wl := k.WaitPod("workload"+node, 3*time.Minute, "Running and Ready", running)
	gu := k.WaitPod("guaranteed"+node, time.Minute, "Running and Ready", running)
	cr := k.WaitPod("crasher"+node, 2*time.Minute, "restarted after a crash", func(p *kubePod) bool {
		c := p.container("main")
		return c != nil && c.RestartCount >= 1 && c.LastState.Terminated != nil
	})

	once := k.WaitPod("once"+node, time.Minute, "Succeeded", func(p *kubePod) bool { return p.Status.Phase == "Succeeded" })

	t.Run("init and probes", func(t *testing.T) {
		init := wl.container("init")
		if init == nil || init.State.Terminated == nil || init.State.Terminated.ExitCode != 0 || init.State.Terminated.Reason != "Completed" {
			t.Errorf("init container: %+v", init)
		}
		for _, name := range []string{"web", "sidecar"} {
			if c := wl.container(name); c == nil || !c.Ready || c.State.Running == nil || c.RestartCount != 0 {
				t.Errorf("%s: %+v", name, c)
			}
		}
		if !strings.HasPrefix(wl.Status.PodIP, strings.TrimSuffix(n.subnet, "0/24")) {
			t.Errorf("pod IP %q not in the CNI subnet %s", wl.Status.PodIP, n.subnet)
		}
	})

	t.Run("volumes and downward API", func(t *testing.T) {
		for _, tt := range []struct{ cmd, want string }{
			{"cat /data/index.html", "hello-from-init"},
			{"cat /host/hello", "from-sidecar"},
			{"cat /etc/podinfo/name", "workload" + node},
			{"cat /etc/podinfo/labels", `tier="test"`},
			{"cat /etc/podinfo/mem-limit", "64"},
			{"env", "POD_IP=" + wl.Status.PodIP + "\n"},
			{"env", "POD_UID=" + wl.Metadata.UID + "\n"},
		} {
			out, err := k.Run("default", "workload"+node, "web", strings.Fields(tt.cmd)...)
			if err != nil || !strings.Contains(out, tt.want) {
				t.Errorf("kubelet /run %q: %q, %v; want %q", tt.cmd, out, err, tt.want)
			}
		}
		if fi, err := os.Stat(hostDir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
			t.Errorf("missing hostPath not created as a 0755 directory: %v %v", fi, err)
		}
		if b, err := os.ReadFile(filepath.Join(hostDir, "hello")); err != nil || strings.TrimSpace(string(b)) != "from-sidecar" {
			t.Errorf("hostPath from the node: %q %v", b, err)
		}
	})

	t.Run("logs through kubelet", func(t *testing.T) {
		if out, err := k.ContainerLogs("default", "workload"+node, "sidecar", false); err != nil || !strings.Contains(out, "hello-from-init") {
			t.Errorf("sidecar log (emptyDir written by init): %q %v", out, err)
		}
		// kubelet's status of the crash loop moves on as it restarts the container; ask again
		// until it names a dead container it still has.
		waitFor(t, 30*time.Second, "the previous log of the crashed container", func() (bool, string) {
			out, err := k.ContainerLogs("default", "crasher"+node, "main", true)
			return err == nil && strings.Contains(out, "crashing"), fmt.Sprint(out, err)
		})
	})

	t.Run("restart policies", func(t *testing.T) {
		c := cr.container("main")
		if c.LastState.Terminated.ExitCode != 3 || c.LastState.Terminated.Reason != "Error" {
			t.Errorf("last state of the crashed container: %+v", c.LastState.Terminated)
		}
		// restartPolicy Never: run once, never restarted.
		if c := once.container("main"); c == nil || c.RestartCount != 0 || c.State.Terminated == nil ||
			c.State.Terminated.ExitCode != 0 || c.State.Terminated.Reason != "Completed" {
			t.Errorf("once: %s", once.summary())
		}
	})

	t.Run("QoS classes and cgroups", func(t *testing.T) {
		for _, tt := range []struct {
			pod   *kubePod
			qos   string
			limit int64 // pod cgroup memory limit; 0: none
		}{
			{gu, "Guaranteed", 32 << 20}, {wl, "Burstable", 0 /* sidecar has no limit */}, {cr, "BestEffort", 0},
		} {
			if tt.pod.Status.QOSClass != tt.qos {
				t.Errorf("%s: QoS %q, want %s", tt.pod.Metadata.Name, tt.pod.Status.QOSClass, tt.qos)
			}
			dir := k.PodCgroup("memory", tt.pod)
			b, err := os.ReadFile(filepath.Join(dir, "memory.limit_in_bytes"))
			if err != nil {
				t.Errorf("%s: pod cgroup: %v", tt.pod.Metadata.Name, err)
				continue
			}
			got, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if (tt.limit == 0 && got < 1<<50) || (tt.limit != 0 && got != tt.limit) {
				t.Errorf("%s: pod memory limit %d, want %d", tt.pod.Metadata.Name, got, tt.limit)
			}
		}
		// The container's own cgroup, under the pod's, carries its limit.
		_, web, _ := strings.Cut(wl.container("web").ContainerID, "://") // <runtime name>://<id>
		b, err := os.ReadFile(filepath.Join(k.PodCgroup("memory", wl), web, "memory.limit_in_bytes"))
		if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(64<<20) {
			t.Errorf("web container memory limit: %q %v", b, err)
		}
		b, err = os.ReadFile(filepath.Join(k.PodCgroup("cpu", gu), "cpu.cfs_quota_us"))
		if err != nil || strings.TrimSpace(string(b)) != "10000" {
			t.Errorf("guaranteed pod cpu quota: %q %v", b, err)
		}
	})

	t.Run("pod removed", func(t *testing.T) {
		podCgroups := []string{k.PodCgroup("memory", wl), k.PodCgroup("cpu", wl), k.PodCgroup("pids", wl)}
		volumes := filepath.Join(k.Root, "pods", wl.Metadata.UID)
		if m := mountsUnder(volumes); len(m) == 0 {
			t.Errorf("no volume mounts under %s while the pod runs (downward API volumes are tmpfs)", volumes)
		}
		k.RemoveStaticPod("workload.yaml")
		waitFor(t, 90*time.Second, "workload to leave kubelet, its cgroups and its mounts", func() (bool, string) {
			pods, err := k.Pods()
			if err != nil {
				return false, err.Error()
			}
			if p := pods["workload"+node]; p != nil {
				return false, "still in /pods: " + p.summary()
			}
			for _, c := range podCgroups {
				if _, err := os.Stat(c); err == nil {
					return false, "cgroup left: " + c
				}
			}
			if m := mountsUnder(volumes); len(m) > 0 {
				return false, fmt.Sprint("mounts left: ", m)
			}
			return true, ""
		})
		// The runtime's view: no container of the pod runs any more.
		ctrs, err := e.d.RS.ListContainers(ctxT(t), &runtimeapi.ContainerFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": wl.Metadata.UID},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ctrs {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Errorf("container %s of the removed pod still running", c.Metadata.Name)
			}
		}
		// The other pods are untouched.
		if p := k.WaitPod("guaranteed"+node, 10*time.Second, "still Running", running); p.container("main").RestartCount != 0 {
			t.Errorf("guaranteed restarted: %s", p.summary())
		}
	})
}
