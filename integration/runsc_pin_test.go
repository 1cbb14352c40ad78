//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"testing"
)

// A runsc pod removed in kubelet's order — StopPodSandbox (the sandbox container deleted
// with the sandbox) and only then RemoveContainer — removes each container at the first
// call and leaves nothing in the handler's runtime root: no state and not runsc's shared
// null network namespace, a bind mount it never removes itself. The last state to go is a
// container's here, not the sandbox's; the whole node suite left that pin mounted.
func TestRunscRootEmptyAfterKubeletOrder(t *testing.T) {
	e := newContainerEnv(t)
	for _, handler := range []string{"runsc", "runsc-debian"} {
		t.Run(handler, func(t *testing.T) {
			root := e.d.Cfg.Handlers[handler].RuntimeRoot
			pod, cfg := e.pod("pin-"+handler, handler)
			ctr := e.run(pod, cfg, e.ctrConfig("sleeper", "sleep", "1000"))
			ctx := ctxT(t)
			if err := e.d.RS.StopPodSandbox(ctx, pod); err != nil {
				t.Fatal(err)
			}
			if err := e.d.RS.RemoveContainer(ctx, ctr); err != nil {
				t.Fatalf("RemoveContainer after StopPodSandbox: %v", err)
			}
			if m := mountsUnder(root); len(m) != 0 {
				t.Errorf("mounts left under %s once the pod's last container is removed: %v", root, m)
			}
			entries, err := os.ReadDir(root)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			for _, en := range entries {
				t.Errorf("left in %s: %s", root, filepath.Join(root, en.Name()))
			}
			if err := e.d.RS.RemovePodSandbox(ctx, pod); err != nil {
				t.Fatal(err)
			}
		})
	}
}
