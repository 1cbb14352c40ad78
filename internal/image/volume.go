package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/containers/storage"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// Image volumes (KEP-4639, CRI Mount.image): an image's root filesystem, mounted read-only
// for one mount of one container (its owner).
//
// Each (container, mount) gets a containers/storage container of its own on the image,
// mounted without an upper layer ("ro"). Nothing is shared, so there is no reference count
// to get wrong across a crash: a volume is mounted exactly while its storage container
// exists, and removing the owner's storage containers (found by the owner named in their
// metadata, so even a volume whose owner's record never named it) undoes everything.
// containers/storage also refuses to delete an image that a container is made from, so
// RemoveImage treats an image in use by a volume as one in use by a rootfs: it is hidden
// and deleted with its last user.

// volumeMountOpts are the options of the store's own mount of a volume: read-only (no
// upper layer, and MS_RDONLY), and neither devices nor set-user-ID programs. Not noexec:
// KEP-4639 dropped it, and in a pod user namespace the runtime cannot clear a flag of the
// source when it binds it (the flags are locked there: EPERM). The container's bind of it
// repeats them (internal/oci).
var volumeMountOpts = []string{"ro", "nodev", "nosuid"}

// Volume is one image volume of a container.
type Volume struct {
	ID      string // the containers/storage container that holds it
	ImageID string // "sha256:<config digest>"
	Path    string // the read-only mount of the image's root filesystem
}

// volumeMeta is what a volume's storage container says of itself.
type volumeMeta struct {
	Owner string `json:"image_volume_of"`
	Mount int    `json:"mount"`
}

func decodeVolumeMeta(s string) (volumeMeta, bool) {
	var m volumeMeta
	if s == "" || json.Unmarshal([]byte(s), &m) != nil || m.Owner == "" {
		return volumeMeta{}, false
	}
	return m, true
}

// MountVolume mounts image ref read-only for mount index of container owner. An image
// that is not in the store (or was removed) is ErrNotFound. With mappings (a volume of a
// container in a pod user namespace), files the image owns by container ID x appear owned
// by the mapped host ID, as for CreateRootfs: an overlay mount cannot be idmapped after
// the fact, its layers can.
func (s *Service) MountVolume(owner string, index int, ref string, uids, gids []specs.LinuxIDMapping) (*Volume, error) {
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	meta, err := json.Marshal(volumeMeta{Owner: owner, Mount: index})
	if err != nil {
		return nil, err
	}
	// The image's user from here (pending), so that no removal deletes it meanwhile; the
	// storage container is made without s.mu (containers/storage waits for a pull's
	// extraction).
	key := fmt.Sprintf("volume %d of %s", index, owner)
	img, err := s.use(key, ref)
	if err != nil {
		return nil, err
	}
	defer s.unuse(key, img.ID)
	opts := &storage.ContainerOptions{MountOpts: volumeMountOpts}
	if len(uids) > 0 || len(gids) > 0 {
		opts.IDMappingOptions = storage.IDMappingOptions{UIDMap: idtoolsMaps(uids), GIDMap: idtoolsMaps(gids)}
		// The store may have mapped the image's layers for it: its size changes.
		defer s.refreshSize(img.ID)
	}
	c, err := s.store.CreateContainer("", nil, img.ID, "", string(meta), opts)
	if err != nil {
		return nil, fmt.Errorf("image volume of %s from image %s: %w", owner, img.ID, err)
	}
	path, err := s.store.Mount(c.ID, "")
	if err != nil {
		_ = s.store.DeleteContainer(c.ID)
		return nil, fmt.Errorf("mount image volume of %s from image %s: %w", owner, img.ID, err)
	}
	logrus.WithFields(logrus.Fields{"container": owner, "mount": index, "image": img.ID, "volume": c.ID}).Debug("image volume mounted")
	return &Volume{ID: c.ID, ImageID: "sha256:" + img.ID, Path: path}, nil
}

// use finds image ref for a new user, key, and registers key as its user (pending) until
// unuse: a removal from then on keeps the image. A removed image, or one being deleted,
// is ErrNotFound.
func (s *Service) use(key, ref string) (*storage.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, err := s.usable(ref)
	if err != nil {
		return nil, err
	}
	if _, dup := s.pending[key]; dup {
		return nil, fmt.Errorf("%s: %w", key, errdefs.ErrAlreadyExists)
	}
	s.pending[key] = img.ID
	return img, nil
}

// usable looks ref up for a new user: a removed image is not found, and one being deleted
// (deleting) says so. Callers hold s.mu; the lookup reads the image store alone, which no
// pull holds for long.
func (s *Service) usable(ref string) (*storage.Image, error) {
	img, err := s.lookup(ref)
	if err != nil {
		return nil, err
	}
	if removed(img) {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	if _, gone := s.deleting[img.ID]; gone {
		return nil, fmt.Errorf("image %q (%s) is being removed: %w", ref, img.ID, errdefs.ErrNotFound)
	}
	return img, nil
}

// unuse ends use: the user is the store's container from now on, or none (then a
// removed image goes, if it was its last user).
func (s *Service) unuse(key, imageID string) {
	s.mu.Lock()
	delete(s.pending, key)
	s.mu.Unlock()
	s.deleteIfRemoved(imageID)
}

// RemoveVolumes unmounts and deletes every image volume of container owner; none is not
// an error. An image that RemoveImage hid while it was in use goes with its last user.
// Without s.mu: containers/storage locks its own stores.
func (s *Service) RemoveVolumes(owner string) error {
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	ctrs, err := s.store.Containers()
	if err != nil {
		return fmt.Errorf("image volumes of %s: %w", owner, err)
	}
	var errs []error
	images := map[string]bool{}
	for _, c := range ctrs {
		if m, ok := decodeVolumeMeta(c.Metadata); !ok || m.Owner != owner {
			continue
		}
		if _, err := s.store.Unmount(c.ID, true); err != nil && !errors.Is(err, storage.ErrLayerNotMounted) && !errors.Is(err, storage.ErrLayerUnknown) {
			errs = append(errs, fmt.Errorf("unmount image volume %s of %s: %w", c.ID, owner, err))
			continue
		}
		if err := s.store.DeleteContainer(c.ID); err != nil && !errors.Is(err, storage.ErrContainerUnknown) {
			errs = append(errs, fmt.Errorf("delete image volume %s of %s: %w", c.ID, owner, err))
			continue
		}
		images[c.ImageID] = true
	}
	for id := range images {
		s.deleteIfRemoved(id)
	}
	return errors.Join(errs...)
}

// VolumeOwners lists the containers that hold image volumes.
func (s *Service) VolumeOwners() ([]string, error) {
	ctrs, err := s.store.Containers()
	if err != nil {
		return nil, fmt.Errorf("image volumes: %w", err)
	}
	var out []string
	for _, c := range ctrs {
		if m, ok := decodeVolumeMeta(c.Metadata); ok && !slices.Contains(out, m.Owner) {
			out = append(out, m.Owner)
		}
	}
	return out, nil
}

// users names the containers that use image id: the owners of its volumes, the
// containers of its rootfs layers and those being made (pending). s.mu is taken for our
// own records only: the store's containers are read without it.
func (s *Service) users(id string) []string {
	var out []string
	s.mu.Lock()
	for ctr, img := range s.writable {
		if img == id {
			out = append(out, ctr)
		}
	}
	for key, img := range s.pending {
		if img == id && !slices.Contains(out, key) {
			out = append(out, key)
		}
	}
	s.mu.Unlock()
	ctrs, _ := s.store.Containers()
	for _, c := range ctrs {
		if c.ImageID != id {
			continue
		}
		user := c.ID
		if m, ok := decodeVolumeMeta(c.Metadata); ok {
			user = m.Owner
		}
		if !slices.Contains(out, user) {
			out = append(out, user)
		}
	}
	slices.Sort(out)
	return out
}

// deleteIfRemoved deletes image id if RemoveImage hid it while it was in use, now that
// one of its users is gone (it stays while others remain). Where its deletion is under
// way already, that deleter looks at its users again (startDelete). Callers do not hold
// s.mu.
func (s *Service) deleteIfRemoved(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	if _, busy := s.deleting[id]; busy {
		s.deleting[id] = true
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	img, err := s.store.Image(id)
	if err != nil || !removed(img) || len(s.users(id)) > 0 || !s.startDelete(id) {
		return
	}
	if err := s.deleteImage(img); err != nil {
		logrus.WithError(err).WithField("image", img.ID).Warn("delete removed image after its last container")
	}
}
