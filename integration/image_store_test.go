//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/image"
)

// withOwnImageStore adds the row runc-own: runc, with image_store = "separate".
func withOwnImageStore() daemonOption {
	return withConfig(func(d *Daemon, c *config.Config) {
		c.Handlers["runc-own"] = &config.Handler{RuntimePath: "/usr/sbin/runc", RuntimeRoot: d.RunRoot + "/runc-own", ImageStore: config.ImageStoreSeparate}
	})
}

// Images per handler (KEP-4216) through the real client: a row with image_store =
// "separate" has a store of its own. An image the shared store has is absent from it; a
// pod of the row cannot use the shared copy (the error names the row and kubelet's gate);
// pulled with the row's runtime_handler it is there, listed under the row's name, and the
// pod's containers run from it after the shared copy is removed, while a runc pod then
// cannot; an ImageSpec naming a handler of another store is refused in a container; its
// removal leaves the shared store alone; the store lies below the state root.
func TestImageStoreSeparate(t *testing.T) {
	e := newContainerEnv(t, withOwnImageStore())
	ctx := ctxT(t)
	d := e.d
	on := func(handler string) *runtimeapi.ImageSpec {
		return &runtimeapi.ImageSpec{Image: e.image, RuntimeHandler: handler}
	}
	shared, err := d.IS.ImageStatus(ctx, on(""), false)
	if err != nil || shared.GetImage() == nil {
		t.Fatalf("the shared store lacks the env's image: %v %v", shared, err)
	}
	if st, err := d.IS.ImageStatus(ctx, on("runc-own"), false); err != nil || st.GetImage() != nil {
		t.Fatalf("ImageStatus(runc-own) before any pull for it = %v, %v; want no image", st, err)
	}

	ownPod, ownCfg := e.pod("own", "runc-own")
	cfg := e.ctrConfig("before-pull", "echo", "hi")
	_, err = d.RS.CreateContainer(ctx, ownPod, cfg, ownCfg)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `"runc-own"`) || !strings.Contains(err.Error(), "RuntimeClassInImageCriApi") {
		t.Errorf("a runc-own container from the shared store's image = %v; want NotFound naming the row and kubelet's gate", err)
	}

	id, err := d.IS.PullImage(ctx, on("runc-own"), nil, nil)
	if err != nil || id != shared.GetImage().GetId() {
		t.Fatalf("PullImage(runc-own) = %s, %v; want %s", id, err, shared.GetImage().GetId())
	}
	st, err := d.IS.ImageStatus(ctx, on("runc-own"), false)
	if err != nil || st.GetImage().GetSpec().GetRuntimeHandler() != "runc-own" {
		t.Fatalf("ImageStatus(runc-own) = %v, %v; want the image named runc-own", st, err)
	}
	if _, err := os.Stat(filepath.Join(d.State, image.StoresDir, "runc-own", "storage")); err != nil {
		t.Errorf("runc-own's store is not below the state root: %v", err)
	}
	count := func(filter *runtimeapi.ImageFilter) map[string]int {
		t.Helper()
		imgs, err := d.IS.ListImages(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, im := range imgs {
			if im.GetId() == id {
				out[im.GetSpec().GetRuntimeHandler()]++
			}
		}
		return out
	}
	if got := count(nil); got[""] != 1 || got["runc-own"] != 1 {
		t.Errorf("ListImages() lists the image under handlers %v; want once shared (\"\") and once runc-own", got)
	}
	if got := count(&runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{RuntimeHandler: "runc-own"}}); len(got) != 1 || got["runc-own"] != 1 {
		t.Errorf("ListImages(runtime_handler runc-own) = %v; want its own copy alone", got)
	}

	// Without the shared copy, the row's pods still run from theirs; a runc pod cannot.
	if err := d.IS.RemoveImage(ctx, on("")); err != nil {
		t.Fatal(err)
	}
	cfg = e.ctrConfig("own-ctr", "cat", "/etc/hostname")
	cfg.Image = on("runc-own")
	ctr := e.run(ownPod, ownCfg, cfg)
	if st := e.waitExit(ctr); st.ExitCode != 0 || st.GetImage().GetRuntimeHandler() != "runc-own" {
		t.Errorf("the runc-own container exited %d (%s), its image.runtime_handler %q; want 0 and runc-own (kubelet's image GC keys on it)",
			st.ExitCode, st.Message, st.GetImage().GetRuntimeHandler())
	}
	if cs, err := d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{Id: ctr}); err != nil || len(cs) != 1 || cs[0].GetImage().GetRuntimeHandler() != "runc-own" {
		t.Errorf("ListContainers shows the runc-own container's image.runtime_handler as %v (%v); want runc-own", cs, err)
	}
	plainPod, plainCfg := e.pod("plain", "runc")
	if _, err := d.RS.CreateContainer(ctx, plainPod, e.ctrConfig("no-image", "true"), plainCfg); status.Code(err) != codes.NotFound {
		t.Errorf("a runc container after the shared copy's removal = %v; want NotFound", err)
	}
	cfg = e.ctrConfig("other-store", "true")
	cfg.Image = on("runc")
	_, err = d.RS.CreateContainer(ctx, ownPod, cfg, ownCfg)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.image.runtime_handler") || !strings.Contains(err.Error(), `"runc-own"`) {
		t.Errorf("a runc-own container whose image names runc = %v; want InvalidArgument naming the field and the pod's handler", err)
	}

	// Removing the row's copy: gone from its store once its container is; the shared store
	// still answers (empty) and is untouched.
	if err := d.IS.RemoveImage(ctx, on("runc-own")); err != nil {
		t.Fatal(err)
	}
	if err := d.RS.RemoveContainer(ctx, ctr); err != nil {
		t.Fatal(err)
	}
	if got := count(nil); len(got) != 0 {
		t.Errorf("after both removals the image is still listed under %v", got)
	}
	if _, err := d.IS.PullImage(ctx, on(""), nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := count(nil); got[""] != 1 || got["runc-own"] != 0 {
		t.Errorf("a shared pull after the removals lists the image under %v; want the shared store alone", got)
	}
}

// kubelet with RuntimeClassInImageCriApi, registered with a real API server: a pod whose
// RuntimeClass names runc-own (image_store = "separate") makes kubelet look the image up
// and pull it with that handler (nothing else pulls into that store here), though the
// shared store already has it, and the pod runs from the row's own copy; a pod of class
// runc runs from the shared one. (kubelet may pull that one again: it keys images by
// handler, and the shared store's are listed under "", not under each row sharing it.)
func TestKubeletImagesPerRuntimeClass(t *testing.T) {
	e := newContainerEnv(t, withOwnImageStore())
	writeNetwork(t, e)
	api := startAPIServer(t)
	k := startKubelet(t, e.d, api.Kubeconfig, "featureGates: {RuntimeClassInImageCriApi: true}")
	waitFor(t, 60*time.Second, "the node to register", func() (bool, string) {
		_, err := api.Do(http.MethodGet, "/api/v1/nodes/"+k.NodeName, "")
		return err == nil, fmt.Sprint(err)
	})
	for _, rc := range []struct{ name, handler string }{{"own", "runc-own"}, {"runc", "runc"}} {
		api.Create("/apis/node.k8s.io/v1/runtimeclasses", fmt.Sprintf(
			"apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: %s}\nhandler: %s\n", rc.name, rc.handler))
	}
	ctx := ctxT(t)
	if st, err := e.d.IS.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: e.image, RuntimeHandler: "runc-own"}, false); err != nil || st.GetImage() != nil {
		t.Fatalf("runc-own's store has the image before kubelet pulled it: %v %v", st, err)
	}
	for _, p := range []struct{ name, class string }{{"on-own", "own"}, {"on-runc", "runc"}} {
		api.Create("/api/v1/namespaces/default/pods", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  nodeName: %s
  runtimeClassName: %s
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
  - {name: main, image: %s, imagePullPolicy: IfNotPresent, command: ["sh", "-c", "echo started; sleep 3600"]}
`, p.name, k.NodeName, p.class, e.image))
	}
	for _, name := range []string{"on-own", "on-runc"} {
		k.WaitPod(name, 2*time.Minute, "Running and Ready", runningReady)
	}
	st, err := e.d.IS.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: e.image, RuntimeHandler: "runc-own"}, false)
	if err != nil || st.GetImage() == nil {
		t.Fatalf("kubelet did not pull the image into runc-own's store: %v %v", st, err)
	}
	// What kubelet's image GC matches: each container's image.runtime_handler against the
	// images' spec.runtime_handler from ListImages.
	cs, err := e.d.RS.ListContainers(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byPod := map[string]string{}
	for _, c := range cs {
		byPod[c.GetLabels()["io.kubernetes.pod.name"]] = c.GetImage().GetRuntimeHandler()
	}
	if byPod["on-own"] != "runc-own" || byPod["on-runc"] != "" {
		t.Errorf("containers' image.runtime_handler by pod = %v; want on-own: runc-own, on-runc: \"\"", byPod)
	}
	for _, name := range []string{"on-own", "on-runc"} {
		if _, err := api.Do(http.MethodDelete, "/api/v1/namespaces/default/pods/"+name, ""); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 90*time.Second, "kubelet to finish the deletions", func() (bool, string) {
		pods, err := k.Pods()
		return err == nil && len(pods) == 0, fmt.Sprint(len(pods), err)
	})
}
