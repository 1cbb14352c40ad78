//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// crashPoints are the steps of the lifecycle RPCs at which the suite kills the daemon
// (internal/failpoint, "<point>=crash"), each named "<rpc>/<step>", in the order the RPC
// reaches them.
var crashPoints = []string{
	"run-sandbox/recorded", "run-sandbox/namespaces", "run-sandbox/network",
	"run-sandbox/container-created", "run-sandbox/container-started", "run-sandbox/ready",
	"create-container/recorded", "create-container/rootfs", "create-container/runtime-created", "create-container/done",
	"start-container/runtime-started", "start-container/done",
	"stop-container/killed",
	"remove-container/runtime-deleted", "remove-container/rootfs-removed",
	"stop-sandbox/containers-stopped", "stop-sandbox/container-stopped", "stop-sandbox/network-down",
	"remove-sandbox/containers-removed", "remove-sandbox/container-deleted", "remove-sandbox/namespaces-unpinned", "remove-sandbox/dir-removed",
	"update-container/runtime-updated",
	"pull-image/blob-done", "pull-image/stored",
	"remove-image/hidden",
	"reload/registries-set",
}

// nodePoints are the steps that no handler takes part in (the image store, the config):
// they run once, with the first handler.
var nodePoints = []string{"pull-image/blob-done", "pull-image/stored", "remove-image/hidden", "reload/registries-set"}

// The daemon is killed (-9) at each step of RunPodSandbox, CreateContainer,
// StartContainer, StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox and
// UpdateContainerResources, on a pod network, and of PullImage, RemoveImage and a config
// reload. After each restart every pod and container is listed with the state its
// runtime says it is in, an image is listed whole or not at all, kubelet's retry of the
// call succeeds, and once everything is removed the node is as it was before: no mounts,
// records, run directories, processes, runtime state, container cgroups, veths, IPAM
// leases, storage containers, layers, images or pull temporaries left.
func TestCrashAtEveryStep(t *testing.T) { everyStep(t, false) }

// The same steps made to fail (an error at the point, the daemon running on), as a full
// disk, a runtime that errs or a timeout would: the call fails, every pod and container
// is listed as its runtime says, kubelet's retry succeeds, and once everything is removed
// the node is as before. Every point fails its call with the point's error: a point that
// stops failing fails the test.
func TestFailAtEveryStep(t *testing.T) { everyStep(t, true) }

// everyStep runs a crashCase at each of crashPoints on every suite handler, killing the
// daemon there or, with fail, making the step fail; after each, once every pod is removed,
// the node must be as it was before.
func everyStep(t *testing.T, fail bool) {
	what := "crash"
	if fail {
		what = "failure"
	}
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			nriSocket := filepath.Join(t.TempDir(), "nri.sock")
			plugins := t.TempDir()
			e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) {
				c.NRI.SocketPath, c.NRI.PluginPath, c.NRI.PluginConfigPath = nriSocket, plugins, filepath.Join(plugins, "conf.d")
			}))
			n := writeNetwork(t, e)
			points := filepath.Join(e.d.Dir, "failpoints")
			e.d.Env = append(e.d.Env, "RTSHIMD_FAILPOINTS_FILE="+points)
			e.d.Restart(false)
			e.nri = startNRILedger(t, nriSocket)
			// An image of its own for the image steps: a layer no other image has, so a
			// pull stores one.
			e.reg.Push(t, "test/busybox", "crash", ImageSpec{
				Layers: []Layer{busyboxLayer(t), toolsLayer(), {Files: []File{{Path: "/crash", Content: handler}}}},
				Config: ocispec.ImageConfig{Env: []string{"PATH=/bin"}},
			}, nil)
			before := e.nodeState(n, handler)
			for i, point := range crashPoints {
				if slices.Contains(nodePoints, point) && handler != suiteHandlers[0] {
					continue
				}
				c := &crashCase{e: e, t: t, handler: handler, point: point, file: points, seq: i, fail: fail}
				c.run()
				if t.Failed() {
					return // the node is not clean: later cases would fail for this one
				}
				// Monitors end a moment after their container is deleted.
				var after map[string][]string
				for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
					if after = e.nodeState(n, handler); maps2Equal(before, after) {
						break
					}
				}
				if !maps2Equal(before, after) {
					t.Fatalf("after the %s at %s, its retry and the removal of every pod, the node differs:\n%s", what, point, stateDiff(before, after))
				}
			}
		})
	}
}

type crashCase struct {
	fail    bool // an error at the point instead of a crash
	e       *containerEnv
	t       *testing.T
	handler string
	point   string
	file    string
	seq     int
	image   string // the image of the image steps
	config  string // the config file as the case found it
}

func (c *crashCase) run() {
	t, e, d := c.t, c.e, c.e.d
	ctx := ctxT(t)
	rpc, _, _ := strings.Cut(c.point, "/")
	name := fmt.Sprintf("crash-%d", c.seq)

	// What the call needs to exist first, made without failpoints.
	var podID, ctrID string
	// A pod sharing its PID namespace has a sandbox container on every handler (runc's
	// pods otherwise have none): the steps about it need one.
	pid := runtimeapi.NamespaceMode_CONTAINER
	if strings.Contains(c.point, "sandbox/container-") {
		pid = runtimeapi.NamespaceMode_POD
	}
	podCfg := podConfig(name, pid)
	podCfg.LogDirectory = filepath.Join(e.logs, name)
	ctrCfg := e.ctrConfig("sleep", "sleep", "100000")
	ctrCfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}
	image := e.reg.Ref("test/busybox", "crash")
	config := readConfigFile(t, d)
	c.image, c.config = image, config
	// The same config with the test registry blocked.
	if len(d.Cfg.Image.Registries) == 0 || d.Cfg.Image.Registries[0].Location != e.reg.Addr {
		t.Fatalf("the config's first registry is not the test's: %+v", d.Cfg.Image.Registries)
	}
	blockedCfg := *d.Cfg
	blockedCfg.Image.Registries = slices.Clone(d.Cfg.Image.Registries)
	blockedCfg.Image.Registries[0].Blocked = true
	blocked := configTOML(t, &blockedCfg)
	if rpc != "run-sandbox" && !slices.Contains(nodePoints, c.point) {
		podID, _ = e.podWith(podCfg, c.handler)
	}
	switch rpc {
	case "start-container":
		id, err := d.RS.CreateContainer(ctx, podID, ctrCfg, podCfg)
		if err != nil {
			t.Fatal(err)
		}
		ctrID = id
	case "stop-container", "remove-container", "stop-sandbox", "remove-sandbox", "update-container":
		ctrID = e.run(podID, podCfg, ctrCfg)
	case "remove-image":
		if _, err := d.IS.PullImage(ctx, imgSpec(image), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	switch rpc {
	case "remove-container":
		if err := d.RS.StopContainer(ctx, ctrID, 0); err != nil {
			t.Fatal(err)
		}
	case "remove-sandbox":
		if err := d.RS.StopPodSandbox(ctx, podID); err != nil {
			t.Fatal(err)
		}
	}

	// The call, with the daemon set to die (or fail once) at the point.
	how := "crash"
	if c.fail {
		how = "1"
	}
	if err := os.WriteFile(c.file, []byte(c.point+"="+how), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	reloads := reloadStatus(t, d.RS).Last
	switch rpc {
	case "update-container":
		err = d.RS.UpdateContainerResources(ctx, ctrID, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 96 << 20}})
	case "pull-image":
		_, err = d.IS.PullImage(ctx, imgSpec(image), nil, nil)
	case "remove-image":
		err = d.IS.RemoveImage(ctx, imgSpec(image))
	case "reload":
		// The config file changes (the test registry blocked); the daemon reloads it.
		writeConfigFile(t, d, blocked)
		if c.fail {
			err = c.awaitReload(reloads, "file")
		}
	case "run-sandbox":
		_, err = d.RS.RunPodSandbox(ctx, podCfg, c.handler)
	case "create-container":
		_, err = d.RS.CreateContainer(ctx, podID, ctrCfg, podCfg)
	case "start-container":
		err = d.RS.StartContainer(ctx, ctrID)
	case "stop-container":
		err = d.RS.StopContainer(ctx, ctrID, 0)
	case "remove-container":
		err = d.RS.RemoveContainer(ctx, ctrID)
	case "stop-sandbox":
		err = d.RS.StopPodSandbox(ctx, podID)
	case "remove-sandbox":
		err = d.RS.RemovePodSandbox(ctx, podID)
	}
	if c.fail {
		if err := os.Remove(c.file); err != nil {
			t.Fatal(err)
		}
		if err == nil || !strings.Contains(err.Error(), "failpoint "+c.point) {
			t.Errorf("%s: the call returned %v, want the point's error", c.point, err)
		}
		c.afterFailure(ctrID, image)
		switch c.point {
		case "run-sandbox/ready":
			// Made whole, then failed: undone, as a failure at any earlier step.
			if pods := c.podsNamed(name); len(pods) != 0 {
				t.Errorf("%s: the failed pod is listed: %v", c.point, pods)
			}
		case "create-container/done":
			if ctrs := c.containersNamed(podID, "sleep"); len(ctrs) != 0 {
				t.Errorf("%s: the failed container is listed: %v", c.point, ctrs)
			}
		}
		if c.point == "stop-container/killed" {
			// Killed, then the call failed: the exit reaches the daemon from the monitor.
			waitFor(t, 15*time.Second, c.point+": the killed container to be EXITED", func() (bool, string) {
				st := c.containerState(ctrID)
				return st == runtimeapi.ContainerState_CONTAINER_EXITED, st.String()
			})
		}
		if c.point == "start-container/runtime-started" || c.point == "start-container/done" {
			// Started by the runtime, then the call failed: killed, and its exit recorded.
			waitFor(t, 15*time.Second, c.point+": the container whose start failed to be EXITED", func() (bool, string) {
				st := c.containerState(ctrID)
				return st == runtimeapi.ContainerState_CONTAINER_EXITED, st.String()
			})
		}
		c.checkTruth()
		c.retry(ctx, name, podID, ctrID, podCfg, ctrCfg)
		return
	}
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the daemon did not crash (the call returned %v)", c.point, err)
	}
	if err == nil && rpc != "reload" {
		t.Errorf("%s: the call succeeded although the daemon crashed in it", c.point)
	}
	if err := os.Remove(c.file); err != nil {
		t.Fatal(err)
	}
	d.Kill() // reaps the crashed process
	if !strings.Contains(d.Log(), "failpoint "+c.point+": crashing") {
		t.Fatalf("%s: the daemon died, but not at the point:\n%s", c.point, lastLines(d.Log(), 30))
	}
	d.Start()
	c.checkTruth()

	// Where the crash came after the step's record was written, its effect is kept.
	switch c.point {
	case "run-sandbox/ready":
		if pods := c.podsNamed(name); len(pods) != 1 || pods[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("%s: the pod recorded ready is %v after the restart, want one READY", c.point, pods)
		}
	case "create-container/done":
		if ctrs := c.containersNamed(podID, "sleep"); len(ctrs) != 1 || ctrs[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Errorf("%s: the container recorded created is %v after the restart, want one CREATED", c.point, ctrs)
		}
	case "start-container/runtime-started", "start-container/done":
		// Started by the runtime: running, whether or not the record said so.
		c.expectContainer(ctrID, runtimeapi.ContainerState_CONTAINER_RUNNING)
	case "stop-container/killed":
		// Killed before the crash: its monitor records the exit, which recovery finds.
		waitFor(t, 15*time.Second, c.point+": the killed container to be EXITED", func() (bool, string) {
			st := c.containerState(ctrID)
			return st == runtimeapi.ContainerState_CONTAINER_EXITED, st.String()
		})
	case "pull-image/stored":
		c.expectImage(image, true)
	case "pull-image/blob-done", "remove-image/hidden":
		// Half pulled, or hidden and half deleted: not listed, and its leftovers are
		// collected at the restart (the node check after the retry sees no layer left).
		c.expectImage(image, false)
	case "reload/registries-set":
		// The restart serves the file as it is: the registry is blocked.
		if _, err := d.IS.PullImage(ctx, imgSpec(image), nil, nil); err == nil || !strings.Contains(err.Error(), "blocked") {
			t.Errorf("%s: a pull from the registry the file blocks, after the restart: %v", c.point, err)
		}
	}

	c.retry(ctx, name, podID, ctrID, podCfg, ctrCfg)
}

// retry is kubelet's retry of the call that crashed or failed, then kubelet's end of
// every pod: stop, then remove.
func (c *crashCase) retry(ctx context.Context, name, podID, ctrID string, podCfg *runtimeapi.PodSandboxConfig, ctrCfg *runtimeapi.ContainerConfig) {
	t, e, d := c.t, c.e, c.e.d
	image := c.image
	rpc, _, _ := strings.Cut(c.point, "/")
	switch rpc {
	case "run-sandbox":
		pods := c.podsNamed(name)
		switch {
		case len(pods) > 1:
			t.Errorf("%s: %d pods named %s after the restart", c.point, len(pods), name)
		case len(pods) == 1 && pods[0].State == runtimeapi.PodSandboxState_SANDBOX_READY:
			podID = pods[0].Id // kubelet's relist finds the pod ready and keeps it
		default:
			if len(pods) == 1 {
				// A pod not ready is stopped and made again, one attempt further.
				if err := d.RS.StopPodSandbox(ctx, pods[0].Id); err != nil {
					t.Errorf("%s: StopPodSandbox of the pod left not ready: %v", c.point, err)
				}
				podCfg.Metadata.Attempt++
			}
			id, err := d.RS.RunPodSandbox(ctx, podCfg, c.handler)
			if err != nil {
				t.Errorf("%s: RunPodSandbox again: %v", c.point, err)
				break
			}
			podID = id
		}
		if podID != "" {
			// The pod works: a container runs in it.
			c.expectContainer(e.run(podID, podCfg, e.ctrConfig("after", "sleep", "100000")), runtimeapi.ContainerState_CONTAINER_RUNNING)
		}
	case "create-container":
		ctrs := c.containersNamed(podID, "sleep")
		if len(ctrs) == 1 {
			if ctrs[0].State != runtimeapi.ContainerState_CONTAINER_CREATED {
				t.Errorf("%s: the container left by the crash is %s, want CREATED", c.point, ctrs[0].State)
			}
			ctrCfg.Metadata.Attempt++ // kubelet makes the next attempt
		} else if len(ctrs) > 1 {
			t.Errorf("%s: %d containers named sleep after the restart", c.point, len(ctrs))
		}
		c.expectContainer(e.run(podID, podCfg, ctrCfg), runtimeapi.ContainerState_CONTAINER_RUNNING)
	case "start-container":
		if c.fail {
			// Exited: kubelet makes the next attempt, which runs.
			ctrCfg.Metadata.Attempt++
			c.expectContainer(e.run(podID, podCfg, ctrCfg), runtimeapi.ContainerState_CONTAINER_RUNNING)
			break
		}
		st := c.containerState(ctrID)
		if st == runtimeapi.ContainerState_CONTAINER_CREATED {
			if err := d.RS.StartContainer(ctx, ctrID); err != nil {
				t.Errorf("%s: StartContainer again: %v", c.point, err)
			}
		} else if st != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("%s: container is %s after the restart, want CREATED or RUNNING", c.point, st)
		}
		c.expectContainer(ctrID, runtimeapi.ContainerState_CONTAINER_RUNNING)
	case "stop-container":
		if err := d.RS.StopContainer(ctx, ctrID, 0); err != nil {
			t.Errorf("%s: StopContainer again: %v", c.point, err)
		}
		c.expectContainer(ctrID, runtimeapi.ContainerState_CONTAINER_EXITED)
	case "remove-container":
		if err := d.RS.RemoveContainer(ctx, ctrID); err != nil {
			t.Errorf("%s: RemoveContainer again: %v", c.point, err)
		}
		if len(c.containersNamed(podID, "sleep")) != 0 {
			t.Errorf("%s: the container is still listed after its removal", c.point)
		}
	case "stop-sandbox":
		if err := d.RS.StopPodSandbox(ctx, podID); err != nil {
			t.Errorf("%s: StopPodSandbox again: %v", c.point, err)
		}
		if pods := c.podsNamed(name); len(pods) != 1 || pods[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Errorf("%s: after StopPodSandbox the pod is %v, want one NOTREADY", c.point, pods)
		}
		c.expectContainer(ctrID, runtimeapi.ContainerState_CONTAINER_EXITED)
	case "remove-sandbox":
		if err := d.RS.RemovePodSandbox(ctx, podID); err != nil {
			t.Errorf("%s: RemovePodSandbox again: %v", c.point, err)
		}
		if pods := c.podsNamed(name); len(pods) != 0 {
			t.Errorf("%s: the pod is still listed after its removal", c.point)
		}
	case "update-container":
		err := d.RS.UpdateContainerResources(ctx, ctrID, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 96 << 20}})
		if err != nil {
			t.Errorf("%s: UpdateContainerResources again: %v", c.point, err)
		}
		c.expectMemoryLimit(ctrID, 96<<20)
	case "pull-image":
		if _, err := d.IS.PullImage(ctx, imgSpec(image), nil, nil); err != nil {
			t.Errorf("%s: PullImage again: %v", c.point, err)
		}
		c.expectImage(image, true)
		if err := d.IS.RemoveImage(ctx, imgSpec(image)); err != nil {
			t.Errorf("%s: RemoveImage: %v", c.point, err)
		}
	case "remove-image":
		if err := d.IS.RemoveImage(ctx, imgSpec(image)); err != nil {
			t.Errorf("%s: RemoveImage again: %v", c.point, err)
		}
		c.expectImage(image, false)
	case "reload":
		if c.fail {
			// The operator's retry: `rtshimd reload`, which now applies the file.
			last := reloadStatus(t, d.RS).Last
			if out, err := rtshimdReload(t, d); err != nil {
				t.Errorf("%s: rtshimd reload: %v\n%s", c.point, err, out)
			} else if err := c.awaitReload(last, "signal"); err != nil {
				t.Errorf("%s: the reload retried: %v", c.point, err)
			}
			if _, err := d.IS.PullImage(ctx, imgSpec(image), nil, nil); err == nil || !strings.Contains(err.Error(), "blocked") {
				t.Errorf("%s: a pull from the registry the reloaded file blocks: %v", c.point, err)
			}
		}
		// The file as it was, for the next cases.
		last := reloadStatus(t, d.RS).Last
		writeConfigFile(t, d, c.config)
		if err := c.awaitReload(last, "file"); err != nil {
			t.Errorf("%s: the reload of the config as it was: %v", c.point, err)
		}
	}
	c.checkTruth()

	// kubelet's end of the pod: stop, then remove.
	pods, err := d.RS.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if err := d.RS.StopPodSandbox(ctx, p.Id); err != nil {
			t.Errorf("%s: StopPodSandbox %s: %v", c.point, p.Id[:12], err)
		}
		if err := d.RS.RemovePodSandbox(ctx, p.Id); err != nil {
			t.Errorf("%s: RemovePodSandbox %s: %v", c.point, p.Id[:12], err)
		}
	}
}

// checkTruth compares every listed pod and container with what its runtime says.
func (c *crashCase) checkTruth() {
	t, d := c.t, c.e.d
	ctx := ctxT(t)
	pods, err := d.RS.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		resp, err := d.RS.PodSandboxStatus(ctx, p.Id, true)
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Metadata struct {
				Infra bool   `json:"infra"`
				NetNS string `json:"netns"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal([]byte(resp.Info["info"]), &info)
		// A ready pod holds its network namespace and an address in it, and its sandbox
		// container runs where the handler has one.
		if rs := c.runtimeState(p.Id); info.Metadata.Infra && rs != "running" {
			t.Errorf("%s: pod %s is READY, its sandbox container is %q", c.point, p.Id[:12], rs)
		}
		if ns := info.Metadata.NetNS; ns == "" || !isNsfs(ns) {
			t.Errorf("%s: pod %s is READY, its network namespace %q is not pinned", c.point, p.Id[:12], ns)
		}
		if resp.Status.GetNetwork().GetIp() == "" {
			t.Errorf("%s: pod %s is READY without an IP", c.point, p.Id[:12])
		}
	}
	ctrs, err := d.RS.ListContainers(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range ctrs {
		rs := c.runtimeState(ct.Id)
		want := map[runtimeapi.ContainerState][]string{
			runtimeapi.ContainerState_CONTAINER_CREATED: {"created"},
			runtimeapi.ContainerState_CONTAINER_RUNNING: {"running"},
			runtimeapi.ContainerState_CONTAINER_EXITED:  {"stopped", ""},
		}[ct.State]
		if !slices.Contains(want, rs) {
			t.Errorf("%s: container %s is %s, its runtime says %q", c.point, ct.Id[:12], ct.State, rs)
		}
	}
}

// runtimeState is the status the handler's runtime gives a container, "" if it has none.
func (c *crashCase) runtimeState(id string) string {
	bin, root := runtimeOf(c.e.d, c.handler)
	out, err := exec.Command(bin, "--root", root, "state", id).Output()
	if err != nil {
		return ""
	}
	var st struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(out, &st)
	return st.Status
}

func (c *crashCase) podsNamed(name string) []*runtimeapi.PodSandbox {
	pods, err := c.e.d.RS.ListPodSandbox(ctxT(c.t), nil)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []*runtimeapi.PodSandbox
	for _, p := range pods {
		if p.Metadata.Name == name {
			out = append(out, p)
		}
	}
	return out
}

func (c *crashCase) containersNamed(podID, name string) []*runtimeapi.Container {
	ctrs, err := c.e.d.RS.ListContainers(ctxT(c.t), &runtimeapi.ContainerFilter{PodSandboxId: podID})
	if err != nil {
		c.t.Fatal(err)
	}
	var out []*runtimeapi.Container
	for _, ct := range ctrs {
		if ct.Metadata.Name == name {
			out = append(out, ct)
		}
	}
	return out
}

func (c *crashCase) containerState(id string) runtimeapi.ContainerState {
	resp, err := c.e.d.RS.ContainerStatus(ctxT(c.t), id, false)
	if err != nil {
		c.t.Fatalf("%s: ContainerStatus: %v", c.point, err)
	}
	return resp.Status.State
}

func (c *crashCase) expectContainer(id string, want runtimeapi.ContainerState) {
	if got := c.containerState(id); got != want {
		c.t.Errorf("%s: container %s is %s, want %s", c.point, id[:12], got, want)
	}
}

// podWith runs a pod of the given config.
func (e *containerEnv) podWith(cfg *runtimeapi.PodSandboxConfig, handler string) (string, *runtimeapi.PodSandboxConfig) {
	e.t.Helper()
	id, err := e.d.RS.RunPodSandbox(ctxT(e.t), cfg, handler)
	if err != nil {
		e.t.Fatalf("RunPodSandbox(%s): %v", handler, err)
	}
	return id, cfg
}

// removePod stops and removes pod id, failing the test on an error.
func (e *containerEnv) removePod(id string) {
	e.t.Helper()
	if err := e.d.RS.StopPodSandbox(ctxT(e.t), id); err != nil {
		e.t.Fatalf("StopPodSandbox(%s): %v", id[:12], err)
	}
	if err := e.d.RS.RemovePodSandbox(ctxT(e.t), id); err != nil {
		e.t.Fatalf("RemovePodSandbox(%s): %v", id[:12], err)
	}
}

// nodeState is what the daemon's pods hold on the node, by kind, for comparing the node
// before and after.
func (e *containerEnv) nodeState(n testNet, handlers ...string) map[string][]string {
	d := e.d
	s := map[string][]string{}
	for _, m := range mountsUnder(d.Dir) {
		if !isStoreMount(d, m) {
			s["mounts"] = append(s["mounts"], m)
		}
	}
	for _, dir := range []string{"state/sandboxes", "state/containers"} {
		s[dir] = append(s[dir], stateEntries(filepath.Join(d.Dir, dir))...)
	}
	for _, dir := range []string{"run/sandboxes", "run/containers"} {
		entries, _ := os.ReadDir(filepath.Join(d.Dir, dir))
		for _, en := range entries {
			s[dir] = append(s[dir], en.Name())
		}
	}
	daemon := 0
	if d.cmd != nil {
		daemon = d.cmd.Process.Pid
	}
	s["processes"] = processesMentioning(d.Dir, daemon)
	for _, handler := range handlers {
		bin, root := runtimeOf(d, handler)
		if _, err := os.Stat(root); err != nil {
			continue // the runtime never ran a container here
		}
		out, err := exec.Command(bin, "--root", root, "list", "--format", "json").Output()
		var ctrs []struct {
			ID     string `json:"id"`
			Bundle string `json:"bundle"`
		}
		if err == nil {
			err = json.Unmarshal(out, &ctrs)
		}
		if err != nil {
			// runc list fails on a container whose state it cannot load: a half-made one.
			s["runtime list errors"] = append(s["runtime list errors"], handler+": "+err.Error())
		}
		for _, c := range ctrs {
			if strings.HasPrefix(c.Bundle, d.Dir) { // the shim's root is shared by every daemon
				s["runtime state"] = append(s["runtime state"], handler+":"+c.ID)
			}
		}
	}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupRoot)
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		roots = []string{"/sys/fs/cgroup/" + cgroupRoot} // a unified host
	}
	for _, root := range roots {
		for _, dir := range cgroupDirsBottomUp(root) {
			if strings.Count(strings.TrimPrefix(dir, root), "/") > 1 {
				s["container cgroups"] = append(s["container cgroups"], dir)
			}
		}
	}
	s["veths"] = []string{fmt.Sprint(n.veths())}
	s["ipam leases"] = n.allocations()
	records := func(kind, key string) {
		for _, raw := range storageRecords(d.t, d.State, d.RunRoot, kind) {
			var r struct {
				ID    string   `json:"id"`
				Names []string `json:"names"`
			}
			_ = json.Unmarshal(raw, &r)
			s[key] = append(s[key], strings.TrimSpace(r.ID+" "+strings.Join(r.Names, ",")))
		}
	}
	records("containers", "storage containers")
	s["writable layers"] = writableLayers(d.State)
	// The image store: layers and images by ID (with their names), what pulls left in
	// the temporary dir, and the registries drop-ins a reload renders (one is served).
	records("layers", "storage layers")
	records("images", "storage images")
	tmp, _ := os.ReadDir(filepath.Join(d.State, "tmp"))
	for _, en := range tmp {
		s["pull temporaries"] = append(s["pull temporaries"], en.Name())
	}
	dropins, _ := filepath.Glob(filepath.Join(d.RunRoot, "registries.conf.d*"))
	s["registries drop-ins"] = []string{fmt.Sprint(len(dropins))}
	if e.nri != nil {
		s["held by an NRI plugin"] = e.nri.held()
	}
	for k := range s {
		slices.Sort(s[k])
	}
	return s
}

func maps2Equal(a, b map[string][]string) bool {
	for k := range a {
		if !slices.Equal(a[k], b[k]) {
			return false
		}
	}
	for k := range b {
		if !slices.Equal(a[k], b[k]) {
			return false
		}
	}
	return true
}

func stateDiff(before, after map[string][]string) string {
	var b strings.Builder
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	for k := range keys {
		if !slices.Equal(before[k], after[k]) {
			fmt.Fprintf(&b, "  %s: before %v, after %v\n", k, before[k], after[k])
		}
	}
	return b.String()
}

// runtimeOf is the runtime binary and state root that hold a handler's containers: the
// runc shim keeps runc's state under containerd's root, by namespace.
func runtimeOf(d *Daemon, handler string) (bin, root string) {
	switch handler {
	case "runsc":
		return "/usr/local/bin/runsc", filepath.Join(d.RunRoot, "runsc")
	case "runsc-debian":
		return "/usr/bin/runsc", filepath.Join(d.RunRoot, "runsc-debian")
	case "runc-shim":
		return "/usr/sbin/runc", "/run/containerd/runc/rtshimd"
	}
	return "/usr/sbin/runc", filepath.Join(d.RunRoot, "runc")
}

// afterFailure checks what a step that failed left, where more than "nothing changed"
// must hold: limits set back, an image whole or hidden, registries set back.
func (c *crashCase) afterFailure(ctrID, image string) {
	t, d := c.t, c.e.d
	ctx := ctxT(t)
	switch c.point {
	case "update-container/runtime-updated":
		// The runtime applied the new limits, their record failed: set back, and
		// reported so.
		c.expectMemoryLimit(ctrID, 64<<20)
	case "pull-image/stored":
		c.expectImage(image, true)
	case "pull-image/blob-done", "remove-image/hidden":
		c.expectImage(image, false)
	case "reload/registries-set":
		// Refused: the registries served are the old ones, which do not block the
		// registry (a pull from it works, and the image is removed again).
		if _, err := d.IS.PullImage(ctx, imgSpec(image), nil, nil); err != nil {
			t.Errorf("%s: after the refused reload a pull from the registry the old config allows: %v", c.point, err)
		} else if err := d.IS.RemoveImage(ctx, imgSpec(image)); err != nil {
			t.Errorf("%s: RemoveImage: %v", c.point, err)
		}
	}
}

// awaitReload waits for the reload after since, by trigger, and returns its error if it
// was refused.
func (c *crashCase) awaitReload(since *reloadAttempt, trigger string) error {
	var last *reloadAttempt
	waitFor(c.t, 30*time.Second, c.point+": a "+trigger+" reload", func() (bool, string) {
		last = reloadStatus(c.t, c.e.d.RS).Last
		return last != nil && (since == nil || last.Seq > since.Seq) && last.Trigger == trigger, fmt.Sprintf("%+v", last)
	})
	if last.Result != "applied" {
		return fmt.Errorf("reload %s: %s", last.Result, last.Error)
	}
	return nil
}

// expectImage checks that ImageStatus finds image (whole) or does not.
func (c *crashCase) expectImage(image string, present bool) {
	resp, err := c.e.d.IS.ImageStatus(ctxT(c.t), imgSpec(image), false)
	if err != nil {
		c.t.Fatalf("%s: ImageStatus: %v", c.point, err)
	}
	if got := resp.GetImage() != nil; got != present {
		c.t.Errorf("%s: image %s listed = %v, want %v", c.point, image, got, present)
	}
}

// expectMemoryLimit checks the limit ContainerStatus reports and, where the container's
// own cgroup is what it reads (runc's), the one the kernel enforces.
func (c *crashCase) expectMemoryLimit(ctrID string, want int64) {
	t := c.t
	resp, err := c.e.d.RS.ContainerStatus(ctxT(t), ctrID, false)
	if err != nil {
		t.Fatalf("%s: ContainerStatus: %v", c.point, err)
	}
	if got := resp.GetStatus().GetResources().GetLinux().GetMemoryLimitInBytes(); got != want {
		t.Errorf("%s: ContainerStatus reports a memory limit of %d, want %d", c.point, got, want)
	}
	if c.handler == "runsc" {
		return // gVisor's cgroupfs is its own
	}
	if got, _ := c.e.exec(ctrID, "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"); got != fmt.Sprint(want) {
		t.Errorf("%s: the container's cgroup has a memory limit of %s, want %d", c.point, got, want)
	}
}

// nriLedger is an NRI plugin that keeps what a resource plugin keeps: the pods and
// containers it was told of and not yet told are gone (Synchronize starts it afresh, as
// at each reconnection after a restart). After each case of the failpoint matrix, with
// every pod removed, it must be empty: a plugin that heard of a container whose creation
// then failed must also hear of its removal.
type nriLedger struct {
	mu   sync.Mutex
	live map[string]bool // "pod:<id>", "container:<id>"
}

func (l *nriLedger) set(key string, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		l.live[key] = true
	} else {
		delete(l.live, key)
	}
}

func (l *nriLedger) held() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k := range l.live {
		out = append(out, k)
	}
	return out
}

func (l *nriLedger) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live = map[string]bool{}
	for _, p := range pods {
		l.live["pod:"+p.GetId()] = true
	}
	for _, c := range ctrs {
		l.live["container:"+c.GetId()] = true
	}
	return nil, nil
}

func (l *nriLedger) RunPodSandbox(_ context.Context, p *api.PodSandbox) error {
	l.set("pod:"+p.GetId(), true)
	return nil
}

func (l *nriLedger) RemovePodSandbox(_ context.Context, p *api.PodSandbox) error {
	l.set("pod:"+p.GetId(), false)
	return nil
}

func (l *nriLedger) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	l.set("container:"+c.GetId(), true)
	return nil, nil, nil
}

func (l *nriLedger) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	l.set("container:"+c.GetId(), false)
	return nil
}

// startNRILedger connects a ledger to the daemon's NRI socket, and again whenever the
// connection ends (the daemon was killed), until the test ends.
func startNRILedger(t *testing.T, socket string) *nriLedger {
	l := &nriLedger{live: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			closed := make(chan struct{})
			s, err := stub.New(l, stub.WithPluginName("ledger"), stub.WithPluginIdx("90"), stub.WithSocketPath(socket),
				stub.WithOnClose(func() { close(closed) }), stub.WithLogger(quietNRILog{}))
			if err == nil && s.Start(ctx) == nil {
				select {
				case <-closed:
				case <-ctx.Done():
				}
				s.Stop()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// quietNRILog keeps the stub's reconnection chatter out of the test output.
type quietNRILog struct{}

func (quietNRILog) Debugf(context.Context, string, ...any) {}
func (quietNRILog) Infof(context.Context, string, ...any)  {}
func (quietNRILog) Warnf(context.Context, string, ...any)  {}
func (quietNRILog) Errorf(context.Context, string, ...any) {}
