//go:build integration

package integration

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// The Stream* list RPCs (kubelet's CRIListStreaming) answer what the unary ones do.
func TestListStreaming(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	podID, pod := e.pod("streamlist", "runc")
	e.run(podID, pod, e.ctrConfig("one", "sleep", "1000"))
	e.run(podID, pod, e.ctrConfig("two", "sleep", "1000"))
	endpoint := "unix://" + e.d.Socket
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(time.Minute).WithUseStreaming(true).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	is, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(time.Minute).WithUseStreaming(true).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := rs.ListPodSandbox(ctx, nil)
	if err != nil || len(pods) != 1 || pods[0].Id != podID {
		t.Errorf("streamed pods: %v, %v", pods, err)
	}
	ctrs, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
	if err != nil || len(ctrs) != 2 {
		t.Errorf("streamed containers: %d, %v", len(ctrs), err)
	}
	stats, err := rs.ListContainerStats(ctx, nil)
	if err != nil || len(stats) != 2 {
		t.Errorf("streamed container stats: %d, %v", len(stats), err)
	}
	pstats, err := rs.ListPodSandboxStats(ctx, nil)
	if err != nil || len(pstats) != 1 {
		t.Errorf("streamed pod stats: %d, %v", len(pstats), err)
	}
	imgs, err := is.ListImages(ctx, nil)
	unary, _ := e.d.IS.ListImages(ctx, nil)
	if err != nil || len(imgs) != len(unary) || len(imgs) == 0 {
		t.Errorf("streamed images: %d (unary %d), %v", len(imgs), len(unary), err)
	}
	_ = e.d.RS.RemovePodSandbox(ctx, podID)
}
