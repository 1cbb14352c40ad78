//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// A runc container is started through runc's exec FIFO, as `runc start` would start it,
// without running runc: the FIFO is there after CreateContainer and gone after
// StartContainer, runc then says the container runs, and it does. A container with a
// poststart hook (here from a CDI device) is started by `runc start`, which runs the hook
// in runc from 1.2 (this host's runc 1.1 runs it at create: only the call is checked to
// tell the two starts apart).
func TestStartThroughExecFifo(t *testing.T) {
	dir := t.TempDir()
	wrapper, calls := loggedRunc(t, dir)
	hookFile := filepath.Join(dir, "poststart-ran")
	specDir := t.TempDir()
	cdi := fmt.Sprintf(`{"cdiVersion":"0.6.0","kind":"rtshimd.test/hook","devices":[{"name":"poststart","containerEdits":{"hooks":[{"hookName":"poststart","path":"/bin/sh","args":["sh","-c","echo ran >> %s"]}]}}]}`, hookFile)
	if err := os.WriteFile(filepath.Join(specDir, "hook.json"), []byte(cdi), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Handlers["runc"].RuntimePath = wrapper
		c.CDI.SpecDirs = []string{specDir}
	}))
	ctx := ctxT(t)
	root := filepath.Join(e.d.RunRoot, "runc")
	podID, pod := e.pod("exec-fifo", "runc")
	started := func(id string) bool {
		b, _ := os.ReadFile(calls)
		return strings.Contains(string(b), " start "+id)
	}

	id, err := e.d.RS.CreateContainer(ctx, podID, e.ctrConfig("plain", "sleep", "1000"), pod)
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(root, id, "exec.fifo")
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode().Type() != os.ModeNamedPipe {
		t.Fatalf("runc's exec FIFO after create: %v %v", fi, err)
	}
	if err := e.d.RS.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if started(id) {
		t.Error("runc start ran for a container without poststart hooks")
	}
	if _, err := os.Lstat(fifo); !os.IsNotExist(err) {
		t.Errorf("the exec FIFO is left after start: %v", err)
	}
	out, err := exec.Command("/usr/sbin/runc", "--root", root, "state", id).Output()
	var st struct{ Status string }
	if err != nil || json.Unmarshal(out, &st) != nil || st.Status != "running" {
		t.Errorf("runc state after start: %s %v, want running", out, err)
	}
	if got, _ := e.exec(id, "cat", "/proc/1/cmdline"); got != "sleep\x001000\x00" {
		t.Errorf("the container's init runs %q, want sleep 1000", got)
	}

	hooked := e.ctrConfig("hooked", "sleep", "1000")
	hooked.CDIDevices = []*runtimeapi.CDIDevice{{Name: "rtshimd.test/hook=poststart"}}
	hid := e.run(podID, pod, hooked)
	if !started(hid) {
		t.Error("a container with a poststart hook was not started by runc start")
	}
	waitFor(t, 10*time.Second, "the poststart hook to run", func() (bool, string) {
		b, err := os.ReadFile(hookFile)
		return err == nil && strings.TrimSpace(string(b)) == "ran", fmt.Sprint(string(b), err)
	})
}
