//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// otherMonitor returns the monitor binary of the other kind than the suite's (the Go one
// when the suite runs the C one, the default, and the other way round); it skips without
// gcc.
func otherMonitor(t *testing.T) string {
	if filepath.Base(monitorBin) != "rtshim-monitor" {
		return filepath.Join(binDir, "rtshim-monitor")
	}
	c := filepath.Join(binDir, "rtshim-monitor-c")
	if _, err := os.Stat(c); err == nil {
		return c
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc to build the C monitor")
	}
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("make", "--no-print-directory", "monitor-c", "BIN="+binDir)
	cmd.Dir = filepath.Dir(filepath.Dir(file))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the C monitor: %v: %s", err, out)
	}
	return c
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

// kindName is "go" or "c" for a monitor binary.
func kindName(bin string) string {
	if filepath.Base(bin) == "rtshim-monitor" {
		return "go"
	}
	return "c"
}

// A daemon recovers, logs, stops and removes containers whose monitors are of the other
// kind (Go or C): both speak one protocol, and monitor_path may change across a restart.
// Both ways in one run: from the suite's monitor to the other, and back.
func TestMonitorKindsMixed(t *testing.T) {
	other := otherMonitor(t)
	e := newContainerEnv(t)
	for _, way := range []struct{ from, to string }{{monitorBin, other}, {other, monitorBin}} {
		for _, handler := range []string{"runc", "runsc", "runc-shim"} {
			t.Run(kindName(way.from)+"-to-"+kindName(way.to)+"/"+handler, func(t *testing.T) {
				e.t = t
				monitorsSwitch(t, e, handler, way.from, way.to)
			})
		}
	}
}

// monitorsSwitch runs containers under the monitor from, restarts the daemon configured
// with the monitor to, and checks that the old containers are recovered and new ones run
// under to; the daemon is left configured with the suite's monitor again.
func monitorsSwitch(t *testing.T, e *containerEnv, handler, from, to string) {
	cfg, err := os.ReadFile(e.d.Config)
	if err != nil {
		t.Fatal(err)
	}
	// use restarts the daemon with monitor_path bin (the suite's config with bin in it).
	use := func(bin string) {
		e.d.Kill()
		next := strings.Replace(string(cfg), "monitor_path = \""+monitorBin+"\"", "monitor_path = \""+bin+"\"", 1)
		if bin != monitorBin && next == string(cfg) {
			t.Fatalf("monitor_path %s not in the config", monitorBin)
		}
		if err := os.WriteFile(e.d.Config, []byte(next), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		e.d.Start()
	}
	// Back to the suite's monitor for the next case, whatever happened.
	defer use(monitorBin)
	if from != monitorBin {
		use(from)
	}
	podID, pod := e.pod("mixed-"+kindName(from)+"-"+handler, handler)
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
