// Package mountpoint undoes mounts the daemon stacked at a path (pod tmpfs, a user
// namespace's rootfs bind, idmapped volumes, runsc's null netns).
package mountpoint

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DetachAll lazily detaches every mount stacked at path; a path that is not (or no longer)
// a mount point, or does not exist, is not an error, so it can be repeated. A symlink at
// path is never followed (UMOUNT_NOFOLLOW): it is not a mount point, so nothing is
// detached and nil is returned, wherever it points. Such a name may be a container's
// (a pod's /dev/shm of an earlier release), and root following it would detach node
// mounts. Symlinks in the directories above path are followed.
func DetachAll(path string) error {
	for {
		err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
}

// IsMountPoint reports whether path itself, a symlink there not followed, is the root of
// a mount: by statx's STATX_ATTR_MOUNT_ROOT, or where the kernel does not say (before
// 5.8), by a device other than its parent's.
func IsMountPoint(path string) (bool, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_TYPE, &stx); err != nil {
		return false, fmt.Errorf("statx %s: %w", path, err)
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	var st, parent unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, fmt.Errorf("lstat %s: %w", path, err)
	}
	if err := unix.Stat(filepath.Dir(path), &parent); err != nil {
		return false, fmt.Errorf("stat %s: %w", filepath.Dir(path), err)
	}
	return st.Dev != parent.Dev, nil
}
