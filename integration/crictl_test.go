//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCrictl drives the daemon with crictl as a person would (docs/operating.md, "Using crictl").
// crictl is built from cri-tools by hack/tools.sh.
func TestCrictl(t *testing.T) {
	d := newDaemon(t)
	run := crictlRunner(t, d)
	t.Helper()
	pod := filepath.Join(t.TempDir(), "pod.json")
	if err := os.WriteFile(pod, []byte(`{
  "metadata": {"name": "crictl-pod", "namespace": "default", "uid": "crictl-pod-uid", "attempt": 1},
  "hostname": "crictl-pod",
  "log_directory": "/tmp",
  "linux": {"cgroup_parent": "/`+cgroupRoot+`/crictl-pod"}
}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, handler := range suiteHandlers {
		id := run("runp", "--runtime="+handler, pod)
		if len(id) != 64 {
			t.Fatalf("runp printed %q, want a sandbox id", id)
		}
		pods := run("pods", "--id", id[:13])
		if !strings.Contains(pods, "crictl-pod") || !strings.Contains(pods, "Ready") || !strings.Contains(pods, handler) {
			t.Errorf("crictl pods:\n%s", pods)
		}
		var inspect struct {
			Status struct {
				State          string `json:"state"`
				RuntimeHandler string `json:"runtimeHandler"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(run("inspectp", id)), &inspect); err != nil {
			t.Fatal(err)
		}
		if inspect.Status.State != "SANDBOX_READY" || inspect.Status.RuntimeHandler != handler {
			t.Errorf("inspectp: %+v", inspect.Status)
		}
		run("stopp", id)
		if out := run("pods", "--id", id, "--state", "NotReady", "-q"); out != id {
			t.Errorf("after stopp, NotReady pods = %q", out)
		}
		run("rmp", id)
		if out := run("pods", "-q"); out != "" {
			t.Errorf("after rmp, pods = %q", out)
		}
	}
	removeTestCgroups(t)
}

// crictlRunner returns a function that runs crictl against d and returns its output,
// failing the test on error. It skips the test where crictl is not installed.
func crictlRunner(t *testing.T, d *Daemon) func(args ...string) string {
	crictl := toolPath(t, "crictl")
	return func(args ...string) string {
		t.Helper()
		cmd := exec.Command(crictl, append([]string{"--runtime-endpoint", "unix://" + d.Socket, "--timeout", "60s"}, args...)...)
		cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE=/dev/null")
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("crictl %v: %v\n%s%s", args, err, out, stderr)
		}
		return strings.TrimSpace(string(out))
	}
}

// TestCrictlImages: crictl pull, images, inspecti and rmi, as docs/operating.md shows.
func TestCrictlImages(t *testing.T) {
	reg := startRegistry(t, nil)
	_, cdig := reg.Push(t, "demo/busybox", "1.36", ImageSpec{Layers: []Layer{busyboxLayer(t)}}, nil)
	d := newDaemon(t, withRegistries(reg.Addr))
	run := crictlRunner(t, d)
	ref := reg.Ref("demo/busybox", "1.36")
	if out := run("pull", ref); !strings.Contains(out, cdig) {
		t.Errorf("crictl pull: %q, want the image id %s", out, cdig)
	}
	if out := run("images"); !strings.Contains(out, reg.Addr+"/demo/busybox") || !strings.Contains(out, "1.36") {
		t.Errorf("crictl images:\n%s", out)
	}
	var inspect struct {
		Status struct {
			ID       string   `json:"id"`
			RepoTags []string `json:"repoTags"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(run("inspecti", ref)), &inspect); err != nil {
		t.Fatal(err)
	}
	if inspect.Status.ID != cdig || len(inspect.Status.RepoTags) != 1 || inspect.Status.RepoTags[0] != ref {
		t.Errorf("crictl inspecti: %+v", inspect.Status)
	}
	run("rmi", ref)
	if out := run("images", "-q"); out != "" {
		t.Errorf("after rmi, images = %q", out)
	}
}

// TestCrictlContainers: crictl create, start, ps, inspect, exec, logs, stop and rm, as the
// docs/operating.md shows, on both handlers.
func TestCrictlContainers(t *testing.T) {
	e := newContainerEnv(t, withRestore())
	run := crictlRunner(t, e.d)
	dir := t.TempDir()
	for _, handler := range suiteHandlers {
		pod := filepath.Join(dir, handler+"-pod.json")
		ctr := filepath.Join(dir, handler+"-ctr.json")
		_ = os.WriteFile(pod, []byte(`{"metadata": {"name": "crictl-`+handler+`", "namespace": "default", "uid": "uid-`+handler+`", "attempt": 1},
 "hostname": "crictl-`+handler+`", "log_directory": "`+dir+`/logs-`+handler+`", "linux": {"cgroup_parent": "/`+cgroupRoot+`/crictl-`+handler+`"}}`), 0o644)
		_ = os.WriteFile(ctr, []byte(`{"metadata": {"name": "web"}, "image": {"image": "`+e.image+`"},
 "command": ["sh", "-c", "echo started; sleep 1000"], "log_path": "web.log"}`), 0o644)
		podID := run("runp", "--runtime="+handler, pod)
		id := run("create", podID, ctr, pod)
		run("start", id)
		if out := run("ps", "--id", id); !strings.Contains(out, "Running") || !strings.Contains(out, "web") {
			t.Errorf("%s: crictl ps:\n%s", handler, out)
		}
		var inspect struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(run("inspect", id)), &inspect); err != nil || inspect.Status.State != "CONTAINER_RUNNING" {
			t.Errorf("%s: crictl inspect: %+v %v", handler, inspect, err)
		}
		// Plain `crictl exec` streams through the streaming server; --sync runs ExecSync.
		for _, args := range [][]string{{"exec", id, "hostname"}, {"exec", "--sync", id, "hostname"}} {
			if out := run(args...); out != "crictl-"+handler {
				t.Errorf("%s: crictl %v = %q", handler, args, out)
			}
		}
		waitFor(t, 10*time.Second, "crictl logs", func() (bool, string) {
			out := run("logs", id)
			return out == "started", out
		})
		// crictl attach shows live output; crictl port-forward reaches a port of the pod.
		tick := filepath.Join(dir, handler+"-tick.json")
		_ = os.WriteFile(tick, []byte(`{"metadata": {"name": "ticker"}, "image": {"image": "`+e.image+`"},
 "command": ["sh", "-c", "while true; do echo tick; sleep 0.5; done"], "log_path": "tick.log"}`), 0o644)
		tid := run("create", podID, tick, pod)
		run("start", tid)
		srv := filepath.Join(dir, handler+"-srv.json")
		_ = os.WriteFile(srv, []byte(`{"metadata": {"name": "pf-server"}, "image": {"image": "`+e.image+`"},
 "command": ["sh", "-c", "while true; do echo hello-pf | nc -l -p 8080; done"], "log_path": "srv.log"}`), 0o644)
		run("start", run("create", podID, srv, pod))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		att := exec.CommandContext(ctx, toolPath(t, "crictl"), "--runtime-endpoint", "unix://"+e.d.Socket, "attach", tid)
		att.Env = append(os.Environ(), "CRI_CONFIG_FILE=/dev/null")
		out, _ := att.Output()
		cancel()
		if !strings.Contains(string(out), "tick") {
			t.Errorf("%s: crictl attach showed %q", handler, out)
		}
		port := 19000 + len(handler)
		// kubectl-style port-forward gives up on a connection the pod refuses, so
		// connect only once the server listens.
		waitFor(t, 15*time.Second, "the pod's server to listen", func() (bool, string) {
			out, _, err := e.d.RS.ExecSync(ctxT(t), tid, []string{"nc", "127.0.0.1", "8080"}, 5*time.Second)
			return err == nil && strings.Contains(string(out), "hello-pf"), string(out)
		})
		pf := exec.Command(toolPath(t, "crictl"), "--runtime-endpoint", "unix://"+e.d.Socket, "port-forward", podID, fmt.Sprintf("%d:8080", port))
		pf.Env = append(os.Environ(), "CRI_CONFIG_FILE=/dev/null")
		var pfOut strings.Builder
		pf.Stdout, pf.Stderr = &pfOut, &pfOut
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, "crictl port-forward", func() (bool, string) {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
			if err != nil {
				return false, err.Error()
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			b := make([]byte, 32)
			n, _ := c.Read(b)
			return strings.Contains(string(b[:n]), "hello-pf"), string(b[:n]) + " | crictl: " + pfOut.String()
		})
		_ = pf.Process.Kill()
		_ = pf.Wait()

		if handler == "runc" {
			// crictl checkpoint --export, then crictl create in a new pod with the archive
			// as image: the ticker, restored, ticks on in a log of its own. A new pod: CRIU
			// keeps PIDs, and in this pod's shared PID namespace another container's
			// processes may have taken the ticker's ("Can't fork for 26: File exists").
			archive := filepath.Join(dir, "ticker.tar")
			run("checkpoint", "--export", archive, tid)
			rpod := filepath.Join(dir, "restore-pod.json")
			_ = os.WriteFile(rpod, []byte(`{"metadata": {"name": "crictl-restore", "namespace": "default", "uid": "uid-restore", "attempt": 1},
 "hostname": "crictl-restore", "log_directory": "`+dir+`/logs-restore", "linux": {"cgroup_parent": "/`+cgroupRoot+`/crictl-restore"}}`), 0o644)
			restored := filepath.Join(dir, "restored.json")
			_ = os.WriteFile(restored, []byte(`{"metadata": {"name": "ticker-restored"}, "image": {"image": "`+archive+`"},
 "log_path": "restored.log"}`), 0o644)
			rpodID := run("runp", "--runtime=runc", rpod)
			rid := run("create", rpodID, restored, rpod)
			run("start", rid)
			waitFor(t, 10*time.Second, "the restored ticker's output", func() (bool, string) {
				out := run("logs", rid)
				return strings.Count(out, "tick") >= 2, out
			})
			// runc restores into the pod's network and PID namespaces only: the UTS
			// namespace is the checkpoint's, with its pod's hostname (docs/cri-support.md).
			if out := run("exec", "--sync", rid, "hostname"); out != "crictl-"+handler {
				t.Errorf("crictl exec in the restored ticker: hostname %q, want the checkpointed pod's", out)
			}
			run("rm", "-f", rid)
			run("stopp", rpodID)
			run("rmp", rpodID)
		}
		run("stop", "--timeout", "1", id)
		if out := run("ps", "-a", "--id", id); !strings.Contains(out, "Exited") {
			t.Errorf("%s: after stop:\n%s", handler, out)
		}
		run("rm", id)
		run("stopp", podID)
		run("rmp", podID)
	}
}
