//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Review 2026-12-06, R5: a checkpoint image is told by the manifest pulled for the
// reference the pod names, not by the image's ID. A tenant pushes a public image's exact
// config and layers (so the same image ID) under a manifest annotated as a checkpoint to
// its own repository and pulls it: after a restart (the cache by ID is gone) the public
// image's containers are still created and run as any, whether kubelet names the image by
// ID and reference, by reference alone or by ID alone; the tenant's reference is still a
// checkpoint image (its create goes down the restore path, and fails: the public image's
// files are no checkpoint); and a later pull of the tenant's tag from a plain manifest
// makes it a plain image again.
func TestCheckpointImageIsPerReference(t *testing.T) {
	e := newContainerEnv(t, withRestore())
	d := e.d
	ctx := ctxT(t)
	public := ImageSpec{
		Layers: []Layer{busyboxLayer(t), toolsLayer()},
		Config: ocispec.ImageConfig{Env: []string{"PATH=/bin", "WHO=kube-proxy"}},
	}
	e.reg.Push(t, "test/a", "1", public, nil)
	refA := e.reg.Ref("test/a", "1")
	pull := func(ref string) string {
		t.Helper()
		id, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil)
		if err != nil {
			t.Fatalf("PullImage(%s): %v", ref, err)
		}
		return id
	}
	id := pull(refA)
	pod, podCfg := e.pod("per-reference", "runc")
	// As kubelet sends it: the ID as image, the pod's reference as user_specified_image.
	spec := func(image, userSpecified string) *runtimeapi.ImageSpec {
		return &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: userSpecified}
	}
	n := 0
	runs := func(when string, img *runtimeapi.ImageSpec) {
		t.Helper()
		n++
		cfg := e.ctrConfig(fmt.Sprintf("plain-%d", n), "sleep", "3600")
		cfg.Image = img
		ctr, err := d.RS.CreateContainer(ctx, pod, cfg, podCfg)
		if err != nil {
			t.Fatalf("%s: CreateContainer of image %q (user_specified_image %q): %v", when, img.Image, img.UserSpecifiedImage, err)
		}
		if err := d.RS.StartContainer(ctx, ctr); err != nil {
			t.Fatalf("%s: StartContainer of image %q (user_specified_image %q): %v", when, img.Image, img.UserSpecifiedImage, err)
		}
		waitFor(t, 30*time.Second, when+": the container to run", func() (bool, string) {
			st, err := d.RS.ContainerStatus(ctx, ctr, false)
			if err != nil {
				return false, err.Error()
			}
			return st.Status.State == runtimeapi.ContainerState_CONTAINER_RUNNING, st.Status.State.String()
		})
		if out, _ := e.exec(ctr, "sh", "-c", "echo $WHO"); out != "kube-proxy" {
			t.Errorf("%s: the container sees WHO=%q, want the image's kube-proxy", when, out)
		}
		if err := d.RS.StopContainer(ctx, ctr, 0); err != nil {
			t.Fatal(err)
		}
		if err := d.RS.RemoveContainer(ctx, ctr); err != nil {
			t.Fatal(err)
		}
	}
	runs("before the tenant's pull", spec(id, refA))

	// The tenant's: the same config and layers, an annotated manifest.
	tenant := public
	tenant.Annotations = map[string]string{"io.kubernetes.cri-o.annotations.checkpoint.name": "kube-proxy"}
	e.reg.Push(t, "test/b", "1", tenant, nil)
	refB := e.reg.Ref("test/b", "1")
	if got := pull(refB); got != id {
		t.Fatalf("the tenant's image is %s, want the public image's ID %s", got, id)
	}
	restores := func(when string, img *runtimeapi.ImageSpec) {
		t.Helper()
		n++
		cfg := e.ctrConfig(fmt.Sprintf("checkpoint-%d", n), "sleep", "3600")
		cfg.Image = img
		ctr, err := d.RS.CreateContainer(ctx, pod, cfg, podCfg)
		if err == nil {
			t.Errorf("%s: image %q (user_specified_image %q) was created as a plain container %s, want it taken as a checkpoint image", when, img.Image, img.UserSpecifiedImage, ctr[:12])
			_ = d.RS.RemoveContainer(ctx, ctr)
			return
		}
		if !strings.Contains(err.Error(), "checkpoint image") {
			t.Errorf("%s: image %q (user_specified_image %q): %v; want the restore path's refusal of a checkpoint image", when, img.Image, img.UserSpecifiedImage, err)
		}
	}
	check := func(when string) {
		t.Helper()
		runs(when, spec(id, refA))
		runs(when+", by reference alone", spec(refA, ""))
		runs(when+", by ID alone", spec(id, ""))
		restores(when+", the tenant's reference", spec(id, refB))
		restores(when+", the tenant's reference alone", spec(refB, ""))
	}
	check("after the tenant's pull")
	d.Restart(false)
	check("after a restart")

	// The tenant's tag, now from a plain manifest: no checkpoint under it any more.
	e.reg.Push(t, "test/b", "1", public, nil)
	if got := pull(refB); got != id {
		t.Fatalf("the plain image under test/b:1 is %s, want %s", got, id)
	}
	runs("after a plain pull of the tenant's tag", spec(id, refB))
	d.Restart(false)
	runs("after a plain pull of the tenant's tag and a restart", spec(id, refB))
	runs("after a plain pull of the tenant's tag and a restart, the public reference", spec(id, refA))
	e.removePod(pod)
}
