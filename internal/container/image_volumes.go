package container

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/oci"
)

// mountImageVolumes mounts, read-only, the image of every config mount that names one
// (KEP-4639), records each in c.ImageVolumes and returns the host path each such mount
// binds, by index into config.mounts. The image must be pulled already (kubelet pulls it).
// A mount that asks for ID mappings (kubelet sends the pod's for every volume of a
// hostUsers: false pod) gets the pod's, applied by the image store to the image's layers:
// an overlay mount cannot be idmapped afterwards, so idmapMounts leaves image mounts be.
// What it mounted before an error is undone by the container's cleanup.
func (m *Manager) mountImageVolumes(c *Container, handler string, pod *oci.IDMappings) (map[int]string, error) {
	mounts := c.config.GetMounts()
	// What the request says is checked before anything is mounted. Sub paths: kubelet sends
	// relative paths without "..", anything else is refused rather than clamped into the
	// image. readonly: the CRI says "All image mounts are per feature definition readonly"
	// and kubelet always sets it; refused rather than made read-only behind the caller's back.
	for i, mt := range mounts {
		if !oci.IsImageMount(mt) {
			continue
		}
		if sub := mt.GetImageSubPath(); sub != "" && !filepath.IsLocal(sub) {
			return nil, invalid("config.mounts[%d].image_sub_path %q is not a relative path inside the image", i, sub)
		}
		if !mt.GetReadonly() && mt.GetHostPath() == "" { // with a host path too, the spec's check names both
			return nil, invalid("config.mounts[%d].readonly is false for image volume %q: an image volume is read-only, set readonly to true", i, mt.GetImage().GetImage())
		}
	}
	var out map[int]string
	for i, mt := range mounts {
		if !oci.IsImageMount(mt) {
			continue
		}
		ref := mt.GetImage().GetImage()
		var uids, gids []specs.LinuxIDMapping
		if pod != nil && (len(mt.GetUidMappings()) > 0 || len(mt.GetGidMappings()) > 0) {
			uids, gids = pod.UIDs, pod.GIDs
		}
		vol, err := m.opts.Images.MountVolume(handler, c.ID, i, ref, uids, gids)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, fmt.Errorf("config.mounts[%d].image.image %q is not pulled on this node (pull it first): %w", i, ref, err)
		}
		if err != nil {
			return nil, fmt.Errorf("image volume %s at %s: %w", ref, mt.GetContainerPath(), err)
		}
		c.ImageVolumes = append(c.ImageVolumes, ImageVolume{Mount: i, ImageID: vol.ImageID, StorageID: vol.ID, Source: vol.Path})
		src := vol.Path
		if sub := mt.GetImageSubPath(); sub != "" {
			if src, err = imageSubPath(vol.Path, sub); err != nil {
				return nil, fmt.Errorf("config.mounts[%d].image_sub_path %q in image %s: %w", i, sub, ref, err)
			}
			c.ImageVolumes[len(c.ImageVolumes)-1].Source = src
		}
		if out == nil {
			out = map[int]string{}
		}
		out[i] = src
		logrus.WithFields(logrus.Fields{"container": c.ID, "image": vol.ImageID, "path": mt.GetContainerPath(), "sub_path": mt.GetImageSubPath()}).Debug("image volume ready")
	}
	return out, nil
}

// imageSubPath resolves sub inside the image's root filesystem at root, symlinks
// included, as if root were "/": nothing outside the image is reachable. The mount is
// read-only without an upper layer, so what is resolved here is what runc binds.
func imageSubPath(root, sub string) (string, error) {
	p, err := securejoin.SecureJoin(root, sub)
	if err != nil {
		return "", fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return "", fmt.Errorf("does not exist in the image: %w", errdefs.ErrInvalidArgument)
	} else if err != nil {
		return "", err
	}
	return p, nil
}

// statusMounts are the config's mounts as ContainerStatus reports them: an image mount
// also says which image it mounted (image.image_ref), as the CRI asks.
func statusMounts(c *Container) []*runtimeapi.Mount {
	if len(c.ImageVolumes) == 0 {
		return c.config.GetMounts()
	}
	out := make([]*runtimeapi.Mount, len(c.config.GetMounts()))
	copy(out, c.config.GetMounts())
	for _, v := range c.ImageVolumes {
		if v.Mount < 0 || v.Mount >= len(out) || out[v.Mount].GetImage() == nil {
			continue
		}
		mt := proto.Clone(out[v.Mount]).(*runtimeapi.Mount)
		mt.Image.ImageRef = v.ImageID
		out[v.Mount] = mt
	}
	return out
}
