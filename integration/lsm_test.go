//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// TestSecurityModulesNeverSilent: an AppArmor or SELinux request is applied or refused
// by name, never dropped unsaid. This node has neither module enabled, so Localhost
// AppArmor profiles are refused (pod and container, new field and deprecated string),
// while RuntimeDefault and Unconfined run; where AppArmor is enabled a profile that is not
// loaded is refused all the same. SELinux labels run without the label, as with containerd
// and CRI-O (kubelet sends a pod's seLinuxOptions to every node), and a warning names
// them; so does a mount's selinux_relabel. strict_selinux refuses both (TestStrictSELinux).
func TestSecurityModulesNeverSilent(t *testing.T) {
	b, _ := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	aaReason := "AppArmor is not enabled on this node"
	if strings.TrimSpace(string(b)) == "Y" {
		aaReason = "no AppArmor profile of that name is loaded"
	}

	e := newContainerEnv(t)
	ctx := ctxT(t)
	localhost := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "rtshimd-test-no-such-profile"}
	label := &runtimeapi.SELinuxOption{Type: "spc_t"}

	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			// Pod level: refused before anything is made.
			pod := podConfig("lsm-pod-"+handler, runtimeapi.NamespaceMode_CONTAINER)
			pod.Linux.SecurityContext.Apparmor = localhost
			_, err := e.d.RS.RunPodSandbox(ctx, pod, handler)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `config.linux.security_context.apparmor.localhost_ref "rtshimd-test-no-such-profile": `+aaReason) {
				t.Errorf("pod with a Localhost AppArmor profile: %v", err)
			}
			assertNoSandboxes(t, e.d)

			// The pod asks for an SELinux label: it runs (labelled where SELinux is on).
			podCfg := podConfig("lsm-"+handler, runtimeapi.NamespaceMode_CONTAINER)
			podCfg.LogDirectory = filepath.Join(e.logs, podCfg.Metadata.Name)
			podCfg.Linux.SecurityContext.SelinuxOptions = label
			podID, err := e.d.RS.RunPodSandbox(ctx, podCfg, handler)
			if err != nil {
				t.Fatalf("pod with an SELinux label: %v", err)
			}
			for _, c := range []struct {
				name string
				set  func(*runtimeapi.LinuxContainerSecurityContext)
				want string // "" = runs
			}{
				{"localhost", func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.Apparmor = localhost },
					`config.linux.security_context.apparmor.localhost_ref "rtshimd-test-no-such-profile": ` + aaReason},
				{"deprecated-localhost", func(sc *runtimeapi.LinuxContainerSecurityContext) {
					sc.ApparmorProfile = "localhost/rtshimd-test-no-such-profile"
				}, `config.linux.security_context.apparmor_profile "rtshimd-test-no-such-profile": ` + aaReason},
				{"runtime-default", func(sc *runtimeapi.LinuxContainerSecurityContext) {
					sc.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
				}, ""},
				{"unconfined", func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.ApparmorProfile = "unconfined" }, ""},
				{"selinux", func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.SelinuxOptions = label }, ""},
			} {
				cfg := e.ctrConfig("lsm-"+c.name, "true")
				c.set(cfg.Linux.SecurityContext)
				id, err := e.d.RS.CreateContainer(ctx, podID, cfg, podCfg)
				if c.want == "" {
					if err != nil {
						t.Errorf("%s: %v", c.name, err)
						continue
					}
					if err := e.d.RS.StartContainer(ctx, id); err != nil {
						t.Errorf("%s: start: %v", c.name, err)
					}
					if st := e.waitExit(id); st.ExitCode != 0 {
						t.Errorf("%s: exit %d", c.name, st.ExitCode)
					}
					continue
				}
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: CreateContainer = %v, want InvalidArgument containing %q", c.name, err, c.want)
				}
			}
			// A mount asks for relabeling (critest's volume specs do on every node): mounted as it is.
			cfg := e.ctrConfig("lsm-relabel", "test", "-d", "/relabel")
			cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/relabel", HostPath: t.TempDir(), SelinuxRelabel: true}}
			if id, err := e.d.RS.CreateContainer(ctx, podID, cfg, podCfg); err != nil {
				t.Errorf("selinux_relabel: %v", err)
			} else if err := e.d.RS.StartContainer(ctx, id); err != nil {
				t.Errorf("selinux_relabel: start: %v", err)
			} else if st := e.waitExit(id); st.ExitCode != 0 {
				t.Errorf("selinux_relabel: exit %d", st.ExitCode)
			}
			ctrs, err := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
			if err != nil || len(ctrs) != 4 {
				t.Errorf("containers of the pod: %d (%v), want the 4 that ran; nothing of the refused ones", len(ctrs), err)
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

// TestStrictSELinux: with strict_selinux, a pod or container asking for an SELinux label, or
// a mount asking for relabeling, on a node without SELinux is refused by field, and nothing
// of it is left.
func TestStrictSELinux(t *testing.T) {
	if _, err := os.Stat("/sys/fs/selinux/enforce"); err == nil {
		t.Skip("SELinux is enabled here: labels are applied, strict_selinux changes nothing")
	}
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) { c.StrictSELinux = true }))
	ctx := ctxT(t)
	label := &runtimeapi.SELinuxOption{Type: "spc_t"}
	const want = `config.linux.security_context.selinux_options "type:spc_t": SELinux is not enabled on this node`
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			pod := podConfig("strict-pod-"+handler, runtimeapi.NamespaceMode_CONTAINER)
			pod.Linux.SecurityContext.SelinuxOptions = label
			if _, err := e.d.RS.RunPodSandbox(ctx, pod, handler); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
				t.Errorf("pod with an SELinux label: %v, want InvalidArgument containing %q", err, want)
			}
			assertNoSandboxes(t, e.d)
			podID, podCfg := e.pod("strict-"+handler, handler)
			cfg := e.ctrConfig("strict-selinux", "true")
			cfg.Linux.SecurityContext.SelinuxOptions = label
			if _, err := e.d.RS.CreateContainer(ctx, podID, cfg, podCfg); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
				t.Errorf("container with an SELinux label: %v, want InvalidArgument containing %q", err, want)
			}
			cfg = e.ctrConfig("strict-relabel", "true")
			vol := filepath.Join(t.TempDir(), "vol")
			cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/relabel", HostPath: vol, SelinuxRelabel: true}}
			wantRelabel := `config.mounts[0].selinux_relabel is set for config.mounts[0].host_path "` + vol + `": SELinux is not enabled on this node`
			if _, err := e.d.RS.CreateContainer(ctx, podID, cfg, podCfg); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), wantRelabel) {
				t.Errorf("container with selinux_relabel: %v, want InvalidArgument containing %q", err, wantRelabel)
			}
			if ctrs, err := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID}); err != nil || len(ctrs) != 0 {
				t.Errorf("containers of the pod: %d (%v), want none", len(ctrs), err)
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
