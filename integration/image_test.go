//go:build integration

package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

func imgSpec(ref string) *runtimeapi.ImageSpec { return &runtimeapi.ImageSpec{Image: ref} }

// storedLayers counts the layers in the daemon's image store.
func storedLayers(t *testing.T, d *Daemon) int {
	t.Helper()
	return len(storageRecords(t, d.State, d.RunRoot, "layers"))
}

func TestPullByTagAndDigest(t *testing.T) {
	reg := startRegistry(t, nil)
	d := newDaemon(t, withRegistries(reg.Addr))
	ctx := ctxT(t)
	base := ImageSpec{Layers: []Layer{busyboxLayer(t)}, Config: ocispec.ImageConfig{Cmd: []string{"sh"}, User: "1000:1000"}}
	mdig, cdig := reg.Push(t, "tools/busybox", "1.0", base, nil)
	reg.Push(t, "tools/busybox", "stable", base, nil)
	other := base
	other.Config.User = "app"
	other.DockerV2 = true
	_, odig := reg.Push(t, "tools/busybox", "named-user", other, nil)

	ref := reg.Ref("tools/busybox", "1.0")
	id, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil)
	if err != nil {
		t.Fatalf("PullImage(%s): %v", ref, err)
	}
	if id != cdig {
		t.Errorf("image id %s, want the config digest %s", id, cdig)
	}
	st, err := d.IS.ImageStatus(ctx, imgSpec(ref), true)
	if err != nil || st.Image == nil {
		t.Fatalf("ImageStatus: %v %v", st, err)
	}
	im := st.Image
	wantDigest := reg.Ref("tools/busybox", mdig)
	if !slices.Equal(im.RepoTags, []string{ref}) || !slices.Contains(im.RepoDigests, wantDigest) {
		t.Errorf("repo_tags %v repo_digests %v, want [%s] and %s", im.RepoTags, im.RepoDigests, ref, wantDigest)
	}
	if im.Size == 0 {
		t.Error("size is 0")
	}
	if im.GetUid().GetValue() != 1000 || im.Username != "" {
		t.Errorf("USER 1000:1000 reported as uid %v username %q", im.GetUid(), im.Username)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal([]byte(st.Info["info"]), &cfg); err != nil || cfg.Config.User != "1000:1000" {
		t.Errorf("verbose info is not the image config: %v %q", err, st.Info["info"])
	}

	// Another tag of the same image adds the tag to the same image.
	ref2 := reg.Ref("tools/busybox", "stable")
	id2, err := d.IS.PullImage(ctx, imgSpec(ref2), nil, nil)
	if err != nil || id2 != id {
		t.Fatalf("pull of a second tag: %s %v, want %s", id2, err, id)
	}
	st, _ = d.IS.ImageStatus(ctx, imgSpec(id), false)
	if got := st.GetImage().GetRepoTags(); !slices.Contains(got, ref) || !slices.Contains(got, ref2) {
		t.Errorf("repo_tags after pulling a second tag: %v", got)
	}

	// By digest: the digest is recorded; status by repo@digest finds the same image.
	id3, err := d.IS.PullImage(ctx, imgSpec(wantDigest), nil, nil)
	if err != nil || id3 != id {
		t.Fatalf("pull by digest: %s %v", id3, err)
	}
	for _, q := range []string{wantDigest, id, strings.TrimPrefix(id, "sha256:")[:16]} {
		st, err := d.IS.ImageStatus(ctx, imgSpec(q), false)
		if err != nil || st.GetImage().GetId() != id {
			t.Errorf("ImageStatus(%s) = %v, %v", q, st.GetImage().GetId(), err)
		}
	}

	// A Docker schema2 image whose USER is a name.
	nref := reg.Ref("tools/busybox", "named-user")
	if id, err := d.IS.PullImage(ctx, imgSpec(nref), nil, nil); err != nil || id != odig {
		t.Fatalf("pull docker v2 image: %s %v", id, err)
	}
	st, _ = d.IS.ImageStatus(ctx, imgSpec(nref), false)
	if st.GetImage().GetUsername() != "app" || st.GetImage().GetUid() != nil {
		t.Errorf("USER app reported as uid %v username %q", st.GetImage().GetUid(), st.GetImage().GetUsername())
	}

	// List, filtered and not.
	all, err := d.IS.ListImages(ctx, nil)
	if err != nil || len(all) != 2 {
		t.Errorf("ListImages: %d images, %v; want 2", len(all), err)
	}
	one, err := d.IS.ListImages(ctx, &runtimeapi.ImageFilter{Image: imgSpec(nref)})
	if err != nil || len(one) != 1 || one[0].Id != odig {
		t.Errorf("ListImages(filter %s) = %v, %v", nref, one, err)
	}
	none, err := d.IS.ListImages(ctx, &runtimeapi.ImageFilter{Image: imgSpec(reg.Ref("tools/other", "1"))})
	if err != nil || len(none) != 0 {
		t.Errorf("ListImages(filter missing) = %v, %v", none, err)
	}
	// A missing image is an empty answer, not an error.
	st, err = d.IS.ImageStatus(ctx, imgSpec(reg.Ref("tools/busybox", "missing")), false)
	if err != nil || st.Image != nil {
		t.Errorf("ImageStatus of a missing image: %v, %v", st, err)
	}

	// ImageFsInfo counts the layers, once the background walk has seen the pull (within
	// its 10 s interval).
	waitFor(t, 20*time.Second, "ImageFsInfo to count the pulled layers", func() (bool, string) {
		fs, err := d.IS.ImageFsInfo(ctx)
		return err == nil && len(fs.ImageFilesystems) == 1 && fs.ImageFilesystems[0].UsedBytes.GetValue() >= 1<<20, fmt.Sprint(fs, err)
	})

	// Remove: one tag of two only untags; by ID removes; by digest; again is no error.
	if err := d.IS.RemoveImage(ctx, imgSpec(ref2)); err != nil {
		t.Fatal(err)
	}
	st, _ = d.IS.ImageStatus(ctx, imgSpec(id), false)
	if got := st.GetImage().GetRepoTags(); !slices.Equal(got, []string{ref}) {
		t.Errorf("after removing tag %s: repo_tags %v", ref2, got)
	}
	if err := d.IS.RemoveImage(ctx, imgSpec(id)); err != nil {
		t.Fatal(err)
	}
	if err := d.IS.RemoveImage(ctx, imgSpec(nref)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{id, ref, nref} {
		if err := d.IS.RemoveImage(ctx, imgSpec(q)); err != nil {
			t.Errorf("second RemoveImage(%s): %v", q, err)
		}
	}
	if all, _ := d.IS.ListImages(ctx, nil); len(all) != 0 {
		t.Errorf("images left after removal: %v", all)
	}
	if n := storedLayers(t, d); n != 0 {
		t.Errorf("%d layers left in the store after every image was removed", n)
	}
}

func TestPullManifestList(t *testing.T) {
	reg := startRegistry(t, nil)
	d := newDaemon(t, withRegistries(reg.Addr))
	ctx := ctxT(t)
	foreign := "arm64"
	if runtime.GOARCH == "arm64" {
		foreign = "amd64"
	}
	native := ImageSpec{Layers: []Layer{busyboxLayer(t)}, Config: ocispec.ImageConfig{Labels: map[string]string{"arch": runtime.GOARCH}}}
	alien := ImageSpec{Layers: []Layer{{Files: []File{{Path: "/etc", Dir: true}, {Path: "/etc/arch", Content: foreign}}}},
		Config: ocispec.ImageConfig{Labels: map[string]string{"arch": foreign}}, Arch: foreign}
	reg.PushIndex(t, "multi/arch", "both", []ImageSpec{alien, native}, nil)
	reg.PushIndex(t, "multi/arch", "foreign-only", []ImageSpec{alien}, nil)
	_, nativeCfg := reg.Push(t, "multi/arch", "native", native, nil)

	id, err := d.IS.PullImage(ctx, imgSpec(reg.Ref("multi/arch", "both")), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id != nativeCfg {
		t.Errorf("manifest list resolved to %s, want this node's (%s) image %s", id, runtime.GOARCH, nativeCfg)
	}
	_, err = d.IS.PullImage(ctx, imgSpec(reg.Ref("multi/arch", "foreign-only")), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "platform") || !strings.Contains(err.Error(), reg.Addr) {
		t.Errorf("pull of a list without this platform: %v; want an error naming the registry and the platform", err)
	}
}

func TestPullWithCredentials(t *testing.T) {
	creds := &Credentials{Username: "kubelet", Password: "s3cret-pass"}
	reg := startRegistry(t, creds)
	d := newDaemon(t, withRegistries(reg.Addr))
	ctx := ctxT(t)
	reg.Push(t, "private/app", "v1", ImageSpec{Layers: []Layer{busyboxLayer(t)}}, creds)
	ref := reg.Ref("private/app", "v1")

	for _, tc := range []struct {
		name string
		auth *runtimeapi.AuthConfig
	}{
		{"no credentials", nil},
		{"wrong password", &runtimeapi.AuthConfig{Username: "kubelet", Password: "nope"}},
	} {
		_, err := d.IS.PullImage(ctx, imgSpec(ref), tc.auth, nil)
		if err == nil {
			t.Fatalf("%s: pull succeeded", tc.name)
		}
		msg := status.Convert(err).Message()
		if !strings.Contains(msg, "unauthorized") || !strings.Contains(msg, ref) || !strings.Contains(msg, reg.Addr) {
			t.Errorf("%s: %q should say unauthorized and name the reference and the registry", tc.name, msg)
		}
	}
	if imgs, _ := d.IS.ListImages(ctx, nil); len(imgs) != 0 {
		t.Errorf("failed pulls left images: %v", imgs)
	}
	if _, err := d.IS.PullImage(ctx, imgSpec(ref), &runtimeapi.AuthConfig{Username: creds.Username, Password: creds.Password}, nil); err != nil {
		t.Errorf("pull with username/password: %v", err)
	}
	if err := d.IS.RemoveImage(ctx, imgSpec(ref)); err != nil {
		t.Fatal(err)
	}
	auth := base64.StdEncoding.EncodeToString([]byte(creds.Username + ":" + creds.Password))
	if _, err := d.IS.PullImage(ctx, imgSpec(ref), &runtimeapi.AuthConfig{Auth: auth}, nil); err != nil {
		t.Errorf("pull with auth: %v", err)
	}
	_, err := d.IS.PullImage(ctx, imgSpec(ref), &runtimeapi.AuthConfig{Auth: "%%%"}, nil)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "auth.auth") {
		t.Errorf("malformed auth: %v", err)
	}
}

// A registry that is not reachable is served from its configured mirror.
func TestPullThroughMirror(t *testing.T) {
	mirror := startRegistry(t, nil)
	mirror.Push(t, "library/tool", "2", ImageSpec{Layers: []Layer{busyboxLayer(t)}}, nil)
	d := newDaemon(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Image.Registries = []config.Registry{{Prefix: "registry.rtshimd.invalid", Location: "registry.rtshimd.invalid",
			Mirrors: []config.Mirror{{Location: mirror.Addr, Insecure: true}}}}
	}))
	ctx := ctxT(t)
	ref := "registry.rtshimd.invalid/library/tool:2"
	id, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil)
	if err != nil {
		t.Fatalf("pull through mirror: %v", err)
	}
	st, err := d.IS.ImageStatus(ctx, imgSpec(ref), false)
	if err != nil || st.GetImage().GetId() != id || !slices.Contains(st.Image.RepoTags, ref) {
		t.Errorf("mirrored image recorded under %v (%v), want %s", st.GetImage().GetRepoTags(), err, ref)
	}
}

// Bad references, unknown registries and broken transfers: a clear error, and no image
// or layer is left half-stored.
func TestPullFailures(t *testing.T) {
	reg := startRegistry(t, nil)
	big := Layer{Files: []File{{Path: "/data", Dir: true}, {Path: "/data/blob", Content: strings.Repeat("rtshimd-", 512<<10)}}}
	reg.Push(t, "broken/big", "1", ImageSpec{Layers: []Layer{busyboxLayer(t), big}}, nil)
	proxy := startDroppingProxy(t, reg.Addr, 64<<10)
	d := newDaemon(t, withRegistries(reg.Addr, proxy))
	ctx := ctxT(t)
	cases := []struct {
		name, ref string
		code      codes.Code
		want      []string
	}{
		{"malformed", "UPPER/Case::x", codes.InvalidArgument, []string{`"UPPER/Case::x"`}},
		{"empty", "", codes.InvalidArgument, []string{"empty"}},
		{"unknown registry", "registry.rtshimd.invalid/nothing:1", codes.Unavailable, []string{"registry.rtshimd.invalid", "unreachable"}},
		{"unknown repository", reg.Ref("broken/missing", "1"), codes.NotFound, []string{reg.Addr, "not found"}},
		{"connection dropped mid-layer", proxy + "/broken/big:1", codes.Unavailable, []string{proxy, "broke"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.IS.PullImage(ctx, imgSpec(tc.ref), nil, nil)
			if status.Code(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(status.Convert(err).Message(), w) {
					t.Errorf("%q does not say %q", status.Convert(err).Message(), w)
				}
			}
			if imgs, _ := d.IS.ListImages(ctx, nil); len(imgs) != 0 {
				t.Errorf("images after a failed pull: %v", imgs)
			}
			if n := storedLayers(t, d); n != 0 {
				t.Errorf("%d layers left in the store by a failed pull", n)
			}
		})
	}
	// The same image pulls fine directly afterwards.
	if _, err := d.IS.PullImage(ctx, imgSpec(reg.Ref("broken/big", "1")), nil, nil); err != nil {
		t.Errorf("direct pull after the broken one: %v", err)
	}
}

// Identical concurrent pulls do the work once and all get the image.
func TestConcurrentPullsShareWork(t *testing.T) {
	reg := startRegistry(t, nil)
	big := Layer{Files: []File{{Path: "/data", Dir: true}, {Path: "/data/blob", Content: strings.Repeat("0123456789abcdef", 1<<20)}}}
	_, cdig := reg.Push(t, "shared/pull", "1", ImageSpec{Layers: []Layer{busyboxLayer(t), big}}, nil)
	d := newDaemon(t, withRegistries(reg.Addr))
	ctx := ctxT(t)
	var wg sync.WaitGroup
	ids := make([]string, 6)
	errs := make([]error, 6)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], errs[i] = d.IS.PullImage(ctx, imgSpec(reg.Ref("shared/pull", "1")), nil, nil)
		}()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != cdig {
			t.Errorf("pull %d: %s %v", i, ids[i], errs[i])
		}
	}
	pulled := strings.Count(d.Log(), `msg="image pulled"`)
	if pulled != 1 {
		t.Errorf("6 identical concurrent pulls did the work %d times, want once", pulled)
	}
}

// ImageSpec.runtime_handler (images per RuntimeClass, KEP-4216), through the real client: a
// configured handler pulls, finds, lists and removes the one image every handler shares; a
// handler the node does not have is refused by name in every image call and in a
// container's image and image volume, and nothing is pulled or removed for it.
func TestImageRuntimeHandler(t *testing.T) {
	reg := startRegistry(t, nil)
	d := newDaemon(t, withRegistries(reg.Addr))
	ctx := ctxT(t)
	_, cdig := reg.Push(t, "tools/busybox", "1.0", ImageSpec{Layers: []Layer{busyboxLayer(t)}, Config: ocispec.ImageConfig{Cmd: []string{"sh"}}}, nil)
	ref := reg.Ref("tools/busybox", "1.0")
	on := func(handler string) *runtimeapi.ImageSpec {
		return &runtimeapi.ImageSpec{Image: ref, RuntimeHandler: handler}
	}
	refused := func(what string, err error, field string) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), `"no-such-handler"`) {
			t.Errorf("%s with an unknown handler: %v, want InvalidArgument naming %s and the handler", what, err, field)
		}
	}

	_, err := d.IS.PullImage(ctx, on("no-such-handler"), nil, nil)
	refused("PullImage", err, "image.runtime_handler")
	if imgs, _ := d.IS.ListImages(ctx, nil); len(imgs) != 0 {
		t.Fatalf("a refused pull stored %d images", len(imgs))
	}

	id, err := d.IS.PullImage(ctx, on("runsc"), nil, nil)
	if err != nil || id != cdig {
		t.Fatalf("PullImage(runtime_handler runsc) = %s, %v; want %s", id, err, cdig)
	}
	if id2, err := d.IS.PullImage(ctx, on(""), nil, nil); err != nil || id2 != id {
		t.Errorf("PullImage(default handler) = %s, %v; want the same image %s", id2, err, id)
	}
	for _, h := range []string{"runsc", "runc", ""} {
		st, err := d.IS.ImageStatus(ctx, on(h), false)
		if err != nil || st.GetImage().GetId() != id {
			t.Errorf("ImageStatus(runtime_handler %q) = %v, %v; want %s", h, st, err, id)
		}
		imgs, err := d.IS.ListImages(ctx, &runtimeapi.ImageFilter{Image: on(h)})
		if err != nil || len(imgs) != 1 {
			t.Errorf("ListImages(runtime_handler %q) = %v, %v; want the image", h, imgs, err)
		}
	}
	_, err = d.IS.ImageStatus(ctx, on("no-such-handler"), false)
	refused("ImageStatus", err, "image.runtime_handler")
	_, err = d.IS.ListImages(ctx, &runtimeapi.ImageFilter{Image: on("no-such-handler")})
	refused("ListImages", err, "filter.image.runtime_handler")
	err = d.IS.RemoveImage(ctx, on("no-such-handler"))
	refused("RemoveImage", err, "image.runtime_handler")
	if st, err := d.IS.ImageStatus(ctx, on(""), false); err != nil || st.GetImage() == nil {
		t.Fatalf("the image is gone after a refused RemoveImage: %v %v", st, err)
	}

	// A container's image and its image volumes.
	podCfg := podConfig("image-handler", runtimeapi.NamespaceMode_CONTAINER)
	podID, err := d.RS.RunPodSandbox(ctx, podCfg, "runc")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    on("no-such-handler"),
		Command:  []string{"sleep", "60"},
	}
	_, err = d.RS.CreateContainer(ctx, podID, cfg, podCfg)
	refused("CreateContainer", err, "config.image.runtime_handler")
	cfg.Image = on("runc")
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/img", Image: on("no-such-handler")}}
	_, err = d.RS.CreateContainer(ctx, podID, cfg, podCfg)
	refused("CreateContainer", err, "config.mounts[0].image.runtime_handler")
	if cs, err := d.RS.ListContainers(ctx, nil); err != nil || len(cs) != 0 {
		t.Errorf("refused creates left containers: %v %v", cs, err)
	}
	if err := d.RS.StopPodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
	if err := d.RS.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}

	if err := d.IS.RemoveImage(ctx, on("runsc")); err != nil {
		t.Fatalf("RemoveImage(runtime_handler runsc): %v", err)
	}
	if imgs, _ := d.IS.ListImages(ctx, nil); len(imgs) != 0 {
		t.Errorf("%d images left after RemoveImage(runtime_handler runsc)", len(imgs))
	}
}
