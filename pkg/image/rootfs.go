package image

import (
	"errors"
	"fmt"

	"github.com/containers/storage"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/pkg/errdefs"
)

// CreateRootfs makes a writable layer for container id on top of image ref and mounts it,
// returning the mount point and the image's ID. RemoveRootfs undoes it.
func (s *Service) CreateRootfs(id, ref string) (rootfs, imageID string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	img, err := s.lookup(ref)
	if err != nil {
		return "", "", err
	}
	if removed(img) {
		return "", "", fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	if _, err := s.store.CreateContainer(id, nil, img.ID, "", "", nil); err != nil {
		return "", "", fmt.Errorf("create rootfs layer for %s from image %s: %w", id, img.ID, err)
	}
	path, err := s.store.Mount(id, "")
	if err != nil {
		_ = s.store.DeleteContainer(id)
		return "", "", fmt.Errorf("mount rootfs of %s: %w", id, err)
	}
	return path, "sha256:" + img.ID, nil
}

// RemoveRootfs unmounts and deletes container id's writable layer; a missing one is not
// an error. An image that RemoveImage hid while this container used it goes with it.
func (s *Service) RemoveRootfs(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	c, err := s.store.Container(id)
	if errors.Is(err, storage.ErrContainerUnknown) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rootfs of %s: %w", id, err)
	}
	if _, err := s.store.Unmount(id, true); err != nil && !errors.Is(err, storage.ErrLayerNotMounted) {
		return fmt.Errorf("unmount rootfs of %s: %w", id, err)
	}
	if err := s.store.DeleteContainer(id); err != nil && !errors.Is(err, storage.ErrContainerUnknown) {
		return fmt.Errorf("delete rootfs of %s: %w", id, err)
	}
	if img, err := s.store.Image(c.ImageID); err == nil && removed(img) {
		if err := s.deleteImage(img); err != nil {
			logrus.WithError(err).WithField("image", img.ID).Warn("delete removed image after its last container")
		}
	}
	return nil
}
