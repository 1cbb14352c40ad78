package image

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Containers' writable layers of our own: an overlay of the image's layers (as
// containers/storage's overlay driver keeps them) with an upper and work directory per
// container under <graph root>/rtshimd-rootfs/<id>, named by nothing but that directory
// and an in-memory index. containers/storage made each container a container record and
// a layer record, rewriting and locking its JSON files (containers.json, layers.json,
// mountpoints.json: every container's, on every create and removal) and making a dozen
// files and links: the largest part of the daemon's own work in a pod start, and O(pods).
// Here a create is three directories, one small file and one mount, outside the service's
// lock.
//
// A rootfs is removed with its container (a reboot unmounts it; the container's removal
// then deletes it). The image it was made from is recorded in the directory (image), so RemoveImage keeps an image in
// use and removes it with its last user. Containers with ID mappings (pod user
// namespaces), stores on other drivers and images whose layers are not laid out as
// expected go through containers/storage as before.
const (
	writableDir = "rtshimd-rootfs"
	// writableMode is the writable layers' directory's and each layer's <id> directory's:
	// root's alone, as containerd's snapshots and containers/storage's layers are. Below
	// them upper holds what the container wrote, with its own modes (upper itself has the
	// image root's, usually 0755), so a searchable path would let any local user read the
	// container's files and write into its world-writable directories (/tmp). Nothing
	// but root on the node needs the path: the runtimes (runc, crun, runsc, shims) mount
	// and serve the rootfs as root, and a container in a pod user namespace, whose root
	// is another user on the node, never gets a layer here (CreateRootfs makes those
	// through containers/storage, bind-mounted into the container's own directory).
	writableMode = 0o700
	// pageLimit bounds the overlay's mount options, which the kernel takes in one page.
	pageLimit = 4096 - 512
)

// writableRoot is the directory of the writable layers.
func (s *Service) writableRoot() string {
	return filepath.Join(s.store.GraphRoot(), writableDir)
}

// loadWritable indexes the writable layers at start, mounted or not: each is removed
// by its container's removal (RemoveRootfs), after a reboot too, when kubelet removes the
// containers the reboot ended. Nothing is deleted here: a layer not seen mounted may be a
// running container's, seen from another mount namespace.
func (s *Service) loadWritable() error {
	root := s.writableRoot()
	if err := os.MkdirAll(root, writableMode); err != nil {
		return fmt.Errorf("writable layers dir %s: %w", root, err)
	}
	if err := os.Chmod(root, writableMode); err != nil {
		return fmt.Errorf("writable layers dir %s: %w", root, err)
	}
	// A private mount of its own, as containers/storage makes its driver's home: the
	// containers' overlays are then not propagated to the host's other mount namespaces
	// (a pod's hostPath of /var/lib with HostToContainer propagation would receive every
	// one). Left by an earlier daemon, it is kept.
	mounted, err := mountinfo.Mounted(root)
	if err != nil {
		return fmt.Errorf("writable layers dir %s: %w", root, err)
	}
	if !mounted {
		if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("writable layers dir %s: bind: %w", root, err)
		}
	}
	if err := unix.Mount("", root, "", unix.MS_PRIVATE, ""); err != nil {
		s.closeWritable()
		return fmt.Errorf("writable layers dir %s: make private: %w", root, err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		s.closeWritable()
		return fmt.Errorf("writable layers dir %s: %w", root, err)
	}
	s.writable = map[string]string{}
	for _, en := range entries {
		// Earlier releases made each layer's directory searchable by all (0711); the
		// directory above, now 0700, closes them already.
		if en.IsDir() {
			if err := os.Chmod(filepath.Join(root, en.Name()), writableMode); err != nil {
				logrus.WithError(err).WithField("dir", filepath.Join(root, en.Name())).Warn("writable layer: make it root's alone")
			}
		}
		// A create cut short before the image was written names none; its container's
		// cleanup removes it.
		img, _ := os.ReadFile(filepath.Join(root, en.Name(), "image"))
		s.writable[en.Name()] = strings.TrimSpace(string(img))
	}
	return nil
}

// closeWritable unmounts the writable layers' own mount unless a layer is mounted in it
// (a plain unmount fails then: it stays for the next daemon). runc's containers' layers
// are not (DetachRootfs): theirs are in the containers' own mount namespaces.
func (s *Service) closeWritable() {
	root := s.writableRoot()
	if err := unix.Unmount(root, 0); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EINVAL) {
		logrus.WithError(err).WithField("dir", root).Warn("unmount the writable layers dir")
	}
}

// imageLowers returns the overlay lowerdir of image top layer top, topmost first, and
// the top layer's diff (whose mode and owner the rootfs's root takes), or ok false if the
// store is not an overlay store laid out as expected (then containers/storage makes the
// rootfs).
func (s *Service) imageLowers(top string) (lowers, diff string, ok bool) {
	if s.store.GraphDriverName() != "overlay" || top == "" {
		return "", "", false
	}
	home := filepath.Join(s.store.GraphRoot(), "overlay")
	link, err := os.ReadFile(filepath.Join(home, top, "link"))
	if err != nil || len(link) == 0 || strings.ContainsAny(string(link), "/:,\n") {
		return "", "", false
	}
	parts := []string{filepath.Join(home, "l", string(link))}
	if lower, err := os.ReadFile(filepath.Join(home, top, "lower")); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(lower)), ":") {
			if !strings.HasPrefix(l, "l/") || strings.ContainsAny(l[2:], "/,") {
				return "", "", false
			}
			parts = append(parts, filepath.Join(home, l))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", "", false
	}
	for _, p := range parts {
		// A missing link (containers/storage recreates them when it mounts), or a layer
		// kept as several diffs (diff1, ...: one whose IDs were shifted in place): leave
		// it to containers/storage. "<link>/../diff1" is resolved by the kernel through
		// the link, to the layer's own directory.
		if _, err := os.Stat(p); err != nil {
			return "", "", false
		}
		if _, err := os.Lstat(p + "/../diff1"); err == nil {
			return "", "", false
		}
	}
	return strings.Join(parts, ":"), filepath.Join(home, top, "diff"), true
}

// createWritable makes and mounts container id's writable layer of image imageID over
// lowers. The caller has registered id as a user of the image; on error nothing of the
// layer is left.
func (s *Service) createWritable(id, imageID, lowers, diff string) (rootfs string, err error) {
	if !validWritableID(id) {
		return "", fmt.Errorf("container ID %q cannot name a writable layer", id)
	}
	dir := filepath.Join(s.writableRoot(), id)
	upper, work, merged := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lowers, upper, work)
	if len(opts) > pageLimit {
		return "", errTooLong
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	var st syscall.Stat_t
	if err := syscall.Stat(diff, &st); err != nil {
		return "", fmt.Errorf("image layer %s: %w", diff, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("writable layer of %s: %w", id, err)
	}
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", fmt.Errorf("writable layer of %s: %w", id, err)
		}
	}
	// The merged root is the upper's: it takes the image root's mode and owner.
	if err := os.Chown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return "", fmt.Errorf("writable layer of %s: %w", id, err)
	}
	if err := os.Chmod(upper, os.FileMode(st.Mode&0o7777)); err != nil {
		return "", fmt.Errorf("writable layer of %s: %w", id, err)
	}
	if err := os.Chmod(dir, writableMode); err != nil {
		return "", fmt.Errorf("writable layer of %s: %w", id, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "image"), []byte(imageID), 0o600); err != nil {
		return "", fmt.Errorf("writable layer of %s: %w", id, err)
	}
	// Not volatile (the store's transient layers are): in runs alternated with it, the
	// option saved nothing at start and runc's create was no faster.
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return "", fmt.Errorf("mount writable layer of %s: %w", id, err)
	}
	return merged, nil
}

// DetachRootfs takes container id's writable layer out of the node's mount table once
// the container's own mount namespace holds it (after the runtime's create): each later
// runc reads the whole table several times per container, and the overlay's line, with
// its layers' paths, is the longest of a pod's. The container keeps its root; the layer's
// directories stay until its removal. A rootfs containers/storage made stays mounted.
// Not detached is not an error: the container runs either way.
func (s *Service) DetachRootfs(id string) {
	s.mu.Lock()
	_, ours := s.writable[id]
	s.mu.Unlock()
	if !ours || !validWritableID(id) {
		return
	}
	merged := filepath.Join(s.writableRoot(), id, "merged")
	if err := unix.Unmount(merged, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		logrus.WithError(err).WithFields(logrus.Fields{"container": id, "dir": merged}).Warn("detach the rootfs from the node's mount table")
	}
}

// validWritableID reports whether id can name a directory of ours (and an overlay option).
func validWritableID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/,:")
}

// errTooLong: the layers' paths do not fit in one mount's options.
var errTooLong = errors.New("overlay options longer than a page")

// removeWritable unmounts and deletes container id's writable layer, if it has one of
// ours (ok false: it has none).
func (s *Service) removeWritable(id string) (ok bool, err error) {
	if !validWritableID(id) {
		return false, nil
	}
	s.mu.Lock()
	imageID, known := s.writable[id]
	s.mu.Unlock()
	dir := filepath.Join(s.writableRoot(), id)
	if !known {
		if _, err := os.Lstat(dir); err != nil {
			return false, nil
		}
	}
	merged := filepath.Join(dir, "merged")
	if err := unix.Unmount(merged, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return true, fmt.Errorf("unmount rootfs of %s: %w", id, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return true, fmt.Errorf("delete rootfs of %s: %w", id, err)
	}
	s.mu.Lock()
	delete(s.writable, id)
	s.mu.Unlock()
	s.deleteIfRemoved(imageID)
	return true, nil
}

// rootfsOwners names the containers whose rootfs the store has: writable layers of ours
// and containers/storage containers (rootfs with ID mappings; image volumes' records too,
// harmless: no container has their IDs). Read once per own store at start, when no pull
// holds the container store's lock.
func (s *Service) rootfsOwners() []string {
	s.mu.Lock()
	out := slices.Collect(maps.Keys(s.writable))
	s.mu.Unlock()
	if ctrs, err := s.store.Containers(); err == nil {
		for _, c := range ctrs {
			out = append(out, c.ID)
		}
	}
	return out
}

// unused reports whether no container has a rootfs or an image volume in the store.
func (s *Service) unused() bool {
	s.mu.Lock()
	n := len(s.writable) + len(s.pending)
	s.mu.Unlock()
	if n > 0 {
		return false
	}
	ctrs, err := s.store.Containers()
	return err == nil && len(ctrs) == 0
}
