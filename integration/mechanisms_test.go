//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// With every [mechanisms] switch off (docs/mechanisms.md) a runc pod runs the plain way
// and all of it works: its containers start through `runc start` (a wrapper records the
// calls), its namespaces are pinned as files on the node and its tmpfs is mounted there
// (no pin home in the way), and the List and stats answers, built as plain messages, say
// what they say with the kept encodings.
func TestPlainMechanisms(t *testing.T) {
	wrapper, calls := loggedRunc(t, t.TempDir())
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Handlers["runc"].RuntimePath = wrapper
		c.Mechanisms = config.Mechanisms{}
	}))
	d := e.d
	ctx := ctxT(t)
	podID, pod := e.pod("plain", "runc")
	id := e.run(podID, pod, e.ctrConfig("plain", "sleep", "1000"))
	b, _ := os.ReadFile(calls)
	if !strings.Contains(string(b), " start "+id) {
		t.Errorf("exec_fifo_start = false, yet runc start never ran for %s; runc calls:\n%s", id, b)
	}
	if out, _ := e.exec(id, "echo", "ok"); out != "ok" {
		t.Errorf("exec in the plainly started container: %q", out)
	}

	// Pins and tmpfs on the node: <dir>/ns a directory of bind mounts, not a link into
	// the daemon's home, and the pod's tmpfs in the node's mount table.
	podDir := filepath.Join(d.RunRoot, "sandboxes", podID)
	if fi, err := os.Lstat(filepath.Join(podDir, "ns")); err != nil || !fi.IsDir() {
		t.Errorf("pin_home = false: %s/ns is %v (%v), want a directory on the node", podDir, fi, err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(podDir, "ns", "net"), filepath.Join(podDir, "ns", "ipc"), filepath.Join(podDir, "tmpfs")} {
		if !strings.Contains(string(mounts), " "+p+" ") {
			t.Errorf("pin_home = false: %s is not mounted on the node", p)
		}
	}

	// Plain answers, read through the real client.
	pods, err := d.RS.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{Id: podID})
	if err != nil || len(pods) != 1 || pods[0].Metadata.GetName() != "plain" || pods[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("ListPodSandbox: %v %v", pods, err)
	}
	ctrs, err := d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
	if err != nil || len(ctrs) != 1 || ctrs[0].Id != id || ctrs[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("ListContainers: %v %v", ctrs, err)
	}
	stats, err := d.RS.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{PodSandboxId: podID})
	if err != nil || len(stats) != 1 || stats[0].Attributes.GetId() != id || stats[0].Memory.GetWorkingSetBytes().GetValue() == 0 {
		t.Errorf("ListContainerStats: %v %v", stats, err)
	}
	podStats, err := d.RS.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{Id: podID})
	if err != nil || len(podStats) != 1 || podStats[0].Attributes.GetId() != podID || len(podStats[0].Linux.GetContainers()) != 1 {
		t.Errorf("ListPodSandboxStats: %v %v", podStats, err)
	}

	// A restart finds the pod pinned on the node and keeps it.
	d.Restart(true)
	if out, _ := e.exec(id, "echo", "ok"); out != "ok" {
		t.Errorf("exec after a kill -9 and restart: %q", out)
	}
	if err := d.RS.StopPodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
	if err := d.RS.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), " "+podDir) {
		t.Errorf("a mount under %s outlived the pod", podDir)
	}
}
