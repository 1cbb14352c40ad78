//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// shimSockets lists the shim v2 sockets on the node (containerd's shims put them there).
func shimSockets() map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir("/run/containerd/s")
	for _, e := range entries {
		out[e.Name()] = true
	}
	return out
}

// shimsOf lists the live shim processes a daemon started: their -address names its run root.
func shimsOf(d *Daemon) []string {
	var out []string
	for _, p := range processesMentioning(filepath.Join(d.RunRoot, "shim"), 0) {
		if strings.Contains(p, "containerd-shim-runc-v2") {
			out = append(out, p)
		}
	}
	return out
}

// A shim v2 handler runs one shim per pod, however many containers the pod has; the
// pods outlive the daemon (kill -9) and are found again; a shim that dies takes its
// pod's containers to EXITED with the reason said; removal leaves no shim, socket,
// runc state or mount behind.
func TestShimV2Pods(t *testing.T) {
	e := newContainerEnv(t)
	d := e.d
	ctx := ctxT(t)
	socketsBefore := shimSockets()

	podA, cfgA := e.pod("shim-a", "runc-shim")
	podB, cfgB := e.pod("shim-b", "runc-shim")
	a1 := e.run(podA, cfgA, e.ctrConfig("a1", "sh", "-c", "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done"))
	a2 := e.run(podA, cfgA, e.ctrConfig("a2", "sleep", "1000"))
	b1 := e.run(podB, cfgB, e.ctrConfig("b1", "sleep", "1000"))
	if shims := shimsOf(d); len(shims) != 2 {
		t.Fatalf("want one shim per pod (2), got %d: %v", len(shims), shims)
	}

	// The daemon dies; the containers and their logs go on; the next daemon finds them.
	logPath := filepath.Join(cfgA.LogDirectory, "a1.log")
	d.Kill()
	before := len(readCRILog(t, logPath))
	time.Sleep(time.Second)
	if after := len(readCRILog(t, logPath)); after <= before {
		t.Errorf("log did not grow while the daemon was down: %d lines, then %d", before, after)
	}
	d.Start()
	for _, id := range []string{a1, a2, b1} {
		resp, err := d.RS.ContainerStatus(ctx, id, false)
		if err != nil || resp.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s after kill -9 and restart: %v %v", id[:12], resp.GetStatus().GetState(), err)
		}
	}
	if out, _ := e.exec(a2, "echo", "still here"); out != "still here" {
		t.Errorf("exec after restart: %q", out)
	}
	if shims := shimsOf(d); len(shims) != 2 {
		t.Errorf("after restart: %d shims, want the same 2: %v", len(shims), shims)
	}

	// Pod B's shim dies: its container is reported exited, saying why, and the pod goes
	// NOTREADY; pod A is untouched.
	var shimB int
	for _, p := range shimsOf(d) {
		if strings.Contains(p, podB) {
			shimB, _ = strconv.Atoi(strings.Fields(p)[0])
		}
	}
	if shimB == 0 {
		t.Fatalf("no shim for pod %s among %v", podB, shimsOf(d))
	}
	if err := syscall.Kill(shimB, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := e.waitExit(b1)
	if !strings.Contains(st.Message, "supervisor died") {
		t.Errorf("container of a dead shim: reason %q message %q, want the shim's death said", st.Reason, st.Message)
	}
	waitFor(t, 20*time.Second, "pod of the dead shim to be NOTREADY", func() (bool, string) {
		resp, err := d.RS.PodSandboxStatus(ctx, podB, false)
		return err == nil && resp.Status.State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY, resp.GetStatus().GetState().String()
	})
	resp, err := d.RS.ContainerStatus(ctx, a2, false)
	if err != nil || resp.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the other pod's container: %v %v", resp.GetStatus().GetState(), err)
	}

	for _, p := range []string{podA, podB} {
		if err := d.RS.RemovePodSandbox(ctx, p); err != nil {
			t.Errorf("remove pod %s: %v", p, err)
		}
	}
	waitFor(t, 15*time.Second, "shims to exit", func() (bool, string) {
		s := shimsOf(d)
		return len(s) == 0, strings.Join(s, "; ")
	})
	for name := range shimSockets() {
		if !socketsBefore[name] {
			t.Errorf("shim socket left: /run/containerd/s/%s", name)
		}
	}
	for _, id := range []string{podA, podB, a1, a2, b1} {
		if _, err := os.Stat(filepath.Join("/run/containerd/runc/rtshimd", id)); err == nil {
			t.Errorf("runc state of %s left in /run/containerd/runc/rtshimd", id[:12])
		}
	}
	if m := mountsUnder(d.RunRoot); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}
