package container_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/container/containertest"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
)

// A container asking for a recursive_read_only mount in a pod whose row lacks the feature
// recursive_read_only_mounts (the fake row) is refused by the node, naming the field:
// kubelet asks only where Status advertises it, other clients need not.
func TestRecursiveReadOnlyRefusedWithoutFeature(t *testing.T) {
	e := containertest.NewEnv(t, sandboxtest.Plans["namespaces"])
	sbs, m := e.Managers()
	ctx := context.Background()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := containertest.CtrConfig("app", "busybox")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: t.TempDir(), Readonly: true, RecursiveReadOnly: true}}
	_, err = m.Create(ctx, podID, cfg)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "config.mounts[0].recursive_read_only") {
		t.Errorf("recursive_read_only mount on a row without the feature: %v, want InvalidArgument naming config.mounts[0].recursive_read_only", err)
	}
}
