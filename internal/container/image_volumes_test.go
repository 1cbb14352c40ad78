package container

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// A sub path resolves inside the image, symlinks included, and never outside it.
func TestImageSubPath(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"data/deep", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "data/hello.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"abs":    "/data",       // absolute: the image's /data, not the host's
		"up":     "../../../",   // climbs to the image's root, no further
		"host":   outside,       // a host path: looked up inside the image, where it is missing
		"relsib": "data/../etc", // relative, inside
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct{ sub, want string }{
		{"data", "data"},
		{"data/", "data"},
		{"./data/deep", "data/deep"},
		{"data/hello.txt", "data/hello.txt"},
		{"abs", "data"},
		{"abs/deep", "data/deep"},
		{"up", ""},
		{"up/etc", "etc"},
		{"relsib", "etc"},
	} {
		got, err := imageSubPath(root, tt.sub)
		if want := filepath.Join(root, tt.want); err != nil || got != want {
			t.Errorf("imageSubPath(%q) = %q, %v; want %q", tt.sub, got, err, want)
		}
	}
	for _, sub := range []string{"missing", "data/missing", "host", "data/hello.txt/x"} {
		got, err := imageSubPath(root, sub)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("imageSubPath(%q) = %q, %v; want InvalidArgument", sub, got, err)
		}
	}
}

// ContainerStatus reports an image mount with the image it mounted; the config the
// container was created with is left as it was.
func TestStatusMounts(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{
		{ContainerPath: "/host", HostPath: "/srv"},
		{ContainerPath: "/vol", Image: &runtimeapi.ImageSpec{Image: "registry.test/data:1"}, ImageSubPath: "data", Readonly: true},
	}}
	c := &Container{config: cfg}
	if got := statusMounts(c); len(got) != 2 || got[1].GetImage().GetImageRef() != "" {
		t.Errorf("without volumes: %v", got)
	}
	c.ImageVolumes = []ImageVolume{{Mount: 1, ImageID: "sha256:abc", StorageID: "s", Source: "/x"}}
	got := statusMounts(c)
	if got[0] != cfg.Mounts[0] || got[1].GetImage().GetImage() != "registry.test/data:1" ||
		got[1].GetImage().GetImageRef() != "sha256:abc" || got[1].GetImageSubPath() != "data" || got[1].GetContainerPath() != "/vol" {
		t.Errorf("status mounts %v", got)
	}
	if cfg.Mounts[1].Image.ImageRef != "" {
		t.Error("statusMounts changed the container's config")
	}
}
