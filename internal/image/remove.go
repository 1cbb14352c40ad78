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
//
// s.mu is held for the bookkeeping alone: the image is marked as being deleted (hidden
// from Status, List and CreateRootfs at once) under it, and its names and layers are
// taken without it: containers/storage locks its own stores (and waits for a pull's
// extraction), and deleting a layer of many files takes seconds, which every
// CreateContainer would wait for (audit 2026-11-26, N3).
func (s *Service) Remove(ref string) error {
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	img, err := s.lookup(ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		// Perhaps the retry of a removal that failed after it hid the image: finish it,
		// unless a pull is under way, whose layers have no image yet.
		s.collect(0)
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
	if !s.startDelete(img.ID) {
		// Another removal of it is under way (or the deletion of its last user's).
		return nil
	}
	return s.deleteImage(img)
}

func trimSHA(s string) string {
	if len(s) > 7 && s[:7] == "sha256:" {
		return s[7:]
	}
	return s
}

// startDelete marks image id as being deleted (deleting), false if it is already: one
// deleter at a time, and no new user from now on (CreateRootfs and MountVolume refuse it).
func (s *Service) startDelete(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.deleting[id]; busy {
		s.deleting[id] = true // look at its users again
		return false
	}
	s.deleting[id] = false
	return true
}

// deleteImage hides img (takes its names, one write), then deletes it and its unshared
// layers, or keeps it hidden while containers use it (as rootfs or image volumes). Hidden
// first, the image is removed for every caller at once; what a crash or an error leaves
// after that is garbage that collect deletes (at start, and when a removal is retried).
// The caller has marked it (startDelete) and does not hold s.mu; the mark is cleared here.
func (s *Service) deleteImage(img *storage.Image) error {
	if len(img.Names) > 0 {
		if err := s.store.SetNames(img.ID, nil); err != nil {
			s.endDelete(img.ID)
			return fmt.Errorf("remove image %s: %w", img.ID, err)
		}
	}
	if err := failpoint.Fail("remove-image/hidden"); err != nil {
		s.endDelete(img.ID)
		return fmt.Errorf("remove image %s: %w", img.ID, err)
	}
	return s.deleteUnused(img.ID, "image removed")
}

// deleteUnused deletes hidden image id, marked (startDelete), with its unshared layers
// unless containers use it, and clears the mark. containers/storage locks its own stores
// and deletes the layers' files after it released them; s.mu is taken for the
// bookkeeping alone.
func (s *Service) deleteUnused(id, done string) error {
	for {
		users := s.users(id)
		if len(users) == 0 {
			_, err := s.store.DeleteImage(id, true)
			switch {
			case err == nil || errors.Is(err, storage.ErrImageUnknown):
				s.forgetSize(id)
				s.checkpointNames.forget(id)
				s.endDelete(id)
				if err == nil {
					logrus.WithField("image", id).Info(done)
				}
				return nil
			case !errors.Is(err, storage.ErrImageUsedByContainer):
				s.endDelete(id)
				return fmt.Errorf("remove image %s: %w", id, err)
			}
			// The users are named so an operator can tell why the layers stay.
			users = s.users(id)
		}
		// containers/storage refuses to delete an image its own containers use, but not
		// one under our writable layers (writable.go), which it does not know of. A user
		// that went since they were listed found the image marked and left its deletion
		// to this one (deleteIfRemoved): look again.
		s.mu.Lock()
		if !s.deleting[id] {
			delete(s.deleting, id)
			s.mu.Unlock()
			logrus.WithFields(logrus.Fields{"image": id, "containers": users}).Info("image removed; its layers stay until its containers are removed")
			return nil
		}
		s.deleting[id] = false
		s.mu.Unlock()
	}
}

// endDelete clears image id's mark (startDelete).
func (s *Service) endDelete(id string) {
	s.mu.Lock()
	delete(s.deleting, id)
	s.mu.Unlock()
}

// beginPull counts a pull in flight, once no layer GC runs (collecting); endPull ends it.
func (s *Service) beginPull() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.collecting {
		s.gcDone.Wait()
	}
	s.inFlight++
}

func (s *Service) endPull() {
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
}

// gcLayers deletes what a failed pull left behind (collect), unless another pull is under
// way, whose layers it would take. The caller is a pull in flight.
func (s *Service) gcLayers() {
	s.collect(1)
}

// collect deletes the garbage of pulls and removals that failed or crashed half-way:
// images without names (removed) that no container uses, then layers that no image or
// container uses. It does nothing while more than pulls (the caller's own: 0 or 1) are
// under way, or while another collect runs. s.mu is not held: it is taken to start
// (collecting, which new pulls wait for) and for each image's bookkeeping; the store is
// read and its deletions made without it.
func (s *Service) collect(pulls int) {
	s.mu.Lock()
	if s.collecting || s.inFlight > pulls {
		s.mu.Unlock()
		return
	}
	s.collecting = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.collecting = false
		s.gcDone.Broadcast()
		s.mu.Unlock()
	}()
	defer s.fsCache.invalidate() // after the change, so no walk caches the state before it
	imgs, err := s.store.Images()
	if err != nil {
		logrus.WithError(err).Warn("image garbage collection: list images")
		return
	}
	for _, im := range imgs {
		if removed(&im) && s.startDelete(im.ID) {
			if err := s.deleteUnused(im.ID, "deleted an image whose removal had not finished"); err != nil {
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
