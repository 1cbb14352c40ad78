package image

import (
	"errors"
	"fmt"

	"github.com/containers/storage"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/pkg/errdefs"
)

// Remove removes an image by ID, tag or digest; an absent image is not an error. A tag
// of an image that has other names only loses that tag. An image that containers still
// use loses all its names (it is no longer listed) and keeps its layers until the last of
// those containers is removed.
func (s *Service) Remove(ref string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	img, err := s.lookup(ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if named, nerr := normalize(ref); nerr == nil && len(img.Names) > 1 && !isHexID(trimSHA(ref)) {
		for _, n := range img.Names {
			if n == named.String() {
				if err := s.store.RemoveNames(img.ID, []string{n}); err != nil {
					return fmt.Errorf("untag %s: %w", n, err)
				}
				logrus.WithFields(logrus.Fields{"image": img.ID, "name": n}).Info("image untagged")
				return nil
			}
		}
	}
	return s.deleteImage(img)
}

func trimSHA(s string) string {
	if len(s) > 7 && s[:7] == "sha256:" {
		return s[7:]
	}
	return s
}

// deleteImage deletes img and its unshared layers, or hides it while containers use it
// (as rootfs or image volumes).
// Callers hold s.mu.
func (s *Service) deleteImage(img *storage.Image) error {
	_, err := s.store.DeleteImage(img.ID, true)
	if errors.Is(err, storage.ErrImageUsedByContainer) {
		if err := s.store.SetNames(img.ID, nil); err != nil {
			return fmt.Errorf("remove image %s: %w", img.ID, err)
		}
		// The users are named so an operator can tell why the layers stay.
		logrus.WithFields(logrus.Fields{"image": img.ID, "containers": s.users(img.ID)}).Info("image removed; its layers stay until its containers are removed")
		return nil
	}
	if errors.Is(err, storage.ErrImageUnknown) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove image %s: %w", img.ID, err)
	}
	logrus.WithField("image", img.ID).Info("image removed")
	return nil
}

// gcLayers deletes layers that no image or container uses: what a failed pull left
// behind. It runs only while no other pull is under way, whose layers it would take.
func (s *Service) gcLayers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	if s.inFlight > 1 {
		return
	}
	used := map[string]bool{}
	layers, err := s.store.Layers()
	if err != nil {
		return
	}
	parent := map[string]string{}
	for _, l := range layers {
		parent[l.ID] = l.Parent
	}
	mark := func(id string) {
		for id != "" && !used[id] {
			used[id] = true
			id = parent[id]
		}
	}
	imgs, _ := s.store.Images()
	for _, im := range imgs {
		mark(im.TopLayer)
		for _, m := range im.MappedTopLayers {
			mark(m)
		}
	}
	ctrs, _ := s.store.Containers()
	for _, c := range ctrs {
		mark(c.LayerID)
	}
	// Delete children before parents.
	for changed := true; changed; {
		changed = false
		for _, l := range layers {
			if used[l.ID] || hasChild(layers, l.ID, used) {
				continue
			}
			if err := s.store.DeleteLayer(l.ID); err == nil {
				logrus.WithField("layer", l.ID).Debug("removed layer of a failed pull")
				used[l.ID] = true // gone; don't try again
				changed = true
			}
		}
	}
}

func hasChild(layers []storage.Layer, id string, gone map[string]bool) bool {
	for _, l := range layers {
		if l.Parent == id && !gone[l.ID] {
			return true
		}
	}
	return false
}
