//go:build integration

package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/monitor"
)

// A daemon restart, clean or kill -9, loses no pod: every sandbox is listed with its true
// state, sandbox containers keep running under their monitors, exits that happened while
// the daemon was down are noticed, and half-created sandboxes are cleaned up.
func TestRestartKeepsSandboxes(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	type pod struct {
		name, handler string
		pid           runtimeapi.NamespaceMode
		id            string
		info          sandboxInfo
	}
	pods := []*pod{
		{name: "restart-runc", handler: "runc", pid: runtimeapi.NamespaceMode_CONTAINER},
		{name: "restart-runc-pid", handler: "runc", pid: runtimeapi.NamespaceMode_POD},
		{name: "restart-runsc", handler: "runsc", pid: runtimeapi.NamespaceMode_CONTAINER},
		{name: "restart-shim", handler: "runc-shim", pid: runtimeapi.NamespaceMode_CONTAINER},
	}
	for _, p := range pods {
		id, err := d.RS.RunPodSandbox(ctx, podConfig(p.name, p.pid), p.handler)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		p.id = id
		resp, err := d.RS.PodSandboxStatus(ctx, id, true)
		if err != nil {
			t.Fatal(err)
		}
		p.info = decodeInfo(t, resp.Info)
	}

	assertReady := func(when string) {
		t.Helper()
		for _, p := range pods {
			resp, err := d.RS.PodSandboxStatus(ctx, p.id, true)
			if err != nil {
				t.Fatalf("%s: %s: %v", when, p.name, err)
			}
			if resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Errorf("%s: %s is %v, want READY", when, p.name, resp.Status.State)
			}
			if got := decodeInfo(t, resp.Info).Status.InfraPid; got != p.info.Status.InfraPid {
				t.Errorf("%s: %s infra pid %d, was %d", when, p.name, got, p.info.Status.InfraPid)
			}
			if p.info.Metadata.Infra && !processAlive(p.info.Status.InfraPid) {
				t.Errorf("%s: %s infra pid %d is gone", when, p.name, p.info.Status.InfraPid)
			}
			if !isNsfs(p.info.Metadata.NetNS) {
				t.Errorf("%s: %s netns unpinned", when, p.name)
			}
		}
		items, err := d.RS.ListPodSandbox(ctx, nil)
		if err != nil || len(items) != len(pods) {
			t.Errorf("%s: listed %d sandboxes (%v), want %d", when, len(items), err, len(pods))
		}
	}

	d.Restart(false)
	assertReady("after a clean restart")
	d.Restart(true)
	assertReady("after kill -9")

	// The runsc infra dies while the daemon is down: the next daemon reports NOTREADY.
	runscPod := pods[2]
	d.Kill()
	if err := syscall.Kill(runscPod.info.Status.InfraPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "runsc infra to exit", func() (bool, string) {
		_, err := os.Stat(filepath.Join(runscPod.info.Metadata.BundleDir, "exit.json"))
		return err == nil, "no exit.json from the monitor"
	})
	d.Start()
	resp, err := d.RS.PodSandboxStatus(ctx, runscPod.id, false)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("runsc pod whose infra died while the daemon was down: %v, want NOTREADY", resp.Status.State)
	}

	// A monitor adopted from the previous daemon still reports: kill the runc infra now.
	runcPod := pods[1]
	if err := syscall.Kill(runcPod.info.Status.InfraPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the restarted daemon to notice the infra exit", func() (bool, string) {
		resp, err := d.RS.PodSandboxStatus(ctx, runcPod.id, false)
		return err == nil && resp.Status.State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY, resp.GetStatus().GetState().String()
	})

	// A pod without infra stays READY throughout.
	resp, err = d.RS.PodSandboxStatus(ctx, pods[0].id, false)
	if err != nil || resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("runc pod without infra: %v %v", resp.GetStatus().GetState(), err)
	}
	// Everything removes cleanly (the harness then checks nothing is left).
	for _, p := range pods {
		if err := d.RS.RemovePodSandbox(ctx, p.id); err != nil {
			t.Errorf("remove %s: %v", p.name, err)
		}
	}
	removeTestCgroups(t)
}

// A sandbox whose RunPodSandbox never finished (the daemon died between its first record
// and its last) is undone at the next start: no record, mounts, infra or monitor remain.
func TestRestartCleansHalfCreatedSandbox(t *testing.T) {
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			d := newDaemon(t)
			ctx := ctxT(t)
			id, err := d.RS.RunPodSandbox(ctx, podConfig("half-"+handler, runtimeapi.NamespaceMode_POD), handler)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := d.RS.PodSandboxStatus(ctx, id, true)
			if err != nil {
				t.Fatal(err)
			}
			info := decodeInfo(t, resp.Info)
			d.Kill()
			// What the record says when the daemon dies after making the namespaces and the
			// infra but before the final status write.
			editRecord(t, d, "sandboxes", id, func(_, _ []byte) ([]byte, []byte) {
				return nil, []byte(`{"state":"creating"}`)
			})
			d.Start()
			items, err := d.RS.ListPodSandbox(ctx, nil)
			if err != nil || len(items) != 0 {
				t.Errorf("half-created sandbox listed after restart: %d items, %v", len(items), err)
			}
			if processAlive(info.Status.InfraPid) {
				waitFor(t, 15*time.Second, "infra of the half-created sandbox to end", func() (bool, string) {
					return !processAlive(info.Status.InfraPid), "still running"
				})
			}
			d.assertNothingLeft()
			removeTestCgroups(t)
		})
	}
}

// A container whose record says created although it started (the caller of StartContainer
// went away, or the daemon died before writing the record) is found running at recovery,
// not reported CREATED for kubelet to start a second copy; one that has exited since is
// reported exited with its code.
func TestCreatedRecordOfAStartedContainer(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("started-"+handler, handler)
			running := e.run(podID, pod, e.ctrConfig("running", "sleep", "1000"))
			exits := e.run(podID, pod, e.ctrConfig("exits", "sh", "-c", "sleep 2; exit 3"))
			p := runningProcess(t, e.d, exits)
			e.d.Kill()
			for _, id := range []string{running, exits} {
				editRecord(t, e.d, "containers", id, func(_, b []byte) ([]byte, []byte) {
					var st map[string]any
					if err := json.Unmarshal(b, &st); err != nil {
						t.Fatal(err)
					}
					st["state"] = "created"
					delete(st, "started_at")
					b, _ = json.Marshal(st)
					return nil, b
				})
			}
			p.waitExitedWhileDown(t) // "exits" ends while the daemon is down
			e.d.Start()
			resp, err := e.d.RS.ContainerStatus(ctx, running, false)
			if err != nil {
				t.Fatal(err)
			}
			if s := resp.Status; s.State != runtimeapi.ContainerState_CONTAINER_RUNNING || s.StartedAt == 0 {
				t.Errorf("started container recorded as created: state %s, started_at %d after recovery", s.State, s.StartedAt)
			}
			if out, _ := e.exec(running, "echo", "alive"); out != "alive" {
				t.Errorf("exec after recovery: %q", out)
			}
			if st := e.waitExit(exits); st.ExitCode != 3 {
				t.Errorf("container that ran and exited while the daemon was down: exit %d (%s), want 3", st.ExitCode, st.Reason)
			}
			if err := e.d.RS.StopPodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A container created on a sandbox runtime and never started, whose sandbox ended while
// the daemon was down (a daemon killed inside StopPodSandbox leaves such a record
// "created"): the runtime reports it stopped, and its monitor, which follows it only after
// a start, would wait for one forever. After the restart it is recorded exited (never
// started), its monitor is gone, and the pod stops and is removed with nothing left.
func TestNeverStartedContainerOfAnEndedSandbox(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	podID, pod := e.pod("ended-sandbox", "runsc")
	resp, err := e.d.RS.CreateContainer(ctx, podID, e.ctrConfig("never", "sleep", "1000"), pod)
	if err != nil {
		t.Fatal(err)
	}
	id := resp
	monPid := monitorPid(t, e.d, id)
	if monPid == 0 {
		t.Fatal("no monitor pid in ContainerStatus verbose")
	}
	e.d.Kill()
	// End the sandbox as a StopPodSandbox cut short by the kill would have.
	b := record(t, e.d, "sandboxes", podID).Status
	var sst struct {
		InfraPid int `json:"infra_pid"`
	}
	if err := json.Unmarshal(b, &sst); err != nil || sst.InfraPid == 0 {
		t.Fatalf("sandbox record without its infra pid (%v): %s", err, b)
	}
	if err := syscall.Kill(sst.InfraPid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the sandbox (pid %d): %v", sst.InfraPid, err)
	}
	e.d.Start()
	waitFor(t, 10*time.Second, "the container to be recorded exited", func() (bool, string) {
		st, err := e.d.RS.ContainerStatus(ctx, id, false)
		if err != nil {
			return false, err.Error()
		}
		s := st.GetStatus()
		return s.State == runtimeapi.ContainerState_CONTAINER_EXITED && strings.Contains(s.Message, "never started"), s.String()
	})
	waitFor(t, 10*time.Second, "the never-started container's monitor to end", func() (bool, string) {
		err := syscall.Kill(monPid, 0)
		return errors.Is(err, syscall.ESRCH), fmt.Sprintf("pid %d: %v", monPid, err)
	})
	if err := e.d.RS.StopPodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
}

// After a reboot the state root is all that is left: no process of the node, no mount,
// no cgroup, an empty run root (a tmpfs), and the kernel's boot ID is another. The next
// daemon reports the pod NOTREADY and its containers EXITED from its first answer (the
// one that had exited keeps its code), kubelet can stop and remove
// them, and nothing of the containers' layers is left: those of containers/storage, whose
// records lived in the run root, are collected at start, the writable layers of ours go
// with their containers.
func TestRestartAfterReboot(t *testing.T) {
	e := newContainerEnv(t)
	d := e.d
	ctx := ctxT(t)
	podID, pod := e.pod("reboot", "runc")
	// With an image volume: a containers/storage container, whose record is transient.
	withVolume := e.ctrConfig("running", "sleep", "100000")
	withVolume.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", Image: imgSpec(e.image), Readonly: true}}
	running := e.run(podID, pod, withVolume)
	exited := e.run(podID, pod, e.ctrConfig("exited", "sh", "-c", "exit 3"))
	e.waitExit(exited)
	if out, code := e.exec(running, "sh", "-c", "echo x > /written"); code != 0 {
		t.Fatalf("write in the rootfs: %d %s", code, out)
	}
	storeLayers, volumeDirs := storedLayers(t, d), layerDirs(t, d)
	if got := writableLayers(d.State); len(got) != 2 {
		t.Fatalf("writable layers before the reboot: %v, want the two containers'", got)
	}
	if n := len(storageRecords(t, d.State, d.RunRoot, "containers")); n != 1 {
		t.Fatalf("storage containers before the reboot: %d, want the image volume's", n)
	}

	if _, err := os.Stat(filepath.Join(d.State, "boot_id")); err != nil {
		t.Fatalf("the daemon keeps no record of its boot: %v", err)
	}
	d.Kill()
	reboot(t, d)
	// As after a real reboot, the boot the daemon last ran in is another one.
	if err := os.WriteFile(filepath.Join(d.State, "boot_id"), []byte("00000000-0000-0000-0000-000000000000"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Start()

	resp, err := d.RS.PodSandboxStatus(ctx, podID, false)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod after a reboot: %v, want NOTREADY", resp.Status.State)
	}
	// The running one ended with the boot: exited from the first answer on, with
	// containerd's code for a lost task.
	if st, err := d.RS.ContainerStatus(ctx, running, false); err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Status.ExitCode != 255 || st.Status.Reason != "Unknown" {
		t.Errorf("the container that ran before the reboot: %v %v, want EXITED 255 Unknown", st.GetStatus(), err)
	}
	if st, err := d.RS.ContainerStatus(ctx, exited, false); err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.Status.ExitCode != 3 {
		t.Errorf("the container that had exited before the reboot: %v %v", st.GetStatus(), err)
	}
	// The image volume's transient record went with the run root, and its layer's
	// directory with the store's collection at start: the images' layers are left.
	imageLayers := storeLayers - 1
	if dirs := layerDirs(t, d); len(dirs) != len(volumeDirs)-1 || storedLayers(t, d) != imageLayers {
		t.Errorf("layers after the reboot: %d directories (%v) and %d records, want the images' %d", len(dirs), dirs, storedLayers(t, d), imageLayers)
	}
	if n := len(storageRecords(t, d.State, d.RunRoot, "containers")); n != 0 {
		t.Errorf("storage containers after the reboot: %d", n)
	}
	// The writable layers stay until their containers are removed.
	if got := writableLayers(d.State); len(got) != 2 {
		t.Errorf("writable layers after the reboot: %v, want the two containers' until their removal", got)
	}
	now, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if got, _ := os.ReadFile(filepath.Join(d.State, "boot_id")); strings.TrimSpace(string(got)) != strings.TrimSpace(string(now)) {
		t.Errorf("boot recorded after the start: %q, want this boot's %q", got, now)
	}
	if err := d.RS.StopPodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
	if err := d.RS.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
	if left := storageRecords(t, d.State, d.RunRoot, "containers"); len(left) > 0 {
		t.Errorf("storage containers left: %s", left)
	}
}

// reboot does to a killed daemon's node what a reboot does: every process of its pods
// ends, their cgroups go, every mount under the daemon's roots goes and the run root is
// emptied.
func reboot(t *testing.T, d *Daemon) {
	t.Helper()
	bin, root := runtimeOf(d, "runc")
	out, err := exec.Command(bin, "--root", root, "list", "-q").Output()
	if err != nil {
		t.Fatalf("runc list: %v", err)
	}
	for _, id := range strings.Fields(string(out)) {
		if out, err := exec.Command(bin, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
			t.Fatalf("runc delete --force %s: %v %s", id, err, out)
		}
	}
	for _, p := range processesMentioning(d.Dir, 0) {
		var pid int
		if _, err := fmt.Sscan(p, &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	waitFor(t, 20*time.Second, "the node's processes to end", func() (bool, string) {
		left := processesMentioning(d.Dir, 0)
		return len(left) == 0, fmt.Sprint(left)
	})
	mounts := mountsUnder(d.Dir)
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil {
			t.Fatalf("unmount %s: %v", mounts[i], err)
		}
	}
	if err := os.RemoveAll(d.RunRoot); err != nil {
		t.Fatal(err)
	}
}

// layerDirs lists the layer directories of the image store's overlay driver (not its
// own: l, tempdirs, staging).
func layerDirs(t *testing.T, d *Daemon) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(d.State, "storage", "overlay"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, en := range entries {
		if en.IsDir() && en.Name() != "l" && en.Name() != "tempdirs" && en.Name() != "staging" {
			out = append(out, en.Name())
		}
	}
	return out
}

// ctrProcess is how a test tells, with no daemon running, whether a container's init has
// exited: by its monitor's exit file (runc, runsc), or under a shim v2 (which keeps the
// exit itself) by its pid.
type ctrProcess struct {
	id, dir, kind string
	pid           int
}

// runningProcess reads container id's process from ContainerStatus verbose, while the
// daemon runs; the container must be running.
func runningProcess(t *testing.T, d *Daemon, id string) ctrProcess {
	t.Helper()
	resp, err := d.RS.ContainerStatus(ctxT(t), id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid      int `json:"pid"`
		Metadata struct {
			Dir  string `json:"dir"`
			Kind string `json:"kind"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.Metadata.Dir == "" || info.Pid == 0 {
		t.Fatalf("container %s: no dir or pid in ContainerStatus verbose (%v): %s", id[:12], err, resp.Info["info"])
	}
	p := ctrProcess{id: id, dir: info.Metadata.Dir, kind: info.Metadata.Kind, pid: info.Pid}
	if st := resp.Status.State; st != runtimeapi.ContainerState_CONTAINER_RUNNING || p.exited() {
		t.Fatalf("container %s is %s (exited: %v), want it running", id[:12], st, p.exited())
	}
	return p
}

func (p ctrProcess) exited() bool {
	if p.kind == kind.ShimV2 {
		return !processAlive(p.pid)
	}
	_, err := os.Stat(filepath.Join(p.dir, monitor.ExitFile))
	return err == nil
}

// waitExitedWhileDown is called once the daemon is down: the container must still have
// been running when it went down, and has really exited when this returns (its monitor
// wrote the exit, or its process is gone), so that the daemon started next finds an exit
// that happened while none ran.
func (p ctrProcess) waitExitedWhileDown(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("container %s exited before the daemon went down: the test shows nothing", p.id[:12])
	}
	waitFor(t, 60*time.Second, "container "+p.id[:12]+" to exit while the daemon is down", func() (bool, string) {
		return p.exited(), "still running"
	})
	if !p.exited() {
		t.FailNow()
	}
}
