//go:build integration

package integration

import (
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A pod that shares its PID namespace (shareProcessNamespace) does so on every handler:
// its containers see each other's processes. On runsc, whose sentry has PID namespaces of
// its own, a container's PID entry must keep the path of the sandbox's (runsc's
// Sandbox.fixPidns joins it to the root PID namespace); without a path each container got
// a PID namespace of its own. A pod that does not share keeps its containers apart.
func TestPodSharedPIDNamespace(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range []string{"runc", "runsc", "runsc-debian", "runc-shim"} {
		for _, shared := range []bool{true, false} {
			name := handler + "-isolated"
			mode := runtimeapi.NamespaceMode_CONTAINER
			if shared {
				name, mode = handler+"-shared", runtimeapi.NamespaceMode_POD
			}
			t.Run(name, func(t *testing.T) {
				cfg := podConfig("pidns-"+name, mode)
				cfg.LogDirectory = filepath.Join(e.logs, name)
				pod, _ := e.podWith(cfg, handler)
				withMode := func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
					c.Linux.SecurityContext.NamespaceOptions.Pid = mode
					return c
				}
				e.run(pod, cfg, withMode(e.ctrConfig("first", "sleep", "4242")))
				second := e.run(pod, cfg, withMode(e.ctrConfig("second", "sleep", "1000")))
				out, _ := e.exec(second, "ps", "-o", "args")
				if sees := strings.Contains(out, "sleep 4242"); sees != shared {
					t.Errorf("the second container sees the first's process: %v, want %v; its ps:\n%s", sees, shared, out)
				}
				ctx := ctxT(t)
				if err := e.d.RS.StopPodSandbox(ctx, pod); err != nil {
					t.Fatal(err)
				}
				if err := e.d.RS.RemovePodSandbox(ctx, pod); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
