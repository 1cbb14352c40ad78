//go:build integration

package integration

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestSecurityModulesNeverSilent: an AppArmor or SELinux request is applied or refused
// by name, never dropped. This node has neither module enabled, so Localhost profiles and
// SELinux labels are refused (pod and container, new field and deprecated string), while
// RuntimeDefault and Unconfined run; where AppArmor is enabled a profile that is not
// loaded is refused all the same.
func TestSecurityModulesNeverSilent(t *testing.T) {
	b, _ := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	aaReason := "AppArmor is not enabled on this node"
	if strings.TrimSpace(string(b)) == "Y" {
		aaReason = "no AppArmor profile of that name is loaded"
	}
	_, err := os.Stat("/sys/fs/selinux/enforce")
	selinuxOn := err == nil

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
			if !selinuxOn {
				pod.Linux.SecurityContext.Apparmor = nil
				pod.Linux.SecurityContext.SelinuxOptions = label
				_, err = e.d.RS.RunPodSandbox(ctx, pod, handler)
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `config.linux.security_context.selinux_options "type:spc_t": SELinux is not enabled`) {
					t.Errorf("pod with an SELinux label: %v", err)
				}
			}
			assertNoSandboxes(t, e.d)

			podID, podCfg := e.pod("lsm-"+handler, handler)
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
				{"selinux", func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.SelinuxOptions = label },
					map[bool]string{false: `config.linux.security_context.selinux_options "type:spc_t": SELinux is not enabled`, true: ""}[selinuxOn]},
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
			ctrs, err := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
			if err != nil || len(ctrs) != 2 {
				t.Errorf("containers of the pod: %d (%v), want the 2 that ran; nothing of the refused ones", len(ctrs), err)
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
