//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// readBundleSpec reads the config.json rtshimd wrote in a bundle.
func readBundleSpec(t *testing.T, dir string) *specs.Spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s/config.json: %v", dir, err)
	}
	return &s
}

// The runc row's pod_annotations and privileged_without_host_devices reach the bundles the
// runtime is given: the pod annotations they match on the sandbox container's spec and on
// each container's, the others on none, rtshimd's own names kept; a privileged container
// with none of the host's devices, which runs. The pod's record keeps the row's settings:
// a container created after the row changed and the daemon restarted gets the same.
func TestHandlerRowSettings(t *testing.T) {
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Handlers["runc"].PodAnnotations = []string{"io.katacontainers.*", "rtshimd.test/pass-*", "io.kubernetes.cri.sandbox-*"}
		c.Handlers["runc"].PrivilegedWithoutHostDevices = true
	}))
	ctx := ctxT(t)
	// A shared PID namespace: runc's pod gets a sandbox container, and so a bundle.
	pod := podConfig("row-settings", runtimeapi.NamespaceMode_POD)
	pod.LogDirectory = filepath.Join(e.logs, "row-settings")
	pod.Annotations["io.katacontainers.config.hypervisor.default_vcpus"] = "2"
	pod.Annotations["rtshimd.test/pass-me"] = "passed"
	pod.Annotations["io.kubernetes.cri.sandbox-name"] = "another-pod"
	pod.Linux.SecurityContext.Privileged = true
	podID, err := e.d.RS.RunPodSandbox(ctx, pod, "runc")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.d.RS.PodSandboxStatus(ctx, podID, true)
	if err != nil {
		t.Fatal(err)
	}
	info := decodeInfo(t, resp.Info).Metadata
	if !info.Infra || info.BundleDir == "" {
		t.Fatalf("runc pod with a shared PID namespace has no sandbox container bundle: %+v", info)
	}
	check := func(what string, s *specs.Spec) {
		t.Helper()
		a := s.Annotations
		for k, want := range map[string]string{
			"io.katacontainers.config.hypervisor.default_vcpus": "2",
			"rtshimd.test/pass-me":                              "passed",
			"io.kubernetes.cri.sandbox-name":                    "row-settings",
		} {
			if a[k] != want {
				t.Errorf("%s: annotation %s = %q, want %q", what, k, a[k], want)
			}
		}
		if v, ok := a["rtshimd.test/annotation"]; ok {
			t.Errorf("%s: unmatched pod annotation rtshimd.test/annotation = %q reached the spec", what, v)
		}
	}
	check("sandbox container", readBundleSpec(t, info.BundleDir))
	if log := e.d.Log(); !strings.Contains(log, "are reserved") || !strings.Contains(log, "io.kubernetes.cri.sandbox-name") {
		t.Error("no warning names the pod annotation that was matched but is rtshimd's own")
	}

	ctr := func(name string) string {
		t.Helper()
		cfg := e.ctrConfig(name, "sleep", "1000")
		cfg.Linux.SecurityContext.Privileged = true
		id := e.run(podID, pod, cfg)
		s := readBundleSpec(t, filepath.Join(e.d.RunRoot, "containers", id))
		check(name, s)
		// Privileged, but given none of the host's devices, and the device cgroup of an
		// unprivileged container (deny all first), as containerd does.
		if len(s.Linux.Devices) != 0 {
			t.Errorf("%s: privileged container's spec has %d devices (%s, ...), want none of the host's", name, len(s.Linux.Devices), s.Linux.Devices[0].Path)
		}
		if r := s.Linux.Resources.Devices; len(r) == 0 || r[0].Allow {
			t.Errorf("%s: device rules %+v, want deny-all first", name, r)
		}
		if s.Linux.MaskedPaths != nil || s.Linux.Seccomp != nil {
			t.Errorf("%s: masked paths %v, seccomp %v: not run privileged", name, s.Linux.MaskedPaths, s.Linux.Seccomp)
		}
		// /dev/kmsg and /dev/loop0 are on this host's /dev, and so in any privileged
		// container's but these.
		if out, _ := e.exec(id, "ls", "/dev"); !strings.Contains(out, "null") || strings.Contains(out, "kmsg") || strings.Contains(out, "loop0") {
			t.Errorf("%s: /dev in the container: %q, want runc's default devices only", name, out)
		}
		return id
	}
	ctr("before")

	// The row loses its settings; the pod keeps those it started with.
	e.d.Cfg.Handlers["runc"].PodAnnotations, e.d.Cfg.Handlers["runc"].PrivilegedWithoutHostDevices = nil, false
	e.d.WriteConfig()
	e.d.Restart(false)
	ctr("after-restart")

	if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
}

// device_ownership_from_security_context on a row: a device the container's config names
// is owned, inside it, by its runAsUser and runAsGroup, so that user can open it; a pod
// keeps the setting it started with across a restart that took it off the row; a row
// without it leaves the host node's owner.
func TestDeviceOwnershipFromSecurityContext(t *testing.T) {
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Handlers["runc"].DeviceOwnershipFromSecurityContext = true
	}))
	owner := func(podID string, pod *runtimeapi.PodSandboxConfig, name string) string {
		t.Helper()
		cfg := e.ctrConfig(name, "sleep", "1000")
		cfg.Devices = []*runtimeapi.Device{{HostPath: "/dev/zero", ContainerPath: "/dev/myzero", Permissions: "rw"}}
		cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: 1000}
		cfg.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: 2000}
		id := e.run(podID, pod, cfg)
		out, _ := e.exec(id, "ls", "-ln", "/dev/myzero")
		f := strings.Fields(out)
		if len(f) < 4 {
			t.Fatalf("%s: ls -ln /dev/myzero: %q", name, out)
		}
		if name != "other-row" {
			if got, _ := e.exec(id, "sh", "-c", "head -c 3 /dev/myzero | wc -c"); strings.TrimSpace(got) != "3" {
				t.Errorf("%s: uid 1000 reading its device: %q", name, got)
			}
		}
		return f[2] + ":" + f[3]
	}
	podID, pod := e.pod("dev-owner", "runc")
	if got := owner(podID, pod, "on"); got != "1000:2000" {
		t.Errorf("device owner %s, want the container's 1000:2000", got)
	}
	e.d.Cfg.Handlers["runc"].DeviceOwnershipFromSecurityContext = false
	e.d.WriteConfig()
	e.d.Restart(false)
	if got := owner(podID, pod, "after-restart"); got != "1000:2000" {
		t.Errorf("after the row lost the setting and a restart: device owner %s, want the pod's setting kept (1000:2000)", got)
	}
	var st unix.Stat_t
	if err := unix.Stat("/dev/zero", &st); err != nil {
		t.Fatal(err)
	}
	otherID, other := e.pod("dev-owner-shim", "runc-shim")
	if got, want := owner(otherID, other, "other-row"), fmt.Sprintf("%d:%d", st.Uid, st.Gid); got != want {
		t.Errorf("a row without the setting: device owner %s, want the node's %s", got, want)
	}
}

// default_ulimits on a row are the limits of its containers' processes, on every kind of
// runtime; a row without them leaves the runtime's own.
func TestDefaultUlimits(t *testing.T) {
	rows := []string{"runc", "runsc", "runc-shim"}
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) {
		for _, h := range rows {
			c.Handlers[h].DefaultUlimits = []string{"nofile=1000:2000", "nproc=3000"}
		}
	}))
	for _, h := range append(rows, "runsc-debian") {
		t.Run(h, func(t *testing.T) {
			e.t = t
			podID, pod := e.pod("ulimits-"+h, h)
			id := e.run(podID, pod, e.ctrConfig("c", "sleep", "1000"))
			out, _ := e.exec(id, "sh", "-c", "echo $(ulimit -n) $(ulimit -Hn) $(ulimit -u) $(ulimit -Hu)")
			if h == "runsc-debian" {
				// Not set on that row: the runtime's own.
				if f := strings.Fields(out); len(f) == 4 && f[1] == "2000" {
					t.Errorf("a row without default_ulimits got another row's: %q", out)
				}
				return
			}
			// The container's own process, as /proc/1/limits shows it.
			lim, _ := e.exec(id, "cat", "/proc/1/limits")
			for _, want := range [][]string{{"Max open files", "1000", "2000"}, {"Max processes", "3000", "3000"}} {
				found := false
				for _, l := range strings.Split(lim, "\n") {
					if rest, ok := strings.CutPrefix(l, want[0]); ok {
						f := strings.Fields(rest)
						found = len(f) >= 2 && f[0] == want[1] && f[1] == want[2]
					}
				}
				if !found {
					t.Errorf("the container's process: %s %s/%s, want in:\n%s", want[0], want[1], want[2], lim)
				}
			}
			// An exec'd process: the same, but for the soft open files limit, which Debian's
			// runc 1.1.5 raises to the hard one in its exec (Go 1.19's runtime does it;
			// opencontainers/runc#4195, fixed in runc 1.1.13).
			if f := strings.Fields(out); len(f) != 4 || f[1] != "2000" || f[2] != "3000" || f[3] != "3000" || (f[0] != "1000" && f[0] != "2000") {
				t.Errorf("exec'd: nofile soft/hard and nproc soft/hard = %q, want 1000 (or 2000) 2000 3000 3000", out)
			}
		})
	}
}

// seccomp_profile on a row is what RuntimeDefault means there: a profile that refuses
// mkdir refuses it in a RuntimeDefault container on runc and the runc shim; an Unconfined
// container on the row, and a RuntimeDefault one on a row without it (Docker's default),
// make directories.
func TestRowSeccompProfile(t *testing.T) {
	var prof string
	e := newContainerEnv(t, withConfig(func(d *Daemon, c *config.Config) {
		prof = filepath.Join(d.Dir, "no-mkdir.json")
		if err := os.WriteFile(prof, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Handlers["runc"].SeccompProfile = prof
		c.Handlers["runc-shim"].SeccompProfile = prof
	}))
	mkdir := func(h string, typ runtimeapi.SecurityProfile_ProfileType) string {
		t.Helper()
		podID, pod := e.pod(fmt.Sprintf("seccomp-%s-%d", h, typ), h)
		cfg := e.ctrConfig("c", "sleep", "1000")
		cfg.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: typ}
		id := e.run(podID, pod, cfg)
		out, _ := e.exec(id, "sh", "-c", "mkdir /tmp/d 2>&1 && echo made; true")
		return out
	}
	for _, h := range []string{"runc", "runc-shim"} {
		if out := mkdir(h, runtimeapi.SecurityProfile_RuntimeDefault); !strings.Contains(out, "Operation not permitted") {
			t.Errorf("%s, RuntimeDefault with the row's profile: mkdir said %q, want refused", h, out)
		}
		if out := mkdir(h, runtimeapi.SecurityProfile_Unconfined); out != "made" {
			t.Errorf("%s, Unconfined: mkdir said %q", h, out)
		}
	}
	if out := mkdir("runsc", runtimeapi.SecurityProfile_RuntimeDefault); out != "made" {
		t.Errorf("runsc (no seccomp_profile on its row), RuntimeDefault: mkdir said %q, want Docker's default, which allows it", out)
	}
}
