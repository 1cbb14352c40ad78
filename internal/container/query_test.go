package container

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/events"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/store"
)

const (
	testImageID  = "sha256:4d0c4c3c8e2f5b8a1e7b0f6a0d3f9c2b1a8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c"
	testManifest = "sha256:9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b"
)

// kubelet sends the image's ID in config.image.image and the pod spec's name in
// user_specified_image; the status shows a name and a repo digest, as containerd and
// CRI-O do, and the ID in image_id.
func TestImageNames(t *testing.T) {
	busybox := &image.Image{
		ID:       testImageID,
		RepoTags: []string{"docker.io/library/busybox:1.36", "quay.io/mirror/busybox:1.36"},
		RepoDigests: []string{
			"docker.io/library/busybox@" + testManifest,
			"quay.io/mirror/busybox@" + testManifest,
		},
	}
	local := &image.Image{ID: testImageID, RepoTags: []string{"localhost/built:1"}}
	byDigest := &image.Image{ID: testImageID, RepoDigests: []string{"quay.io/mirror/busybox@" + testManifest}}
	for _, tt := range []struct {
		what           string
		spec           *runtimeapi.ImageSpec
		img            *image.Image
		name, wantRepo string
	}{
		{"kubelet: ID and the pod spec's name", &runtimeapi.ImageSpec{Image: testImageID, UserSpecifiedImage: "busybox:1.36"}, busybox,
			"busybox:1.36", "docker.io/library/busybox@" + testManifest},
		{"the digest of the shown name's repository", &runtimeapi.ImageSpec{Image: testImageID, UserSpecifiedImage: "quay.io/mirror/busybox:1.36"}, busybox,
			"quay.io/mirror/busybox:1.36", "quay.io/mirror/busybox@" + testManifest},
		{"no user_specified_image: the first tag", &runtimeapi.ImageSpec{Image: testImageID}, busybox,
			"docker.io/library/busybox:1.36", "docker.io/library/busybox@" + testManifest},
		{"no tag: the config's image, the first digest", &runtimeapi.ImageSpec{Image: "quay.io/mirror/busybox@" + testManifest}, byDigest,
			"quay.io/mirror/busybox@" + testManifest, "quay.io/mirror/busybox@" + testManifest},
		{"no repo digest", &runtimeapi.ImageSpec{Image: "localhost/built:1"}, local, "localhost/built:1", ""},
		{"image store unreadable", &runtimeapi.ImageSpec{Image: testImageID, UserSpecifiedImage: "busybox"}, nil, "busybox", ""},
	} {
		name, repo := imageNames(tt.spec, tt.img)
		if name != tt.name || repo != tt.wantRepo {
			t.Errorf("%s: %q %q, want %q %q", tt.what, name, repo, tt.name, tt.wantRepo)
		}
	}
}

func TestStatusImageFields(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: testImageID, UserSpecifiedImage: "busybox:1.36"},
	}
	c := &Container{
		Metadata: Metadata{
			ID: "c1", SandboxID: "p1", ImageRef: testImageID, ImageID: testImageID,
			ImageName: "busybox:1.36", ImageRepoDigest: "docker.io/library/busybox@" + testManifest,
		},
		config: cfg, status: store.NewTracked(Status{State: StateRunning}),
	}
	want := [3]string{"busybox:1.36", "docker.io/library/busybox@" + testManifest, testImageID}
	st := criStatus(c)
	if got := [3]string{st.GetImage().GetImage(), st.GetImageRef(), st.GetImageId()}; got != want {
		t.Errorf("ContainerStatus image, image_ref, image_id = %q, want %q", got, want)
	}
	item, _ := c.listItem()
	if got := [3]string{item.GetImage().GetImage(), item.GetImageRef(), item.GetImageId()}; got != want {
		t.Errorf("ListContainers image, image_ref, image_id = %q, want %q", got, want)
	}
	// An image without a repo digest (built or loaded here): image_ref is its ID.
	c.ImageRepoDigest = ""
	if got := criStatus(c).GetImageRef(); got != testImageID {
		t.Errorf("image_ref without a repo digest = %q, want the ID", got)
	}
}

// A record of an earlier release has no image_name or image_repo_digest: its status
// answers as that release did.
func TestStatusImageOfEarlierRecord(t *testing.T) {
	m := &Manager{opts: Options{Runtimes: handlers.NewRuntimes(handlers.Env{})}}
	meta := `{"id":"a","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"image_ref":"busybox:1.36","image_id":"` + testImageID +
		`","config":{"metadata":{"name":"c"},"image":{"image":"busybox:1.36"}}}`
	c, err := m.decodeRecord("a", []byte(meta), []byte(`{"state":"running"}`))
	if err != nil {
		t.Fatal(err)
	}
	st := criStatus(c)
	if got, want := [3]string{st.GetImage().GetImage(), st.GetImageRef(), st.GetImageId()}, [3]string{"busybox:1.36", testImageID, testImageID}; got != want {
		t.Errorf("image, image_ref, image_id = %q, want %q", got, want)
	}
}

// KEP-4960: the config's stop_signal overrides the image's STOPSIGNAL, and the status
// says which signal StopContainer sends.
func TestStopSignal(t *testing.T) {
	for _, tt := range []struct {
		cfg   runtimeapi.Signal
		image string
		want  string
		enum  runtimeapi.Signal
	}{
		{runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "", "SIGTERM", runtimeapi.Signal_SIGNAL_SIGTERM},
		{runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "SIGINT", "SIGINT", runtimeapi.Signal_SIGNAL_SIGINT},
		{runtimeapi.Signal_SIGNAL_SIGQUIT, "SIGINT", "SIGQUIT", runtimeapi.Signal_SIGNAL_SIGQUIT},
		{runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3, "", "37", runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3},
		// The config's signal wins over an image STOPSIGNAL that is no signal.
		{runtimeapi.Signal_SIGNAL_SIGUSR1, "BOGUS", "SIGUSR1", runtimeapi.Signal_SIGNAL_SIGUSR1},
	} {
		cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, StopSignal: tt.cfg}
		got, err := stopSignal(cfg, ocispec.ImageConfig{StopSignal: tt.image})
		if err != nil || got != tt.want {
			t.Errorf("config %v, image %q: %q, %v, want %q", tt.cfg, tt.image, got, err, tt.want)
			continue
		}
		c := &Container{Metadata: Metadata{ID: "c1", StopSignal: got}, config: cfg, status: store.NewTracked(Status{State: StateRunning})}
		if st := criStatus(c).GetStopSignal(); st != tt.enum {
			t.Errorf("config %v, image %q: status stop_signal %v, want %v", tt.cfg, tt.image, st, tt.enum)
		}
	}
}

// An unknown stop_signal is refused by name before anything is made.
func TestCreateRefusesUnknownStopSignal(t *testing.T) {
	m := &Manager{}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
		StopSignal: runtimeapi.Signal(99),
	}
	_, err := m.Create(context.Background(), "pod", cfg)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "config.stop_signal 99") {
		t.Errorf("stop_signal 99: %v, want InvalidArgument naming config.stop_signal and 99", err)
	}
}

// PodSandboxStatus and the events carry the statuses of all the pod's containers: kubelet's
// Evented PLEG takes the pod's containers from there alone.
func TestPodStatusesAndEvents(t *testing.T) {
	m := bareManager(t)
	bus := events.NewBus()
	m.opts.Events = bus
	sub := bus.Subscribe()
	defer bus.Unsubscribe(sub)
	add := func(id, pod string, created int64) *Container {
		c := &Container{
			Metadata: Metadata{ID: id, SandboxID: pod, CreatedAt: created},
			config:   &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: id}},
			status:   store.NewTracked(Status{State: StateRunning}), exited: registry.NewExit(),
		}
		m.index.Add(c)
		return c
	}
	b := add("b", "p1", 2)
	add("a", "p1", 1)
	add("other", "p2", 0)
	ids := func(l []*runtimeapi.ContainerStatus) string {
		var out []string
		for _, s := range l {
			out = append(out, s.GetId())
		}
		return strings.Join(out, ",")
	}
	if got := ids(m.PodStatuses("p1")); got != "a,b" {
		t.Errorf("PodStatuses(p1) = %s, want a,b (oldest first)", got)
	}
	if got := m.PodStatuses("none"); len(got) != 0 {
		t.Errorf("PodStatuses of a pod without containers = %v", got)
	}
	m.publish(b, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	m.index.Remove(b)
	m.publish(b, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	for _, want := range []string{"a,b", "a,b"} { // the removed one still named by its event
		select {
		case ev := <-sub.C:
			if got := ids(ev.ContainersStatuses); got != want {
				t.Errorf("%v event carries %s, want %s", ev.ContainerEventType, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
	}
}

// bareManager is a Manager with no containers and no pods, whose containers a test adds
// to its maps directly.
func bareManager(t *testing.T) *Manager {
	sbs, err := sandbox.NewManager(sandbox.Options{RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{opts: Options{Sandboxes: sbs, Store: st}, index: indexOf(), ctx: ctx, cancel: cancel}
	t.Cleanup(m.Close)
	return m
}

// indexOf is an index listing cs.
func indexOf(cs ...*Container) *registry.Index[*Container] {
	x := registry.New[*Container]("container_id", "container")
	for _, c := range cs {
		x.Add(c)
	}
	return x
}
