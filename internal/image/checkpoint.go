package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containers/storage"
	"github.com/containers/storage/pkg/archive"
	"github.com/containers/storage/pkg/chrootarchive"
	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/sirupsen/logrus"
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

// checkpointAnnotations are the manifest annotations that make an image a checkpoint
// image: one layer holding a checkpoint archive's files, named by the container it was
// taken of (CRI-O's, which buildah writes in its recipe, and checkpointctl's).
var checkpointAnnotations = []string{"io.kubernetes.cri-o.annotations.checkpoint.name", "org.criu.checkpoint.container.name"}

// CheckpointName is the name of the container a checkpoint image in handler's store was
// made of, "" for any other image.
func (s *Stores) CheckpointName(handler, ref string) (string, error) {
	svc, row, err := s.storeFor(handler)
	if err != nil {
		return "", err
	}
	name, err := svc.CheckpointName(ref)
	return name, notPulled(err, row)
}

// CheckpointName: see Stores.CheckpointName. Read from the image's manifest once per
// image (an image does not change under its ID), and asked by ID on every
// CreateContainer: an ID seen before is answered without the store.
func (s *Service) CheckpointName(ref string) (string, error) {
	if v, ok := s.checkpointNames.Load(strings.TrimPrefix(ref, "sha256:")); ok {
		return v.(string), nil
	}
	img, err := s.lookup(ref)
	if err != nil {
		return "", err
	}
	var m struct {
		Annotations map[string]string `json:"annotations"`
	}
	// An image without a readable manifest is no checkpoint image, as for CRI-O.
	b, err := s.store.ImageBigData(img.ID, storage.ImageDigestBigDataKey)
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		logrus.WithError(err).WithField("image", img.ID).Debug("no manifest to tell a checkpoint image by")
	}
	name := ""
	for _, k := range checkpointAnnotations {
		if v := m.Annotations[k]; v != "" {
			name = v
			break
		}
	}
	s.checkpointNames.Store(img.ID, name)
	return name, nil
}
