package image

import (
	"errors"
	"fmt"

	"github.com/containers/storage"
	"github.com/containers/storage/pkg/idtools"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// CreateRootfs makes a writable layer for container id on top of image ref and mounts it,
// returning the mount point and the image's ID. RemoveRootfs undoes it. With mappings (a
// container in a pod user namespace), files the image owns by container ID x appear owned
// by the mapped host ID: containers/storage mounts the layers idmapped where the kernel
// can, and otherwise keeps a shifted copy of the image's layers.
func (s *Service) CreateRootfs(id, ref string, uids, gids []specs.LinuxIDMapping) (rootfs, imageID string, err error) {
	// No walk of the store is asked for: the new layer is empty, so until the next
	// periodic walk it reads as it is (empty, with that walk's time). A walk after every
	// create made the walk, O(containers) of lstat, run every 2 s or so on a node that
	// starts pods, competing with those starts for the CPU.
	//
	// s.mu is held for the bookkeeping alone: the lookup (the image store, which no pull
	// holds for long) and the registration as the image's user. Nothing under it waits
	// for containers/storage's layer store, which a pull holds for a layer's whole
	// extraction, or for a removal's deletion (audit 2026-11-26, N3).
	s.mu.Lock()
	img, err := s.usable(ref)
	if err != nil {
		s.mu.Unlock()
		return "", "", err
	}
	if len(uids) == 0 && len(gids) == 0 {
		if lowers, diff, ok := s.imageLowers(img.TopLayer); ok {
			if _, dup := s.writable[id]; dup {
				s.mu.Unlock()
				return "", "", fmt.Errorf("rootfs of %s: %w", id, errdefs.ErrAlreadyExists)
			}
			// Registered as the image's user first: the image is not removed from under
			// the mount, which is made without the lock.
			s.writable[id] = img.ID
			s.mu.Unlock()
			path, err := s.createWritable(id, img.ID, lowers, diff)
			if err == nil {
				return path, "sha256:" + img.ID, nil
			}
			s.mu.Lock()
			delete(s.writable, id)
			s.mu.Unlock()
			s.deleteIfRemoved(img.ID)
			if !errors.Is(err, errTooLong) {
				return "", "", err
			}
			s.mu.Lock()
			if img, err = s.usable(ref); err != nil {
				s.mu.Unlock()
				return "", "", err
			}
		}
	}
	// Through containers/storage, which locks its own stores: the image's user (pending)
	// until the store lists the container.
	if _, dup := s.pending[id]; dup {
		s.mu.Unlock()
		return "", "", fmt.Errorf("rootfs of %s: %w", id, errdefs.ErrAlreadyExists)
	}
	s.pending[id] = img.ID
	s.mu.Unlock()
	defer s.unuse(id, img.ID)
	var opts *storage.ContainerOptions
	if len(uids) > 0 || len(gids) > 0 {
		opts = &storage.ContainerOptions{IDMappingOptions: storage.IDMappingOptions{UIDMap: idtoolsMaps(uids), GIDMap: idtoolsMaps(gids)}}
		// The store may have mapped the image's layers for it: its size changes.
		defer s.refreshSize(img.ID)
	}
	if _, err := s.store.CreateContainer(id, nil, img.ID, "", "", opts); err != nil {
		return "", "", fmt.Errorf("create rootfs layer for %s from image %s: %w", id, img.ID, err)
	}
	path, err := s.store.Mount(id, "")
	if err != nil {
		_ = s.store.DeleteContainer(id)
		return "", "", fmt.Errorf("mount rootfs of %s: %w", id, err)
	}
	return path, "sha256:" + img.ID, nil
}

func idtoolsMaps(ms []specs.LinuxIDMapping) []idtools.IDMap {
	out := make([]idtools.IDMap, len(ms))
	for i, m := range ms {
		out[i] = idtools.IDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
	}
	return out
}

// RemoveRootfs unmounts and deletes container id's writable layer; a missing one is not
// an error. An image that RemoveImage hid while this container used it goes with it.
//
// The unmount and the delete run without the service's lock: deleting a layer of many
// files is slow, and every CreateContainer takes that lock. containers/storage locks its
// own stores; the lock is taken only for the image bookkeeping after it, and an image
// deleted with its last user is deleted without it (deleteIfRemoved).
func (s *Service) RemoveRootfs(id string) error {
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	if ours, err := s.removeWritable(id); ours {
		return err
	}
	c, err := s.store.Container(id)
	if errors.Is(err, storage.ErrContainerUnknown) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rootfs of %s: %w", id, err)
	}
	// A layer the store no longer knows has nothing mounted: a daemon killed inside
	// DeleteContainer (it deletes the layer, then the container's record) leaves the record
	// without its layer, and DeleteContainer then removes the record alone.
	if _, err := s.store.Unmount(id, true); err != nil && !errors.Is(err, storage.ErrLayerNotMounted) && !errors.Is(err, storage.ErrLayerUnknown) {
		return fmt.Errorf("unmount rootfs of %s: %w", id, err)
	}
	if err := s.store.DeleteContainer(id); err != nil && !errors.Is(err, storage.ErrContainerUnknown) {
		return fmt.Errorf("delete rootfs of %s: %w", id, err)
	}
	s.deleteIfRemoved(c.ImageID)
	return nil
}
