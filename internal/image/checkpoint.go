package image

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containers/storage"
	"github.com/containers/storage/pkg/archive"
	"github.com/containers/storage/pkg/chrootarchive"
	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// RootfsDiff is what container id wrote to its rootfs: a layer tar of its changes (a
// deletion as a ".wh." entry, as image layers carry them) and the paths it deleted, as a
// checkpoint archive holds them (rootfs-diff.tar, deleted.files) for a restore to put
// back: a restored process finds the files it had open as they were. The caller closes
// the tar. The container's files are the tenant's: the caller holds its processes frozen
// (they could otherwise swap a directory for a link while it is read), the layer is read
// chrooted into it, and one whose files hold more than max bytes (holes counted; 0: no
// bound) is refused before it is read.
func (s *Stores) RootfsDiff(id string, max int64) (io.ReadCloser, []string, error) {
	return s.holder(id).RootfsDiff(id, max)
}

// RootfsDiff: see Stores.RootfsDiff.
func (s *Service) RootfsDiff(id string, max int64) (io.ReadCloser, []string, error) {
	s.mu.Lock()
	_, ours := s.writable[id]
	s.mu.Unlock()
	if ours && validWritableID(id) {
		upper := filepath.Join(s.writableRoot(), id, "upper")
		deleted, size, err := overlayChanges(upper)
		if err != nil {
			return nil, nil, fmt.Errorf("changes of container %s: %w", id, err)
		}
		if max > 0 && size > max {
			return nil, nil, fmt.Errorf("changes of container %s: %d bytes of files, more than the %d a checkpoint may still hold (checkpoints.max_size): %w", id, size, max, errdefs.ErrFailedPrecondition)
		}
		// storage-tar, chrooted into upper: no link in it leads out.
		rc, err := chrootarchive.Tar(upper, &archive.TarOptions{Compression: archive.Uncompressed, WhiteoutFormat: archive.OverlayWhiteoutFormat}, upper)
		if err != nil {
			return nil, nil, fmt.Errorf("changes of container %s: %w", id, err)
		}
		return rc, deleted, nil
	}
	c, err := s.store.Container(id)
	if err != nil {
		return nil, nil, fmt.Errorf("rootfs of container %s: %w", id, err)
	}
	if max > 0 {
		if size, err := s.store.DiffSize("", c.LayerID); err == nil && size > max {
			return nil, nil, fmt.Errorf("changes of container %s: %d bytes, more than the %d a checkpoint may still hold (checkpoints.max_size): %w", id, size, max, errdefs.ErrFailedPrecondition)
		}
	}
	changes, err := s.store.Changes("", c.LayerID)
	if err != nil {
		return nil, nil, fmt.Errorf("changes of container %s: %w", id, err)
	}
	var deleted []string
	for _, ch := range changes {
		if ch.Kind == archive.ChangeDelete {
			deleted = append(deleted, ch.Path)
		}
	}
	uncompressed := archive.Uncompressed
	rc, err := s.store.Diff("", c.LayerID, &storage.DiffOptions{Compression: &uncompressed})
	if err != nil {
		return nil, nil, fmt.Errorf("changes of container %s: %w", id, err)
	}
	return rc, deleted, nil
}

// overlayChanges lists the paths an overlay's upper directory deletes (whiteouts: 0/0
// character devices), as absolute paths in the container, and sums the sizes of its
// regular files, holes counted (what a tar of it writes).
func overlayChanges(upper string) ([]string, int64, error) {
	var out []string
	var size int64
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			size += fi.Size()
			return nil
		}
		if err != nil || d.Type()&fs.ModeCharDevice == 0 {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Rdev == 0 {
			rel, err := filepath.Rel(upper, p)
			if err != nil {
				return err
			}
			out = append(out, "/"+rel)
		}
		return nil
	})
	return out, size, err
}

// ApplyRootfsDiff puts a checkpoint's rootfs changes into a new container's rootfs:
// the deleted paths are removed, then the layer tar (nil: none) is applied, its ".wh."
// entries deleting, in a chroot of rootfs so that no symlink in it leads out. Both are
// resolved inside rootfs whatever it holds.
func ApplyRootfsDiff(rootfs string, deleted []string, diff io.Reader) error {
	for _, p := range deleted {
		full, err := securejoin.SecureJoin(rootfs, p)
		if err != nil {
			return fmt.Errorf("deleted file %q: %w", p, err)
		}
		if filepath.Clean(full) == filepath.Clean(rootfs) {
			return fmt.Errorf("deleted file %q is the root", p)
		}
		if err := os.RemoveAll(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("deleted file %q: %w", p, err)
		}
	}
	if diff == nil {
		return nil
	}
	if _, err := chrootarchive.ApplyUncompressedLayer(rootfs, diff, &archive.TarOptions{}); err != nil {
		return fmt.Errorf("apply the rootfs changes: %w", err)
	}
	return nil
}
