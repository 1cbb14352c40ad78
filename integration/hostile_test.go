//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// Log paths are CRI input opened by root: a log_path that leaves the pod's log
// directory is refused by name, and no symlink below the log directory is followed, at
// create (by the daemon) or at ReopenContainerLog (by the monitor, or the shim's logger).
func TestHostileLogPaths(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range []string{"runc", "runc-shim"} {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("hostile-logs-"+handler, handler)
			outside := t.TempDir()

			// ../ out of the log directory: refused by name, nothing made outside.
			cfg := e.ctrConfig("escape", "sleep", "1000")
			cfg.LogPath = "../../escape.log"
			_, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.log_path") || !strings.Contains(err.Error(), "../../escape.log") {
				t.Errorf("log_path ../../escape.log: %v, want InvalidArgument naming config.log_path and the value", err)
			}
			if _, err := os.Stat(filepath.Join(pod.LogDirectory, "../../escape.log")); err == nil {
				t.Error("escape.log was created outside the log directory")
			}
			cfg.LogPath = "/etc/escape.log"
			if _, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod); status.Code(err) != codes.InvalidArgument {
				t.Errorf("absolute log_path: %v, want InvalidArgument", err)
			}

			// A symlink planted at the log path: the create fails, the target is untouched.
			target := filepath.Join(outside, "target")
			if err := os.WriteFile(target, []byte("keep\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(pod.LogDirectory, 0o755); err != nil {
				t.Fatal(err)
			}
			cfg = e.ctrConfig("planted", "sh", "-c", "echo written-through-link; sleep 1000")
			if err := os.Symlink(target, filepath.Join(pod.LogDirectory, cfg.LogPath)); err != nil {
				t.Fatal(err)
			}
			if id, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod); err == nil {
				_ = e.d.RS.StartContainer(ctx, id)
				time.Sleep(time.Second)
				t.Error("CreateContainer with a symlink at the log path succeeded")
			} else if !strings.Contains(err.Error(), "symlink") {
				t.Errorf("CreateContainer with a symlink at the log path: %v, want it to say symlink", err)
			}
			// A symlinked directory on the way there.
			if err := os.Symlink(outside, filepath.Join(pod.LogDirectory, "linked")); err != nil {
				t.Fatal(err)
			}
			cfg = e.ctrConfig("via-dir", "sh", "-c", "echo written-through-link; sleep 1000")
			cfg.LogPath = "linked/0.log"
			if id, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod); err == nil {
				_ = e.d.RS.StartContainer(ctx, id)
				time.Sleep(time.Second)
				t.Error("CreateContainer with a symlinked directory in the log path succeeded")
			}

			// A symlink swapped in before ReopenContainerLog is not followed.
			id := e.run(podID, pod, e.ctrConfig("rotated", "sleep", "1000"))
			logPath := filepath.Join(pod.LogDirectory, "rotated.log")
			if err := os.Rename(logPath, logPath+".1"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, logPath); err != nil {
				t.Fatal(err)
			}
			if err := e.d.RS.ReopenContainerLog(ctx, id); err == nil {
				t.Error("ReopenContainerLog through a symlink succeeded")
			}
			if _, _, err := e.d.RS.ExecSync(ctx, id, []string{"sh", "-c", "echo after-swap > /proc/1/fd/1"}, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the line in the old file", func() (bool, string) {
				b, _ := os.ReadFile(logPath + ".1")
				return strings.Contains(string(b), "after-swap"), string(b)
			})

			if b, _ := os.ReadFile(target); string(b) != "keep\n" {
				t.Errorf("the file outside the log directory was written: %q", b)
			}
			for _, p := range []string{"0.log", "escape.log"} {
				if _, err := os.Lstat(filepath.Join(outside, p)); err == nil {
					t.Errorf("%s was created outside the log directory", p)
				}
			}
			// The daemon still serves the pod.
			if _, err := e.d.RS.ContainerStatus(ctx, id, false); err != nil {
				t.Error(err)
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Error(err)
			}
			var left []string
			ctrs, _ := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
			for _, c := range ctrs {
				left = append(left, c.Id)
			}
			if len(left) > 0 {
				t.Errorf("containers left: %v", left)
			}
		})
	}
}

// execOutputCap is internal/container.MaxExecOutput: what fits a 16 MiB gRPC message.
const execOutputCap = 16<<20 - 64<<10

// An exec that prints more than a gRPC message holds returns its output cut at the cap,
// with its own exit code, and the daemon goes on serving.
func TestExecSyncOutputCapped(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("exec-cap-"+handler, handler)
			id := e.run(podID, pod, e.ctrConfig("sleeper", "sleep", "1000"))
			stdout, stderr, err := e.d.RS.ExecSync(ctx, id, []string{"sh", "-c", "yes | head -c 40000000"}, 60*time.Second)
			if err != nil {
				t.Fatalf("40 MB of output: %v", err)
			}
			if len(stdout) != execOutputCap || len(stderr) != 0 || strings.Trim(string(stdout), "y\n") != "" {
				t.Errorf("40 MB of output: %d bytes of stdout, %d of stderr; want %d of y lines", len(stdout), len(stderr), execOutputCap)
			}
			// Both streams share the cap; a failing exit code still comes through.
			stdout, stderr, err = e.d.RS.ExecSync(ctx, id, []string{"sh", "-c", "yes | head -c 10000000; yes | head -c 10000000 >&2; exit 3"}, 60*time.Second)
			if err == nil || !strings.Contains(err.Error(), "3") {
				t.Errorf("exit code 3 not reported: %v", err)
			}
			if n := len(stdout) + len(stderr); n != execOutputCap || len(stdout) != 10000000 {
				t.Errorf("2×10 MB of output: stdout %d + stderr %d bytes, want 10000000 + the rest of %d", len(stdout), len(stderr), execOutputCap)
			}
			if out, _, err := e.d.RS.ExecSync(ctx, id, []string{"echo", "still-here"}, 10*time.Second); err != nil || string(out) != "still-here\n" {
				t.Errorf("exec after the big ones: %q %v", out, err)
			}
			if _, err := e.d.RS.Version(ctx, ""); err != nil {
				t.Errorf("Version after the big execs: %v", err)
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Error(err)
			}
		})
	}
}

// hangPlugin is a CNI plugin that answers VERSION (so the config loads) and then, at ADD,
// either hangs (a child holding its output, as a shell plugin's would) or answers.
const hangPlugin = `#!/bin/sh
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
ADD) if [ -e "$(dirname "$0")/fixed" ]; then echo '{"cniVersion":"1.0.0","ips":[{"address":"10.216.0.5/24"}]}'; else sleep 6011.25; fi ;;
*) exit 0 ;;
esac
`

// A plugin that never answers fails RunPodSandbox with DeadlineExceeded after
// network.cni_timeout (the request itself has a longer deadline), naming network and
// plugin; everything is undone, and the name is free for the retry.
func TestCNIHungPlugin(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "rtshimd-hang"), []byte(hangPlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Network.Timeout, c.Network.BinDirs = "3s", []string{bin, "/usr/lib/cni"}
	}))
	conf := `{"cniVersion": "1.0.0", "name": "rtshimd-hung", "plugins": [{"type": "rtshimd-hang"}]}`
	if err := os.WriteFile(filepath.Join(d.Dir, "cni", "10-hung.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	waitNetworkReady(t, d, true)
	cfg := podConfig("cni-hung", runtimeapi.NamespaceMode_CONTAINER)
	start := time.Now()
	_, err := d.RS.RunPodSandbox(ctxT(t), cfg, "runc")
	took := time.Since(start)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("RunPodSandbox with a hung plugin: %v (after %v), want DeadlineExceeded", err, took)
	}
	msg := status.Convert(err).Message()
	for _, want := range []string{"rtshimd-hung", "rtshimd-hang", "ADD", "cni_timeout"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	t.Logf("hung plugin as the user sees it: %s", msg)
	if took > 30*time.Second {
		t.Errorf("RunPodSandbox returned after %v; the timeout is 3s", took)
	}
	assertNoSandboxes(t, d)
	waitFor(t, 10*time.Second, "the hung plugin to be killed", func() (bool, string) {
		procs := processesMentioning("sleep\x006011.25", 0)
		return len(procs) == 0, strings.Join(procs, "; ")
	})
	// The name was released: once the plugin answers, the same pod runs.
	if err := os.WriteFile(filepath.Join(bin, "fixed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := d.RS.RunPodSandbox(ctxT(t), cfg, "runc")
	if err != nil {
		t.Fatalf("RunPodSandbox after the plugin was fixed: %v", err)
	}
	if ip := podIP(t, d, id); ip != "10.216.0.5" {
		t.Errorf("pod IP %q", ip)
	}
	if err := d.RS.RemovePodSandbox(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	assertNoSandboxes(t, d)
	removeTestCgroups(t)
}

// A pod's /dev/shm is shared by its containers and out of reach of the node's other
// users: its tmpfs is 1777 and listed in /proc/mounts, so a 0700 directory guards it.
func TestPodShmPrivate(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("shm-"+handler, handler)
			a := e.run(podID, pod, e.ctrConfig("a", "sleep", "1000"))
			b := e.run(podID, pod, e.ctrConfig("b", "sleep", "1000"))
			e.exec(a, "sh", "-c", "echo shared > /dev/shm/f")
			if out, _ := e.exec(b, "cat", "/dev/shm/f"); out != "shared" {
				t.Errorf("/dev/shm not shared between the pod's containers: %q", out)
			}
			resp, err := e.d.RS.PodSandboxStatus(ctx, podID, true)
			if err != nil {
				t.Fatal(err)
			}
			var info sandboxInfo
			if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
				t.Fatal(err)
			}
			shm := info.Metadata.Shm
			if fi, err := os.Stat(filepath.Dir(shm)); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("shm guard %s: %v %v, want mode 0700", filepath.Dir(shm), fi.Mode(), err)
			}
			// nobody on the node cannot reach it.
			cmd := exec.Command("/usr/bin/stat", shm)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("uid 65534 reaches the pod's shm: %s", out)
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Error(err)
			}
		})
	}
}
