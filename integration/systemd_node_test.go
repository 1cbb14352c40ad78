//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// TestSystemdNode runs the node kubeadm users run: systemd as PID 1 (a node container, as
// kind's), rtshimd installed in it by `make install` and run by its unit (Type=notify,
// ExecReload, KillMode=process) with cgroup_driver = "systemd", and kubelet with
// cgroupDriver: systemd running pods of every QoS class. Asserted: the unit becomes active
// only once the socket serves; systemctl reload reloads; the pods' slices and rtshimd's
// scopes carry kubelet's limits; stats and OOMKilled read through them; systemctl stop
// leaves pods running and the next start picks them up; a removed pod leaves no scope or
// slice; and nothing of the node is left here afterwards (startSystemdNode's cleanup).
// `make systemd-node` runs it alone.
func TestSystemdNode(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Dir(filepath.Dir(file))
	// The binaries `make install` installs: built here, as the node has no Go toolchain.
	if out, err := exec.Command("make", "-C", repo, "--no-print-directory", "build").CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	reg := startRegistry(t, nil)
	reg.Push(t, "test/busybox", "1", ImageSpec{
		Layers: []Layer{busyboxLayer(t), toolsLayer()},
		Config: ocispec.ImageConfig{Env: []string{"PATH=/bin"}, Cmd: []string{"sh"}},
	}, nil)
	image := reg.Ref("test/busybox", "1")

	n := startSystemdNode(t, repo)
	n.Forward(reg.Addr)

	// make install, as on any node; `-o build`: the binaries are built (above).
	n.MustExec("make", "-C", "/src", "--no-print-directory", "-o", "build", "install")
	t.Run("make install", func(t *testing.T) {
		want, err := os.ReadFile(filepath.Join(repo, "contrib/systemd/rtshimd.service"))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(n.Path("/etc/systemd/system/rtshimd.service")); err != nil || !bytes.Equal(got, want) {
			t.Errorf("installed unit differs from contrib/systemd/rtshimd.service (%v)", err)
		}
		if _, err := n.Exec(time.Minute, "sh", "-c", "rtshimd config default | cmp - /etc/rtshimd/config.toml"); err != nil {
			t.Errorf("installed config is not the default: %v", err)
		}
		for _, p := range []string{"/usr/local/bin/rtshim-monitor", "/usr/local/bin/rtshim-pause", "/etc/cni/net.d/10-rtshimd.conflist"} {
			if _, err := os.Stat(n.Path(p)); err != nil {
				t.Errorf("make install: %v", err)
			}
		}
	})

	// The node's config: the default with the systemd driver, runc (the node's Debian
	// runc) and the test's registry.
	cfg := config.Default()
	cfg.CgroupDriver = config.SystemdDriver
	cfg.Handlers = map[string]*config.Handler{"runc": cfg.Handlers["runc"]}
	cfg.DefaultHandler = "runc"
	cfg.Image.Registries = append(cfg.Image.Registries, config.Registry{Location: reg.Addr, Insecure: true})
	n.WriteFile("/etc/rtshimd/config.toml", configTOML(t, cfg))

	socket := n.LivePath("/run/rtshimd/rtshimd.sock")
	n.MustExec("systemctl", "enable", "--now", "rtshimd")
	// Type=notify: start returns once rtshimd sent READY=1, which it does when it serves.
	if _, err := os.Stat(socket); err != nil {
		t.Fatalf("systemctl start returned before the socket was made: %v", err)
	}
	unit := n.Unit("rtshimd", "ActiveState", "SubState", "Type", "MainPID", "ControlGroup")
	if unit["ActiveState"] != "active" || unit["SubState"] != "running" || unit["Type"] != "notify" {
		t.Fatalf("rtshimd.service: %v", unit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rs, is, err := connect(ctx, "unix://"+socket)
	if err != nil {
		t.Fatalf("connect to the node's rtshimd: %v", err)
	}
	t.Cleanup(func() {
		for _, c := range []any{rs, is} {
			if c, ok := c.(interface{ Close(context.Context) error }); ok {
				_ = c.Close(context.Background())
			}
		}
	})
	t.Run("systemd driver", func(t *testing.T) {
		rc, err := rs.RuntimeConfig(ctx)
		if err != nil || rc.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_SYSTEMD {
			t.Errorf("RuntimeConfig: %v %v, want the systemd driver", rc, err)
		}
		if unit["ControlGroup"] != "/system.slice/rtshimd.service" {
			t.Errorf("rtshimd runs in %q", unit["ControlGroup"])
		}
		// The runc row's probe container ran under the systemd driver.
		waitFor(t, time.Minute, "the runc row ready", func() (bool, string) {
			st, err := rs.Status(ctx, true)
			return err == nil && strings.Contains(statusReady(st), "runc=ready"), fmt.Sprint(statusReady(st), err)
		})
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("systemctl reload", func(t *testing.T) {
		before := reloadStatus(t, rs)
		cfg.Handlers["runc-b"] = &config.Handler{RuntimePath: "/usr/sbin/runc", RuntimeRoot: "/run/rtshimd/runc-b"}
		n.WriteFile("/etc/rtshimd/config.toml", configTOML(t, cfg))
		n.MustExec("systemctl", "reload", "rtshimd")
		seq := func(st reloadState) int {
			if st.Last == nil {
				return 0
			}
			return st.Last.Seq
		}
		waitFor(t, time.Minute, "a reload by SIGHUP after attempt "+strconv.Itoa(seq(before)), func() (bool, string) {
			st := reloadStatus(t, rs)
			// The file watch may apply the change first; the signal's attempt comes after it.
			return seq(st) > seq(before) && st.Last.Trigger == "signal", fmt.Sprintf("%+v", st.Last)
		})
		waitFor(t, time.Minute, "runc-b probed and listed", func() (bool, string) {
			names := statusHandlers(t, rs)
			return slices.Contains(names, "runc-b"), fmt.Sprint(names)
		})
		if got := n.Unit("rtshimd", "MainPID")["MainPID"]; got != unit["MainPID"] {
			t.Errorf("reload restarted the daemon: MainPID %s, was %s", got, unit["MainPID"])
		}
	})

	k := startNodeKubelet(t, n)
	node := "-" + k.NodeName
	k.AddStaticPod("guaranteed.yaml", onePod("guaranteed", image, "", "{limits: {cpu: 100m, memory: 32Mi}}", "sleep", "3600"))
	k.AddStaticPod("burstable.yaml", onePod("burstable", image, "", "{requests: {cpu: 50m, memory: 16Mi}, limits: {memory: 64Mi}}",
		"sh", "-c", "while true; do echo tick; sleep 1; done"))
	k.AddStaticPod("besteffort.yaml", onePod("besteffort", image, "", "", "sleep", "3600"))
	k.AddStaticPod("hog.yaml", onePod("hog", image, "Never", "{limits: {memory: 24Mi}}",
		"sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo $x | wc -c"))

	running := runningReady
	gu := k.WaitPod("guaranteed"+node, 3*time.Minute, "Running and Ready", running)
	if t.Failed() {
		t.FailNow() // the others would fail the same way, each after its wait
	}
	bu := k.WaitPod("burstable"+node, time.Minute, "Running and Ready", running)
	be := k.WaitPod("besteffort"+node, time.Minute, "Running and Ready", running)
	hog := k.WaitPod("hog"+node, 2*time.Minute, "Failed", func(p *kubePod) bool { return p.Status.Phase == "Failed" })
	if t.Failed() {
		t.FailNow()
	}

	t.Run("QoS slices and scopes", func(t *testing.T) {
		for _, tt := range []struct {
			pod      *kubePod
			qos      string
			podLimit int64 // the pod slice's memory limit; 0: none
			ctrLimit int64 // the container scope's
		}{
			{gu, "Guaranteed", 32 << 20, 32 << 20}, {bu, "Burstable", 64 << 20, 64 << 20}, {be, "BestEffort", 0, 0},
		} {
			name := tt.pod.Metadata.Name
			if tt.pod.Status.QOSClass != tt.qos {
				t.Errorf("%s: QoS %q, want %s", name, tt.pod.Status.QOSClass, tt.qos)
			}
			slice := podSlice(tt.pod)
			if got := n.Unit(filepath.Base(slice), "ActiveState")["ActiveState"]; got != "active" {
				t.Errorf("%s: %s is %q in the node's systemd", name, filepath.Base(slice), got)
			}
			if got := readCgroupInt(t, "memory", filepath.Join(n.Cgroup, slice), "memory.limit_in_bytes"); (tt.podLimit == 0 && got < 1<<50) || (tt.podLimit != 0 && got != tt.podLimit) {
				t.Errorf("%s: pod slice memory limit %d, want %d", name, got, tt.podLimit)
			}
			// rtshimd asks runc for the scope rtshimd-<id>.scope in kubelet's slice
			// (cgroupsPath slice:rtshimd:id); systemd owns it.
			_, id, _ := strings.Cut(tt.pod.container("main").ContainerID, "://")
			scope := filepath.Join(slice, "rtshimd-"+id+".scope")
			if got := n.Unit("rtshimd-"+id+".scope", "ActiveState")["ActiveState"]; got != "active" {
				t.Errorf("%s: container scope is %q in the node's systemd", name, got)
			}
			if got := readCgroupInt(t, "memory", filepath.Join(n.Cgroup, scope), "memory.limit_in_bytes"); (tt.ctrLimit == 0 && got < 1<<50) || (tt.ctrLimit != 0 && got != tt.ctrLimit) {
				t.Errorf("%s: container scope memory limit %d, want %d", name, got, tt.ctrLimit)
			}
		}
		if got := readCgroupInt(t, "cpu", filepath.Join(n.Cgroup, podSlice(gu)), "cpu.cfs_quota_us"); got != 10000 {
			t.Errorf("guaranteed pod slice cpu quota %d, want 10000", got)
		}
	})

	t.Run("stats", func(t *testing.T) {
		stats, err := rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, s := range stats {
			if s.GetAttributes().GetMetadata().GetName() != "main" {
				continue
			}
			seen++
			if s.GetMemory().GetWorkingSetBytes().GetValue() == 0 || s.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 {
				t.Errorf("%s: stats read nothing: memory %v cpu %v", s.GetAttributes().GetLabels()["io.kubernetes.pod.name"], s.GetMemory(), s.GetCpu())
			}
		}
		if seen < 3 {
			t.Errorf("stats of %d running containers, want 3", seen)
		}
		// kubelet's summary, from the same scopes.
		b, err := k.get("/stats/summary")
		if err != nil {
			t.Fatal(err)
		}
		var sum struct {
			Pods []struct {
				PodRef     struct{ Name string } `json:"podRef"`
				Containers []struct {
					Name   string `json:"name"`
					Memory *struct {
						WorkingSetBytes *uint64 `json:"workingSetBytes"`
					} `json:"memory"`
				} `json:"containers"`
			} `json:"pods"`
		}
		if err := json.Unmarshal(b, &sum); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range sum.Pods {
			if p.PodRef.Name != "guaranteed"+node {
				continue
			}
			for _, c := range p.Containers {
				if c.Name == "main" && c.Memory != nil && c.Memory.WorkingSetBytes != nil && *c.Memory.WorkingSetBytes > 0 {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("kubelet's /stats/summary has no memory for guaranteed's container:\n%s", lastLines(string(b), 40))
		}
	})

	t.Run("OOMKilled", func(t *testing.T) {
		c := hog.container("main")
		if c == nil || c.State.Terminated == nil || c.State.Terminated.Reason != "OOMKilled" || c.State.Terminated.ExitCode != 137 {
			t.Errorf("memory hog: %s, want OOMKilled 137", hog.summary())
		}
	})

	t.Run("systemctl stop leaves pods", func(t *testing.T) {
		_, id, _ := strings.Cut(gu.container("main").ContainerID, "://")
		procs := n.Cgroupfs("pids", filepath.Join(podSlice(gu), "rtshimd-"+id+".scope", "cgroup.procs"))
		pids, err := os.ReadFile(procs)
		if err != nil || len(bytes.TrimSpace(pids)) == 0 {
			t.Fatalf("processes of guaranteed's container: %q %v", pids, err)
		}
		n.MustExec("systemctl", "stop", "rtshimd")
		if got := n.Unit("rtshimd", "ActiveState")["ActiveState"]; got != "inactive" {
			t.Errorf("rtshimd after stop: %s", got)
		}
		if after, err := os.ReadFile(procs); err != nil || !bytes.Equal(after, pids) {
			t.Errorf("container processes after systemctl stop: %q (%v), were %q", after, err, pids)
		}
		n.MustExec("systemctl", "start", "rtshimd")
		st, err := rs.ContainerStatus(ctx, id, false)
		if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("guaranteed's container after the restart: %v %v", st.GetStatus().GetState(), err)
		}
		if p := k.WaitPod("guaranteed"+node, 10*time.Second, "still Running", running); p.container("main").RestartCount != 0 {
			t.Errorf("guaranteed restarted: %s", p.summary())
		}
	})

	t.Run("pod removal leaves no scope or slice", func(t *testing.T) {
		_, id, _ := strings.Cut(bu.container("main").ContainerID, "://")
		slice := podSlice(bu)
		k.RemoveStaticPod("burstable.yaml")
		waitFor(t, 90*time.Second, "burstable's slice and scopes to go", func() (bool, string) {
			if pods, err := k.Pods(); err != nil || pods["burstable"+node] != nil {
				return false, fmt.Sprint("still in /pods ", err)
			}
			for _, c := range []string{"memory", "cpu", "pids", "systemd"} {
				if _, err := os.Stat(n.Cgroupfs(c, slice)); err == nil {
					return false, "cgroup left: " + n.Cgroupfs(c, slice)
				}
			}
			out, _ := n.Exec(time.Minute, "systemctl", "list-units", "--all", "--no-legend", "rtshimd-"+id+".scope", filepath.Base(slice))
			return strings.TrimSpace(out) == "", "units: " + out
		})
	})
}

// statusReady is "name=ready" or "name=reason" for each handler row in Status verbose info.
func statusReady(st *runtimeapi.StatusResponse) string {
	rows, err := handlerRows(st)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, r := range rows {
		if r.Ready {
			out = append(out, r.Name+"=ready")
		} else {
			out = append(out, r.Name+"="+r.Reason)
		}
	}
	return strings.Join(out, "; ")
}

// podSlice is a pod's slice under kubelet's systemd layout, relative to the node's cgroup:
// kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice, the uid's dashes as
// underscores (systemd's unit name escaping).
func podSlice(p *kubePod) string {
	uid := strings.ReplaceAll(p.Metadata.UID, "-", "_")
	switch p.Status.QOSClass {
	case "Guaranteed":
		return filepath.Join("kubepods.slice", "kubepods-pod"+uid+".slice")
	default:
		q := strings.ToLower(p.Status.QOSClass)
		return filepath.Join("kubepods.slice", "kubepods-"+q+".slice", "kubepods-"+q+"-pod"+uid+".slice")
	}
}

// startNodeKubelet runs kubelet in the node as a systemd service with cgroupDriver: systemd,
// standalone (static pods from /etc/kubernetes/manifests). Its cleanup removes every pod,
// stops kubelet and removes what kubelet left to the runtime, then stops rtshimd.
func startNodeKubelet(t *testing.T, n *systemdNode) *Kubelet {
	t.Helper()
	k := &Kubelet{
		t: t, Dir: n.Path("/var/lib/kubelet"), Manifests: n.Path("/etc/kubernetes/manifests"),
		Root: "/var/lib/kubelet", NodeName: "rtshimd-systemd-node", Port: 10250, client: n.HTTPClient(),
	}
	// Idle keep-alive connections would hold the node's network namespace.
	t.Cleanup(k.client.CloseIdleConnections)
	n.WriteFile("/etc/kubernetes/kubelet.yaml", `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /etc/kubernetes/manifests
fileCheckFrequency: 1s
syncFrequency: 5s
containerRuntimeEndpoint: unix:///run/rtshimd/rtshimd.sock
cgroupDriver: systemd
failCgroupV1: false
failSwapOn: false
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
registerNode: false
`)
	if err := os.MkdirAll(k.Manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	n.WriteFile("/etc/crictl.yaml", "runtime-endpoint: unix:///run/rtshimd/rtshimd.sock\n")
	n.WriteFile("/etc/systemd/system/kubelet.service", fmt.Sprintf(`[Unit]
Description=kubelet
After=rtshimd.service
Wants=rtshimd.service

[Service]
ExecStart=%s --config /etc/kubernetes/kubelet.yaml --hostname-override %s --v=2
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
`, toolPath(t, "kubelet"), k.NodeName))
	n.MustExec("systemctl", "daemon-reload")
	n.MustExec("systemctl", "start", "kubelet")
	t.Cleanup(func() { stopNodeKubelet(t, n, k) })
	waitFor(t, 2*time.Minute, "kubelet in the node to serve /pods", func() (bool, string) {
		_, err := k.get("/pods")
		return err == nil, fmt.Sprint(err)
	})
	if _, err := k.get("/pods"); err != nil {
		out, _ := n.Exec(time.Minute, "journalctl", "--no-pager", "-n", "60", "-u", "kubelet")
		t.Fatalf("kubelet did not start:\n%s", out)
	}
	return k
}

// stopNodeKubelet tears the pods down through kubelet, then stops it and rtshimd. Pods
// kubelet leaves to the runtime's garbage (stopped sandboxes) are removed through the CRI
// first, as a node being drained and shut down would.
func stopNodeKubelet(t *testing.T, n *systemdNode, k *Kubelet) {
	entries, _ := os.ReadDir(k.Manifests)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(k.Manifests, e.Name()))
	}
	// kubelet removes a pod's slice after the pod left /pods, at its next housekeeping.
	waitFor(t, 90*time.Second, "kubelet to tear every pod and its slice down", func() (bool, string) {
		pods, err := k.Pods()
		if err != nil || len(pods) > 0 {
			return false, fmt.Sprint(len(pods), " pods ", err)
		}
		// The QoS slices (kubepods-burstable.slice, ...) are kubelet's and stay.
		left, _ := filepath.Glob(n.Cgroupfs("memory", "kubepods.slice/*/kubepods-*-pod*.slice"))
		more, _ := filepath.Glob(n.Cgroupfs("memory", "kubepods.slice/kubepods-pod*.slice"))
		return len(left)+len(more) == 0, fmt.Sprint("pod slices left: ", left, more)
	})
	if _, err := n.Exec(time.Minute, "systemctl", "stop", "kubelet"); err != nil {
		t.Error(err)
	}
	crictl := toolPath(t, "crictl")
	for _, args := range [][]string{{"rmp", "--all", "--force"}, {"pods", "-q"}} {
		out, err := n.Exec(2*time.Minute, append([]string{crictl}, args...)...)
		if err != nil {
			t.Error(err)
		} else if args[0] == "pods" && strings.TrimSpace(out) != "" {
			t.Errorf("pods left after crictl rmp: %s", out)
		}
	}
	if _, err := n.Exec(time.Minute, "systemctl", "stop", "rtshimd"); err != nil {
		t.Error(err)
	}
	// No scope of rtshimd's is left in the node's systemd.
	if out, err := n.Exec(time.Minute, "systemctl", "list-units", "--all", "--no-legend", "rtshimd-*.scope"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("scopes left in the node: %s %v", out, err)
	}
}
