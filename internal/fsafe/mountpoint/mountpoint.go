// Package mountpoint undoes mounts the daemon stacked at a path (pod tmpfs, a user
// namespace's rootfs bind, idmapped volumes, runsc's null netns).
package mountpoint

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// DetachAll lazily detaches every mount stacked at path; a path that is not (or no longer)
// a mount point, or does not exist, is not an error, so it can be repeated.
func DetachAll(path string) error {
	for {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
}
