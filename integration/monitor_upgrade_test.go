//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// earlierRelease is the last commit with two monitors: the Go rtshim-monitor and the C
// one as rtshim-monitor-c. A node upgraded from it has containers under either.
const earlierRelease = "2a4d9f3d97b24890cbd49e8cfdd51cb5955e625b"

// earlierMonitors builds the monitors of earlierRelease from the repository's history
// into binDir ("go" and "c" by kind); it skips in a checkout without that history.
func earlierMonitors(t *testing.T) map[string]string {
	out := filepath.Join(binDir, "earlier")
	bins := map[string]string{"go": filepath.Join(out, "rtshim-monitor"), "c": filepath.Join(out, "rtshim-monitor-c")}
	if _, err := os.Stat(bins["c"]); err == nil {
		return bins
	}
	src := earlierTree(t, earlierRelease)
	runIn(t, src, []string{"CGO_ENABLED=0", "GOFLAGS=-buildvcs=false"}, "go", "build", "-o", bins["go"], "./cmd/rtshim-monitor")
	runIn(t, src, nil, "make", "--no-print-directory", "monitor-c", "BIN="+out)
	return bins
}

// earlierTree is the repository's tree at rev, unpacked in a temporary directory; it skips
// in a checkout without that history.
func earlierTree(t testing.TB, rev string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	if err := exec.Command("git", "-C", root, "cat-file", "-e", rev+"^{commit}").Run(); err != nil {
		t.Skipf("the checkout lacks the history holding %s: %v", rev, err)
	}
	src := t.TempDir()
	tarball := filepath.Join(t.TempDir(), "earlier.tar")
	runIn(t, root, nil, "git", "archive", "-o", tarball, rev)
	runIn(t, src, nil, "tar", "-xf", tarball)
	return src
}

// runIn runs a command in dir with env added, failing the test with its output.
func runIn(t testing.TB, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, b)
	}
}

// monitorExe is the binary of the process the daemon names as container id's monitor
// (for a shim v2 container: its shim).
func monitorExe(t *testing.T, d *Daemon, id string) string {
	pid := monitorPid(t, d, id)
	if pid == 0 {
		return ""
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return exe
}

// monitorPid is the pid ContainerStatus verbose gives for container id's monitor (0: none).
func monitorPid(t *testing.T, d *Daemon, id string) int {
	t.Helper()
	resp, err := d.RS.ContainerStatus(ctxT(t), id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Status struct {
			MonitorPid int `json:"monitor_pid"`
		} `json:"status"`
	}
	_ = json.Unmarshal([]byte(resp.Info["info"]), &info)
	return info.Status.MonitorPid
}

// A daemon recovers, logs, stops and removes containers whose monitors are those of an
// earlier release (the Go monitor, and the C one as it was), on every suite handler: the
// upgrade a node goes through. Runtime and logger monitors both (runc-shim's containers
// log through one).
func TestEarlierMonitorsRecovered(t *testing.T) {
	earlier := earlierMonitors(t)
	e := newContainerEnv(t)
	for _, kind := range []string{"go", "c"} {
		for _, handler := range []string{"runc", "runsc", "runc-shim"} {
			t.Run(kind+"/"+handler, func(t *testing.T) {
				e.t = t
				monitorsSwitch(t, e, handler, kind, earlier[kind], monitorBin)
			})
		}
	}
}

// monitorsSwitch runs containers under the monitor from, restarts the daemon configured
// with the monitor to, and checks that the old containers are recovered and new ones run
// under to; the daemon is left configured with the suite's monitor again.
func monitorsSwitch(t *testing.T, e *containerEnv, handler, name, from, to string) {
	// use restarts the daemon with monitor_path bin.
	use := func(bin string) {
		e.d.Kill()
		e.d.Cfg.MonitorPath = bin
		e.d.WriteConfig()
		time.Sleep(100 * time.Millisecond)
		e.d.Start()
	}
	// Back to the suite's monitor for the next case, whatever happened.
	defer use(monitorBin)
	if from != monitorBin {
		use(from)
	}
	podID, pod := e.pod("earlier-"+name+"-"+handler, handler)
	first := e.run(podID, pod, e.ctrConfig("first", "sh", "-c", "echo one; exec sleep 1000"))
	ender := e.run(podID, pod, e.ctrConfig("ender", "sh", "-c", "echo bye; sleep 2; exit 5"))

	use(to)
	second := e.run(podID, pod, e.ctrConfig("second", "sh", "-c", "echo two; exec sleep 1000"))
	if st := e.waitExit(ender); st.ExitCode != 5 {
		t.Errorf("container of the old monitor exited %d, want 5", st.ExitCode)
	}
	ctx := ctxT(t)
	for id, want := range map[string]string{first: from, second: to} {
		if exe := monitorExe(t, e.d, id); handler != "runc-shim" && exe != want {
			t.Errorf("container %s is supervised by %s, want %s", id[:12], exe, want)
		}
	}
	for _, id := range []string{first, second} {
		resp, err := e.d.RS.ContainerStatus(ctx, id, false)
		if err != nil || resp.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container %s: %v %v", id[:12], resp.GetStatus().GetState(), err)
		}
		if err := e.d.RS.ReopenContainerLog(ctx, id); err != nil {
			t.Errorf("reopen the log of %s: %v", id[:12], err)
		}
		if err := e.d.RS.StopContainer(ctx, id, 2); err != nil {
			t.Fatal(err)
		}
		st := e.waitExit(id)
		if st.ExitCode != 137 && st.ExitCode != 143 {
			t.Errorf("stopped container %s exited %d", id[:12], st.ExitCode)
		}
	}
	for id, want := range map[string]string{first: "one", second: "two", ender: "bye"} {
		resp, err := e.d.RS.ContainerStatus(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		lines := readCRILog(t, resp.Status.LogPath)
		if len(lines) == 0 || lines[0][2] != want {
			t.Errorf("log of %s: %v, want %q", id[:12], lines, want)
		}
	}
	if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
}
