package image

import (
	"errors"
	"fmt"

	"github.com/containers/storage"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/failpoint"
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
		// Perhaps the retry of a removal that failed after it hid the image: finish it,
		// unless a pull is under way, whose layers have no image yet.
		if s.inFlight == 0 {
			s.collect()
		}
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

// deleteImage hides img (takes its names, one write), then deletes it and its unshared
// layers, or keeps it hidden while containers use it (as rootfs or image volumes). Hidden
// first, the image is removed for every caller at once; what a crash or an error leaves
// after that is garbage that collect deletes (at start, and when a removal is retried).
// Callers hold s.mu.
func (s *Service) deleteImage(img *storage.Image) error {
	if len(img.Names) > 0 {
		if err := s.store.SetNames(img.ID, nil); err != nil {
			return fmt.Errorf("remove image %s: %w", img.ID, err)
		}
	}
	if err := failpoint.Fail("remove-image/hidden"); err != nil {
		return fmt.Errorf("remove image %s: %w", img.ID, err)
	}
	if users := s.users(img.ID); len(users) > 0 {
		// containers/storage refuses to delete an image its own containers use, but not
		// one under our writable layers (writable.go), which it does not know of.
		logrus.WithFields(logrus.Fields{"image": img.ID, "containers": users}).Info("image removed; its layers stay until its containers are removed")
		return nil
	}
	_, err := s.store.DeleteImage(img.ID, true)
	if errors.Is(err, storage.ErrImageUsedByContainer) {
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

// gcLayers deletes what a failed pull left behind (collect), unless another pull is under
// way, whose layers it would take.
func (s *Service) gcLayers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight > 1 {
		return
	}
	s.collect()
}

// collect deletes the garbage of pulls and removals that failed or crashed half-way:
// images without names (removed) that no container uses, then layers that no image or
// container uses. Callers hold s.mu, and no pull is under way but perhaps the caller's.
func (s *Service) collect() {
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	imgs, err := s.store.Images()
	if err != nil {
		logrus.WithError(err).Warn("image garbage collection: list images")
		return
	}
	for _, im := range imgs {
		if removed(&im) && len(s.users(im.ID)) == 0 {
			switch _, err := s.store.DeleteImage(im.ID, true); {
			case err == nil:
				logrus.WithField("image", im.ID).Info("deleted an image whose removal had not finished")
			case !errors.Is(err, storage.ErrImageUnknown):
				logrus.WithError(err).WithField("image", im.ID).Warn("image garbage collection: delete a removed image")
			}
		}
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
	imgs, _ = s.store.Images()
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
				logrus.WithField("layer", l.ID).Info("deleted a layer no image or container uses")
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
