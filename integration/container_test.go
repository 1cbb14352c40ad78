//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// toolsLayer adds applet links the container tests use to busyboxLayer's.
func toolsLayer() Layer {
	var files []File
	for _, a := range []string{"nc", "hostname", "head", "tr", "grep", "ps", "wc", "touch", "kill", "seq", "stat", "env", "pwd", "mkdir", "rm", "yes", "dd", "httpd", "test"} {
		files = append(files, File{Path: "/bin/" + a, Symlink: "busybox"})
	}
	return Layer{Files: files}
}

// containerEnv is a daemon, a registry with a busybox image pulled into the daemon, and
// helpers to run pods and containers in it.
type containerEnv struct {
	t     *testing.T
	d     *Daemon
	reg   *Registry // the daemon pulls from it (insecure)
	image string
	logs  string     // log_directory of pods
	nri   *nriLedger // where set, nodeState lists what this NRI plugin holds
}

// newContainerEnv starts a daemon (newDaemon, with opts) that may pull from a registry of
// its own, and pulls the test images into it.
func newContainerEnv(t *testing.T, opts ...daemonOption) *containerEnv {
	// Registered first, so it runs last: after the daemon's cleanup removed every pod.
	t.Cleanup(func() { removeTestCgroups(t) })
	reg := startRegistry(t, nil)
	reg.Push(t, "test/busybox", "1", ImageSpec{
		Layers: []Layer{busyboxLayer(t), toolsLayer()},
		Config: ocispec.ImageConfig{Env: []string{"PATH=/bin", "FROM_IMAGE=yes"}, Cmd: []string{"sh"}},
	}, nil)
	reg.Push(t, "test/busybox", "user", ImageSpec{
		Layers: []Layer{busyboxLayer(t), toolsLayer()},
		Config: ocispec.ImageConfig{Env: []string{"PATH=/bin"}, User: "app"},
	}, nil)
	d := newDaemon(t, append([]daemonOption{withRegistries(reg.Addr)}, opts...)...)
	ctx := ctxT(t)
	for _, tag := range []string{"1", "user"} {
		if _, err := d.IS.PullImage(ctx, imgSpec(reg.Ref("test/busybox", tag)), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	return &containerEnv{t: t, d: d, reg: reg, image: reg.Ref("test/busybox", "1"), logs: t.TempDir()}
}

func (e *containerEnv) pod(name, handler string) (string, *runtimeapi.PodSandboxConfig) {
	e.t.Helper()
	cfg := podConfig(name, runtimeapi.NamespaceMode_CONTAINER)
	cfg.LogDirectory = filepath.Join(e.logs, name)
	id, err := e.d.RS.RunPodSandbox(ctxT(e.t), cfg, handler)
	if err != nil {
		e.t.Fatalf("RunPodSandbox(%s): %v", handler, err)
	}
	return id, cfg
}

func (e *containerEnv) ctrConfig(name string, args ...string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    imgSpec(e.image),
		Command:  args,
		LogPath:  name + ".log",
		Labels:   map[string]string{"ctr": name},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

func (e *containerEnv) run(podID string, pod *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	e.t.Helper()
	ctx := ctxT(e.t)
	id, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod)
	if err != nil {
		e.t.Fatalf("CreateContainer(%s): %v", cfg.Metadata.Name, err)
	}
	if err := e.d.RS.StartContainer(ctx, id); err != nil {
		e.t.Fatalf("StartContainer(%s): %v", cfg.Metadata.Name, err)
	}
	return id
}

func (e *containerEnv) waitExit(id string) *runtimeapi.ContainerStatus {
	e.t.Helper()
	var st *runtimeapi.ContainerStatus
	waitFor(e.t, 60*time.Second, "container "+id[:12]+" to exit", func() (bool, string) {
		resp, err := e.d.RS.ContainerStatus(ctxT(e.t), id, false)
		if err != nil {
			return false, err.Error()
		}
		st = resp.Status
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED, st.State.String()
	})
	return st
}

func (e *containerEnv) exec(id string, cmd ...string) (string, int32) {
	e.t.Helper()
	stdout, stderr, err := e.d.RS.ExecSync(ctxT(e.t), id, cmd, 30*time.Second)
	if err != nil {
		e.t.Fatalf("ExecSync(%v): %v", cmd, err)
	}
	var code int32
	_ = stderr
	if len(stderr) > 0 {
		e.t.Logf("exec %v stderr: %s", cmd, stderr)
	}
	// cri-client returns exit code errors as utilexec.CodeExitError
	return strings.TrimSpace(string(stdout)), code
}

var criLogLine = regexp.MustCompile(`^(\S+) (stdout|stderr) ([PF]) (.*)$`)

// readCRILog parses a CRI log file into (stream, tag, text) entries.
// containerLogPath is the log path ContainerStatus gives for container id.
func containerLogPath(t testing.TB, d *Daemon, id string) string {
	t.Helper()
	resp, err := d.RS.ContainerStatus(context.Background(), id, false)
	if err != nil || resp.GetStatus().GetLogPath() == "" {
		t.Fatalf("container %s: no log path (%v)", id[:12], err)
	}
	return resp.Status.LogPath
}

func readCRILog(t testing.TB, path string) [][3]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("container log: %v", err)
	}
	defer f.Close()
	var out [][3]string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := criLogLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("not a CRI log line: %q", sc.Text())
		}
		if _, err := time.Parse(time.RFC3339Nano, m[1]); err != nil {
			t.Fatalf("bad timestamp in %q", sc.Text())
		}
		out = append(out, [3]string{m[2], m[3], m[4]})
	}
	return out
}

func TestContainerLifecycle(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("life-"+handler, handler)
			ok := e.run(podID, pod, e.ctrConfig("ok", "sh", "-c", "echo hello-out; echo hello-err >&2"))
			bad := e.run(podID, pod, e.ctrConfig("bad", "sh", "-c", "exit 3"))
			st := e.waitExit(ok)
			if st.ExitCode != 0 || st.Reason != "Completed" || st.FinishedAt < st.StartedAt || st.StartedAt < st.CreatedAt {
				t.Errorf("exit 0 container: code %d reason %q times %d/%d/%d", st.ExitCode, st.Reason, st.CreatedAt, st.StartedAt, st.FinishedAt)
			}
			// The image's name, its repo digest, and its ID (PullImage's image_ref).
			if !strings.HasPrefix(st.ImageRef, strings.TrimSuffix(e.image, ":1")+"@sha256:") || !strings.HasPrefix(st.ImageId, "sha256:") || st.Image.Image != e.image {
				t.Errorf("image %q ref %q id %q", st.Image.GetImage(), st.ImageRef, st.ImageId)
			}
			if st.LogPath != filepath.Join(pod.LogDirectory, "ok.log") {
				t.Errorf("log path %q", st.LogPath)
			}
			got := map[string]string{}
			for _, l := range readCRILog(t, st.LogPath) {
				got[l[0]] += l[2]
			}
			if got["stdout"] != "hello-out" || got["stderr"] != "hello-err" {
				t.Errorf("log streams = %v", got)
			}
			st = e.waitExit(bad)
			if st.ExitCode != 3 || st.Reason != "Error" {
				t.Errorf("exit 3 container: code %d reason %q", st.ExitCode, st.Reason)
			}
			// List filters.
			all, err := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
			if err != nil || len(all) != 2 {
				t.Errorf("ListContainers(pod) = %d, %v", len(all), err)
			}
			byLabel, _ := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"ctr": "bad"}})
			if len(byLabel) != 1 || byLabel[0].Id != bad {
				t.Errorf("ListContainers(label ctr=bad) = %v", byLabel)
			}
			running, _ := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
			if len(running) != 0 {
				t.Errorf("running containers listed: %v", running)
			}
			// Stop and remove are idempotent.
			for _, id := range []string{ok, bad} {
				if err := e.d.RS.StopContainer(ctx, id, 1); err != nil {
					t.Errorf("stop exited container: %v", err)
				}
				if err := e.d.RS.RemoveContainer(ctx, id); err != nil {
					t.Fatal(err)
				}
				if err := e.d.RS.RemoveContainer(ctx, id); err != nil {
					t.Errorf("second remove: %v", err)
				}
				if _, err := e.d.RS.ContainerStatus(ctx, id, false); status.Code(err) != codes.NotFound {
					t.Errorf("status after remove: %v", err)
				}
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
			if entries, _ := os.ReadDir(filepath.Join(e.d.RunRoot, "containers")); len(entries) != 0 {
				t.Errorf("container dirs left: %d", len(entries))
			}
		})
	}
}

// Containers of one pod share its network (they reach each other on localhost) and its
// hostname, on both handlers.
func TestMultiContainerPod(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			podID, pod := e.pod("multi-"+handler, handler)
			server := e.run(podID, pod, e.ctrConfig("server", "sh", "-c", "while true; do echo hello-from-server | nc -l -p 8080; done"))
			client := e.run(podID, pod, e.ctrConfig("client", "sleep", "1000"))
			var out string
			waitFor(t, 20*time.Second, "the server container to answer on localhost", func() (bool, string) {
				stdout, _, err := e.d.RS.ExecSync(ctxT(t), client, []string{"nc", "127.0.0.1", "8080"}, 5*time.Second)
				out = strings.TrimSpace(string(stdout))
				return err == nil && out == "hello-from-server", fmt.Sprintf("%q %v", out, err)
			})
			for _, id := range []string{server, client} {
				if h, _ := e.exec(id, "hostname"); h != pod.Hostname {
					t.Errorf("hostname in %s = %q, want %q", id[:12], h, pod.Hostname)
				}
			}
			if err := e.d.RS.RemovePodSandbox(ctxT(t), podID); err != nil {
				t.Fatalf("remove pod with running containers: %v", err)
			}
		})
	}
}

// procStatus reads fields of /proc/self/status inside the container.
func (e *containerEnv) procStatus(id string) map[string]string {
	out, _ := e.exec(id, "cat", "/proc/self/status")
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

func TestContainerSecurityAndResources(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("sec-"+handler, handler)

			cfg := e.ctrConfig("locked", "sleep", "1000")
			cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions:   &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
				RunAsUser:          &runtimeapi.Int64Value{Value: 1000},
				RunAsGroup:         &runtimeapi.Int64Value{Value: 1000},
				SupplementalGroups: []int64{4242},
				NoNewPrivs:         true,
				ReadonlyRootfs:     true,
				Capabilities:       &runtimeapi.Capability{DropCapabilities: []string{"ALL"}, AddCapabilities: []string{"NET_BIND_SERVICE"}},
				Seccomp:            &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			}
			cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512}
			id := e.run(podID, pod, cfg)

			if out, _ := e.exec(id, "id"); !strings.Contains(out, "uid=1000") || !strings.Contains(out, "gid=1000") || !strings.Contains(out, "4242") {
				t.Errorf("id = %q", out)
			}
			ps := e.procStatus(id)
			// NET_BIND_SERVICE is bit 10.
			if ps["CapBnd"] != "0000000000000400" {
				t.Errorf("CapBnd = %q, want only NET_BIND_SERVICE", ps["CapBnd"])
			}
			// gVisor's /proc does not show NoNewPrivs.
			if handler == "runc" && ps["NoNewPrivs"] != "1" {
				t.Errorf("NoNewPrivs = %q", ps["NoNewPrivs"])
			}
			if handler == "runc" && ps["Seccomp"] != "2" {
				t.Errorf("Seccomp = %q, want 2 (filter)", ps["Seccomp"])
			}
			if _, _, err := e.d.RS.ExecSync(ctx, id, []string{"touch", "/newfile"}, 10*time.Second); err == nil {
				t.Error("writing to a read-only root filesystem succeeded")
			}
			if handler == "runc" {
				// The container's own cgroup, as it sees it: v1's files, or v2's (runc 1.1
				// converts shares to cpu.weight linearly: 512 is 20).
				memFile, quotaFile, sharesFile, wantQuota, wantShares := "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.shares", "50000", "512"
				if unifiedCgroups {
					memFile, quotaFile, sharesFile, wantQuota, wantShares = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu.weight", "50000 100000", "20"
				}
				limit, _ := e.exec(id, "cat", memFile)
				if limit != strconv.Itoa(64<<20) {
					t.Errorf("memory limit in the container's cgroup = %q", limit)
				}
				quota, _ := e.exec(id, "cat", quotaFile)
				shares, _ := e.exec(id, "cat", sharesFile)
				if quota != wantQuota || shares != wantShares {
					t.Errorf("cpu quota %q shares %q (%s, %s), want %q %q", quota, shares, quotaFile, sharesFile, wantQuota, wantShares)
				}
				// UpdateContainerResources reaches the cgroup.
				if err := e.d.RS.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 96 << 20}}); err != nil {
					t.Fatalf("UpdateContainerResources: %v", err)
				}
				limit, _ = e.exec(id, "cat", memFile)
				if limit != strconv.Itoa(96<<20) {
					t.Errorf("memory limit after update = %q", limit)
				}
				resp, _ := e.d.RS.ContainerStatus(ctx, id, false)
				if resp.GetStatus().GetResources().GetLinux().GetMemoryLimitInBytes() != 96<<20 {
					t.Errorf("status resources after update: %v", resp.GetStatus().GetResources())
				}
			}

			// Image USER by name, resolved against the image's /etc/passwd; default caps.
			ucfg := e.ctrConfig("by-name", "sleep", "1000")
			ucfg.Image = imgSpec(strings.TrimSuffix(e.image, ":1") + ":user")
			uid := e.run(podID, pod, ucfg)
			if out, _ := e.exec(uid, "id", "-u"); out != "1000" {
				t.Errorf("image USER app ran as uid %q", out)
			}
			env, _ := e.exec(id, "env")
			if !strings.Contains(env, "FROM_IMAGE=yes") {
				t.Errorf("image env missing: %q", env)
			}
			_ = e.d.RS.RemovePodSandbox(ctx, podID)
		})
	}
}

func TestExecSync(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("exec-"+handler, handler)
			id := e.run(podID, pod, e.ctrConfig("sleeper", "sleep", "1000"))
			stdout, stderr, err := e.d.RS.ExecSync(ctx, id, []string{"sh", "-c", "echo out; echo err >&2; exit 5"}, 20*time.Second)
			if string(stdout) != "out\n" || string(stderr) != "err\n" {
				t.Errorf("stdout %q stderr %q", stdout, stderr)
			}
			if err == nil || !strings.Contains(err.Error(), "5") {
				t.Errorf("exit code 5 not reported: %v", err)
			}
			// Output byte for byte: a short one, a file, a pipeline that ends early (on
			// gVisor these once came back empty, or with "Segmentation fault").
			for _, c := range []struct {
				cmd  []string
				want string
			}{
				{[]string{"echo", "hello"}, "hello\n"},
				{[]string{"sh", "-c", "seq 1 100000 | head -n 3"}, "1\n2\n3\n"},
				{[]string{"sh", "-c", "printf 'a\\0b\\r\\n\\tc'"}, "a\x00b\r\n\tc"},
			} {
				stdout, stderr, err := e.d.RS.ExecSync(ctx, id, c.cmd, 20*time.Second)
				if err != nil || string(stdout) != c.want || len(stderr) != 0 {
					t.Errorf("exec %q: stdout %q stderr %q err %v, want %q", c.cmd, stdout, stderr, err, c.want)
				}
			}
			if stdout, _, err := e.d.RS.ExecSync(ctx, id, []string{"cat", "/proc/version"}, 20*time.Second); err != nil || !strings.HasPrefix(string(stdout), "Linux version") {
				t.Errorf("exec cat /proc/version: %q %v", stdout, err)
			}
			// A big output comes back whole (below kubelet's 16 MiB cap).
			stdout, _, err = e.d.RS.ExecSync(ctx, id, []string{"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"}, 30*time.Second)
			if err != nil || len(stdout) != 3000000 {
				t.Errorf("3 MB of output: got %d bytes, %v", len(stdout), err)
			}
			// A child left running holds both output streams: the exec still returns by
			// its timeout. (runsc and the shim return at once with the output; runc's
			// foreground exec waits for the child as containerd does by default, so there
			// the timeout ends it.)
			begin := time.Now()
			stdout, _, err = e.d.RS.ExecSync(ctx, id, []string{"sh", "-c", "sleep 300 & echo left-a-child"}, 5*time.Second)
			if err == nil && strings.TrimSpace(string(stdout)) != "left-a-child" {
				t.Errorf("exec that leaves a child holding its output: %q", stdout)
			}
			if handler != "runc" && err != nil {
				t.Errorf("exec that leaves a child holding its output: %v", err)
			}
			if d := time.Since(begin); d > 30*time.Second {
				t.Errorf("exec that leaves a child holding its output returned after %v", d)
			}
			// Timeout: an error that says so, and the process is gone.
			start := time.Now()
			_, _, err = e.d.RS.ExecSync(ctx, id, []string{"sleep", "77"}, 2*time.Second)
			if err == nil || !strings.Contains(err.Error(), "timed out") {
				t.Errorf("exec past its timeout: %v", err)
			}
			if time.Since(start) > 60*time.Second {
				t.Errorf("timed-out exec returned after %v", time.Since(start))
			}
			waitFor(t, 10*time.Second, "the timed-out process to be killed", func() (bool, string) {
				out, _, _ := e.d.RS.ExecSync(ctx, id, []string{"ps"}, 10*time.Second)
				return !strings.Contains(string(out), "sleep 77"), string(out)
			})
			_ = e.d.RS.RemovePodSandbox(ctx, podID)
		})
	}
}

func TestStopSignalAndTimeout(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	podID, pod := e.pod("stop", "runc")
	// PID 1 without a handler ignores SIGTERM: Stop must fall back to SIGKILL.
	stubborn := e.run(podID, pod, e.ctrConfig("stubborn", "sleep", "1000"))
	start := time.Now()
	if err := e.d.RS.StopContainer(ctx, stubborn, 2); err != nil {
		t.Fatal(err)
	}
	st := e.waitExit(stubborn)
	if st.ExitCode != 137 || time.Since(start) < 2*time.Second {
		t.Errorf("stubborn container: exit %d after %v, want 137 after the 2s grace", st.ExitCode, time.Since(start))
	}
	// One that handles SIGTERM exits with its own code.
	polite := e.run(podID, pod, e.ctrConfig("polite", "sh", "-c", "trap 'exit 42' TERM; echo trapped; while true; do sleep 0.1; done"))
	logPath := containerLogPath(t, e.d, polite)
	waitFor(t, 30*time.Second, "the TERM trap to be set", func() (bool, string) {
		l := readCRILog(t, logPath)
		return len(l) > 0 && l[0][2] == "trapped", fmt.Sprint(l)
	})
	if err := e.d.RS.StopContainer(ctx, polite, 30); err != nil {
		t.Fatal(err)
	}
	if st := e.waitExit(polite); st.ExitCode != 42 {
		t.Errorf("polite container exit %d, want 42", st.ExitCode)
	}
	if err := e.d.RS.StopContainer(ctx, polite, 30); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// Logs: the CRI format, a line longer than 16 KiB split into partial entries, reopen.
func TestContainerLogs(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	podID, pod := e.pod("logs", "runc")
	id := e.run(podID, pod, e.ctrConfig("long", "sh", "-c", "head -c 40000 /dev/zero | tr '\\0' a; echo; echo short; sleep 1000"))
	resp, _ := e.d.RS.ContainerStatus(ctx, id, false)
	logPath := resp.Status.LogPath
	var entries [][3]string
	waitFor(t, 10*time.Second, "the log lines", func() (bool, string) {
		entries = readCRILog(t, logPath)
		return len(entries) >= 4, fmt.Sprint(len(entries))
	})
	var long string
	var tags []string
	for _, l := range entries[:len(entries)-1] {
		long += l[2]
		tags = append(tags, l[1])
	}
	if long != strings.Repeat("a", 40000) || tags[len(tags)-1] != "F" || tags[0] != "P" {
		t.Errorf("long line: %d bytes, tags %v", len(long), tags)
	}
	if last := entries[len(entries)-1]; last != [3]string{"stdout", "F", "short"} {
		t.Errorf("last entry %v", last)
	}
	// kubelet rotates: rename, then ReopenContainerLog; new output goes to a new file.
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := e.d.RS.ReopenContainerLog(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(logPath); err != nil {
		t.Errorf("no new log file after reopen: %v", err)
	}
	if _, _, err := e.d.RS.ExecSync(ctx, id, []string{"sh", "-c", "echo after-rotation > /proc/1/fd/1"}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "output after rotation in the new file", func() (bool, string) {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "stdout F after-rotation"), string(b)
	})
}

// A container keeps running and logging while the daemon is killed; one that exits
// meanwhile reports its real exit code and time afterwards, with no log line lost.
func TestContainerSurvivesDaemonKill(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			podID, pod := e.pod("survive-"+handler, handler)
			id := e.run(podID, pod, e.ctrConfig("counter", "sh", "-c", "i=0; while [ $i -lt 40 ]; do echo line-$i; i=$((i+1)); sleep 0.1; done; exit 4"))
			keeper := e.run(podID, pod, e.ctrConfig("keeper", "sleep", "1000"))
			// The counter logs while the daemon runs, then is killed.
			logPath := containerLogPath(t, e.d, id)
			waitFor(t, 30*time.Second, "the counter's first lines", func() (bool, string) {
				n := len(readCRILog(t, logPath))
				return n >= 3, fmt.Sprint(n, " lines")
			})
			p := runningProcess(t, e.d, id)
			killed := time.Now()
			e.d.Kill()
			p.waitExitedWhileDown(t) // the counter logs on and finishes while no daemon runs
			restarted := time.Now()
			e.d.Start()
			ctx := ctxT(t)
			resp, err := e.d.RS.ContainerStatus(ctx, id, false)
			if err != nil {
				t.Fatal(err)
			}
			st := resp.Status
			if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 4 {
				t.Errorf("after restart: %v exit %d, want EXITED 4", st.State, st.ExitCode)
			}
			if fin := time.Unix(0, st.FinishedAt); fin.Before(killed) || fin.After(restarted) {
				t.Errorf("finish time %v is not when it exited, between the kill (%v) and the restart (%v)", fin, killed, restarted)
			}
			var lines []string
			for _, l := range readCRILog(t, st.LogPath) {
				lines = append(lines, l[2])
			}
			for i := 0; i < 40; i++ {
				if i >= len(lines) || lines[i] != "line-"+strconv.Itoa(i) {
					t.Fatalf("log lines lost or reordered: %v", lines)
				}
			}
			kr, err := e.d.RS.ContainerStatus(ctx, keeper, false)
			if err != nil || kr.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Errorf("running container after restart: %v %v", kr.GetStatus().GetState(), err)
			}
			if out, _ := e.exec(keeper, "echo", "still-here"); out != "still-here" {
				t.Errorf("exec after restart: %q", out)
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// verboseInfo decodes ContainerStatus verbose info.
func verbosePid(t *testing.T, d *Daemon, id string) int {
	resp, err := d.RS.ContainerStatus(context.Background(), id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	_ = json.Unmarshal([]byte(resp.Info["info"]), &info)
	return info.Pid
}

var _ = syscall.Kill

// OOMKilled and the termination message reach ContainerStatus.
func TestContainerOOMAndTerminationMessage(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	podID, pod := e.pod("oom", "runc")
	cfg := e.ctrConfig("hog", "sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo $x | wc -c")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}
	st := e.waitExit(e.run(podID, pod, cfg))
	if st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Errorf("memory hog: reason %q exit %d, want OOMKilled 137", st.Reason, st.ExitCode)
	}

	// kubelet mounts a host file at the termination message path; its content is the
	// message.
	msgFile := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(msgFile, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	cfg = e.ctrConfig("says-why", "sh", "-c", "echo 'config file missing' > /dev/termination-log; exit 2")
	cfg.Mounts = []*runtimeapi.Mount{{HostPath: msgFile, ContainerPath: "/dev/termination-log"}}
	st = e.waitExit(e.run(podID, pod, cfg))
	if st.ExitCode != 2 || strings.TrimSpace(st.Message) != "config file missing" {
		t.Errorf("termination message: exit %d message %q", st.ExitCode, st.Message)
	}
	// A missing host path is created as a directory (kubelet's untyped hostPath); one that
	// cannot be (its parent is a file) is refused by name, and nothing is left.
	cfg = e.ctrConfig("bad-mount", "true")
	bad := filepath.Join(msgFile, "data")
	cfg.Mounts = []*runtimeapi.Mount{{HostPath: bad, ContainerPath: "/data"}}
	_, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "host_path") {
		t.Errorf("host path that cannot be created: %v", err)
	}
	// An image that is not pulled is refused by name.
	cfg = e.ctrConfig("no-image", "true")
	cfg.Image = imgSpec("127.0.0.1:1/not/pulled:1")
	_, err = e.d.RS.CreateContainer(ctx, podID, cfg, pod)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "not/pulled") {
		t.Errorf("image not pulled: %v", err)
	}
	ctrs, _ := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
	if len(ctrs) != 2 {
		t.Errorf("refused containers were listed: %d containers", len(ctrs))
	}
}

// A container whose CreateContainer never finished (the daemon died between its first
// record and its last) is undone at the next start: no record, rootfs, monitor or runtime
// state remains, and the pod carries on.
func TestRestartCleansHalfCreatedContainer(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			podID, pod := e.pod("half-ctr-"+handler, handler)
			ctx := ctxT(t)
			id, err := e.d.RS.CreateContainer(ctx, podID, e.ctrConfig("half", "sleep", "1000"), pod)
			if err != nil {
				t.Fatal(err)
			}
			e.d.Kill()
			editRecord(t, e.d, "containers", id, func(_, _ []byte) ([]byte, []byte) {
				return nil, []byte(`{"state":"creating"}`)
			})
			e.d.Start()
			if _, err := e.d.RS.ContainerStatus(ctx, id, false); status.Code(err) != codes.NotFound {
				t.Errorf("half-created container after restart: %v, want NotFound", err)
			}
			if _, err := os.Stat(filepath.Join(e.d.RunRoot, "containers", id)); !os.IsNotExist(err) {
				t.Errorf("run dir of the half-created container is still there (%v)", err)
			}
			waitFor(t, 15*time.Second, "its monitor to end", func() (bool, string) {
				procs := processesMentioning(id, 0)
				return len(procs) == 0, strings.Join(procs, "; ")
			})
			// The pod still works.
			ok := e.run(podID, pod, e.ctrConfig("after", "true"))
			if st := e.waitExit(ok); st.ExitCode != 0 {
				t.Errorf("container after the cleanup: exit %d", st.ExitCode)
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Pods get containerd 2's network defaults: a server on a port below 1024 needs no
// capability (here a non-root user on runc, and runsc, whose sandbox uses the pod netns
// through the host kernel), and the pod's netns says so.
func TestPodServesPrivilegedPort(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			podID, pod := e.pod("port80-"+handler, handler)
			cfg := e.ctrConfig("server", "sh", "-c", "while true; do echo hello-80 | nc -l -p 80; done")
			cfg.Image = imgSpec(strings.TrimSuffix(e.image, ":1") + ":user") // USER app (1000)
			id := e.run(podID, pod, cfg)
			waitFor(t, 15*time.Second, "the server on port 80", func() (bool, string) {
				out, _, err := e.d.RS.ExecSync(ctxT(t), id, []string{"nc", "127.0.0.1", "80"}, 5*time.Second)
				return err == nil && strings.Contains(string(out), "hello-80"), fmt.Sprint(string(out), err)
			})
			if handler == "runc" {
				if out, _ := e.exec(id, "cat", "/proc/sys/net/ipv4/ping_group_range"); strings.Join(strings.Fields(out), " ") != "0 2147483647" {
					t.Errorf("ping_group_range %q", out)
				}
			}
			if err := e.d.RS.RemovePodSandbox(ctxT(t), podID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Masked and read-only paths outside /proc and /sys hold on every handler: gVisor ignores
// linux.maskedPaths and linux.readonlyPaths, so for runsc the kind turns them into mounts.
func TestMaskedAndReadonlyPaths(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("paths-"+handler, handler)
			cfg := e.ctrConfig("paths", "sleep", "1000")
			cfg.Linux.SecurityContext.ReadonlyPaths = []string{"/tmp"}
			cfg.Linux.SecurityContext.MaskedPaths = []string{"/etc/passwd"}
			id := e.run(podID, pod, cfg)
			_, stderr, err := e.d.RS.ExecSync(ctx, id, []string{"touch", "/tmp/x"}, 20*time.Second)
			if err == nil || !strings.Contains(string(stderr), "Read-only file system") {
				t.Errorf("touch in a read-only path: %v %q", err, stderr)
			}
			if out, stderr, err := e.d.RS.ExecSync(ctx, id, []string{"cat", "/etc/passwd"}, 20*time.Second); err != nil || len(out) != 0 {
				t.Errorf("a masked file reads %q (%q, %v), want nothing", out, stderr, err)
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An image whose /etc/passwd is a FIFO (which would block a plain open for ever) or whose
// /etc/group is a device node (which a plain open would open as root) is refused by name
// at CreateContainer, at once, and nothing of the container is left.
func TestSpecialFilesInImage(t *testing.T) {
	ctx := ctxT(t)
	reg := startRegistry(t, nil)
	for tag, f := range map[string]File{
		"fifo":   {Path: "/etc/passwd", Fifo: true},
		"device": {Path: "/etc/group", CharDev: [2]int64{1, 3}},
	} {
		files := []File{f}
		if tag == "device" {
			files = append(files, File{Path: "/etc/passwd", Content: "app:x:1000:1000::/:/bin/sh\n"})
		}
		reg.Push(t, "test/hostile", tag, ImageSpec{
			Layers: []Layer{busyboxLayer(t), toolsLayer(), {Files: files}},
			Config: ocispec.ImageConfig{Env: []string{"PATH=/bin"}},
		}, nil)
	}
	e := newContainerEnv(t, withRegistries(reg.Addr))
	for _, tag := range []string{"fifo", "device"} {
		t.Run(tag, func(t *testing.T) {
			e.t = t
			ref := reg.Ref("test/hostile", tag)
			if _, err := e.d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
				t.Fatal(err)
			}
			podID, pod := e.pod("hostile-"+tag, "runc")
			cfg := e.ctrConfig("app", "true")
			cfg.Image = imgSpec(ref)
			cfg.Linux.SecurityContext.RunAsUsername = "app"
			done := make(chan error, 1)
			go func() {
				_, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("CreateContainer still blocked after 30 s")
			}
			want := map[string]string{"fifo": "read the image's /etc/passwd: is a named pipe (FIFO), not a regular file", "device": "read the image's /etc/group: is a character device, not a regular file"}[tag]
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
				t.Errorf("CreateContainer = %v, want InvalidArgument containing %q", err, want)
			}
			if ctrs, _ := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID}); len(ctrs) != 0 {
				t.Errorf("containers left: %v", ctrs)
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

// The pod files are no way to fill the node: hostname and resolv.conf are read-only, and
// /etc/hosts lives on the pod's own tmpfs (with its /dev/shm), so a container writing to it
// runs out of space there, not on the node's /run.
func TestPodFilesBounded(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("files-"+handler, handler)
			id := e.run(podID, pod, e.ctrConfig("writer", "sleep", "1000"))
			for _, f := range []string{"/etc/resolv.conf", "/etc/hostname"} {
				if out, _ := e.exec(id, "sh", "-c", "echo x >> "+f+" && echo written || echo refused"); out != "refused" {
					t.Errorf("append to %s: %q, want refused (read-only)", f, out)
				}
			}
			// The pod's tmpfs (its /dev/shm's 64 MiB and the files' 1 MiB) bounds it.
			out, _ := e.exec(id, "sh", "-c", "dd if=/dev/zero bs=1M count=96 >> /etc/hosts 2>/dev/null; echo $?; wc -c < /etc/hosts")
			lines := strings.Fields(out)
			if len(lines) != 2 || lines[0] == "0" {
				t.Fatalf("96 MiB into /etc/hosts: %q, want a failed dd and its size", out)
			}
			if n, _ := strconv.Atoi(lines[1]); n > 65<<20 {
				t.Errorf("/etc/hosts grew to %d bytes, past the pod tmpfs's 65 MiB", n)
			}
			if out, _ := e.exec(id, "grep", "-c", "localhost", "/etc/hosts"); out == "0" {
				t.Errorf("/etc/hosts lost its entries: %q", out)
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

// A container whose create fails and whose cleanup then fails too (a failpoint, twice) is
// not dropped with what it holds: it stays listed as UNKNOWN (CleanupFailed) with its name
// reserved, across a kill -9 of the daemon, until a background retry cleans it up; then
// nothing of it is left.
func TestFailedCleanupIsRetried(t *testing.T) {
	e := newContainerEnv(t)
	e.d.Env = []string{"RTSHIMD_FAILPOINTS=container-cleanup=2"}
	e.d.Restart(false)
	ctx := ctxT(t)
	podID, pod := e.pod("cleanup-retry", "runc")
	cfg := e.ctrConfig("broken", "/no/such/binary")
	if _, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod); err == nil {
		t.Fatal("CreateContainer of a missing binary succeeded")
	}
	ctrs, err := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
	if err != nil || len(ctrs) != 1 || ctrs[0].State != runtimeapi.ContainerState_CONTAINER_UNKNOWN {
		t.Fatalf("after a failed create and a failed cleanup: containers %v (%v), want one UNKNOWN", ctrs, err)
	}
	id := ctrs[0].Id
	st, err := e.d.RS.ContainerStatus(ctx, id, false)
	if err != nil || st.Status.Reason != "CleanupFailed" || !strings.Contains(st.Status.Message, "failpoint container-cleanup") {
		t.Errorf("status of the kept container: %v %v", st.GetStatus(), err)
	}
	if _, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod); status.Code(err) != codes.AlreadyExists {
		t.Errorf("the name of the kept container is free again too early: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.d.RunRoot, "containers", id)); err != nil {
		t.Errorf("the kept container's directory is gone before its cleanup succeeded: %v", err)
	}
	// A daemon killed meanwhile takes it up again at recovery (where its cleanup fails
	// once more: the failpoint counts afresh) and keeps retrying.
	e.d.Restart(true)
	if st, err := e.d.RS.ContainerStatus(ctx, id, false); err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_UNKNOWN {
		t.Errorf("after a restart, the kept container: %v %v", st.GetStatus(), err)
	}
	waitFor(t, 60*time.Second, "the background cleanup to succeed", func() (bool, string) {
		ctrs, err := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
		return err == nil && len(ctrs) == 0, fmt.Sprint(len(ctrs), err)
	})
	if p := filepath.Join(e.d.RunRoot, "containers", id); !isGone(p) {
		t.Errorf("%s left after the cleanup", p)
	}
	if slices.Contains(stateEntries(filepath.Join(e.d.State, "containers")), id) {
		t.Errorf("record of %s left after the cleanup", id[:12])
	}
	// The name is free again: a good container of that name runs.
	cfg.Command = []string{"true"}
	id = e.run(podID, pod, cfg)
	if st := e.waitExit(id); st.ExitCode != 0 {
		t.Errorf("container after the cleanup: exit %d", st.ExitCode)
	}
}
