package container

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/ckptsign"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
)

// The archive's entries, named as CRI-O and containerd name theirs (checkpointctl's
// metadata package), so that checkpointctl reads it.
const (
	checkpointDir  = "checkpoint"  // CRIU's image
	configDumpFile = "config.dump" // checkpointConfig
	specDumpFile   = "spec.dump"   // the container's OCI spec
	dumpLogFile    = "dump.log"    // CRIU's log
)

// checkpointConfig is config.dump: checkpointctl's ContainerConfig (its JSON names),
// written here rather than imported, the module bringing newer versions of dependencies
// this one shares.
type checkpointConfig struct {
	ID              string    `json:"id"`
	Name            string    `json:"name"`
	RootfsImage     string    `json:"rootfsImage,omitempty"`
	RootfsImageRef  string    `json:"rootfsImageRef,omitempty"`
	RootfsImageName string    `json:"rootfsImageName,omitempty"`
	OCIRuntime      string    `json:"runtime,omitempty"`
	CreatedTime     time.Time `json:"createdTime"`
	CheckpointedAt  time.Time `json:"checkpointedTime"`
	RestoredAt      time.Time `json:"restoredTime"`
	Restored        bool      `json:"restored"`
}

// Checkpoint writes a checkpoint archive of the running container to location, which
// must not exist, in a directory that does: an uncompressed tar of CRIU's image
// (checkpoint/), what the container is (config.dump), its OCI spec (spec.dump), CRIU's
// log (dump.log) and what it changed in its rootfs (rootfs-diff.tar, deleted.files). The container keeps running. The archive holds the memory of
// its processes, so only root may read it. On error nothing is left at location or
// beside it. timeout 0 leaves the caller's deadline.
func (m *Manager) Checkpoint(ctx context.Context, id, location string, timeout time.Duration) error {
	if id == "" {
		return invalid("container_id is empty")
	}
	if location == "" {
		return invalid("location is empty: it is the path of the checkpoint archive to write")
	}
	if !filepath.IsAbs(location) {
		return invalid("location %q is not an absolute path", location)
	}
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	c.op.Lock()
	defer c.op.Unlock()
	if st := c.Status().State; st != StateRunning {
		return fmt.Errorf("checkpoint container %s: it is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	ck, ok := c.rt.(kind.Checkpointer)
	if !ok {
		return fmt.Errorf("checkpoint container %s: handler %q (%s) cannot checkpoint containers: %w", c.ID, c.Handler, c.rt.Type(), errdefs.ErrNotImplemented)
	}
	if err := m.rowAllows(c.Handler, false); err != nil {
		return fmt.Errorf("checkpoint container %s: %w", c.ID, err)
	}
	// location's directory is resolved once, now, and only ever reached through this
	// descriptor: whatever its path becomes meanwhile, the archive goes to that directory.
	dir := filepath.Dir(location)
	dirFD, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return invalid("location %q: %s is not an existing directory", location, dir)
	}
	defer unix.Close(dirFD)
	var st unix.Stat_t
	if err := unix.Fstatat(dirFD, filepath.Base(location), &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return fmt.Errorf("location %q exists; checkpoint archives are not overwritten: %w", location, errdefs.ErrAlreadyExists)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}

	// CRIU's image and the archive's content are made in the daemon's own directory on
	// disk (the image can be large: not run_root's tmpfs), never in location's directory,
	// which a user may write: there a swapped path would take root's writes anywhere, and a
	// crash would leave the processes' memory beside location.
	tmp, err := os.MkdirTemp(m.opts.CheckpointDir, c.ID+"-")
	if err != nil {
		return fmt.Errorf("checkpoint container %s: %w", c.ID, err)
	}
	defer os.RemoveAll(tmp)
	content, work := filepath.Join(tmp, "content"), filepath.Join(tmp, "work")
	for _, d := range []string{filepath.Join(content, checkpointDir), work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", c.ID, err)
		}
	}
	start := time.Now()
	// One frozen instant for CRIU's image and the rootfs changes: CRIU restores an open
	// file only at the size it dumped, and a container running between the two could
	// change its files, or swap a directory for a link to a host tree (R2).
	err = m.whileFrozen(ctx, c, ck, func() error {
		if err := ck.Checkpoint(ctx, c.Task(), filepath.Join(content, checkpointDir), work); err != nil {
			return err // the kind names the handler, the call and the container
		}
		if err := m.checkpointFiles(c, content, work, start); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", c.ID, err)
		}
		if err := m.writeRootfsDiff(c, content); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", c.ID, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if m.opts.CheckpointKey != nil {
		if err := ckptsign.Sign(content, m.opts.CheckpointKey); err != nil {
			return fmt.Errorf("checkpoint container %s: sign it: %w", c.ID, err)
		}
	}
	if err := publishTar(dirFD, location, content); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("checkpoint container %s: location %q exists: %w", c.ID, location, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("checkpoint container %s: archive: %w", c.ID, err)
	}
	logrus.WithFields(logrus.Fields{"container": c.ID, "location": location, "duration": time.Since(start)}).Info("container checkpointed")
	return nil
}

// userImage is the image as the pod spec names it, where kubelet sent that.
func (c *Container) userImage() string {
	if s := c.config.GetImage().GetUserSpecifiedImage(); s != "" {
		return s
	}
	return c.ImageRef
}

// checkpointFiles adds config.dump, spec.dump and CRIU's log to the archive's content.
func (m *Manager) checkpointFiles(c *Container, content, work string, at time.Time) error {
	cfg, err := json.Marshal(checkpointConfig{
		// As CRI-O: the image the user asked for, its ID, and its name (kubelet sends the
		// ID in config.image.image, which restoring tools cannot pull).
		ID: c.ID, Name: c.Name, RootfsImage: c.userImage(), RootfsImageRef: c.ImageID, RootfsImageName: c.imageName(),
		OCIRuntime: c.Handler, CreatedTime: time.Unix(0, c.CreatedAt), CheckpointedAt: at,
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(content, configDumpFile), cfg, 0o600); err != nil {
		return err
	}
	spec, err := os.ReadFile(filepath.Join(c.Dir, "config.json"))
	if err != nil {
		return fmt.Errorf("read the container's spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(content, specDumpFile), spec, 0o600); err != nil {
		return err
	}
	log, err := os.ReadFile(filepath.Join(work, dumpLogFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a runtime that keeps no log there
	}
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(content, dumpLogFile), log, 0o600)
}

// publishTar writes the archive of root as location's name in the directory dirFD:
// an unnamed file (O_TMPFILE), written and synced, then linked in under that name, which a
// link never replaces. A crash leaves nothing behind. Where the file system has no
// O_TMPFILE, a new hidden name is used (created exclusively, never through a symlink) and
// removed once linked.
func publishTar(dirFD int, location, root string) error {
	name := filepath.Base(location)
	fd, err := unix.Openat(dirFD, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err == nil {
		f := os.NewFile(uintptr(fd), location)
		defer f.Close()
		if err := writeTar(f, root); err != nil {
			return err
		}
		// linkat of an O_TMPFILE file through /proc needs AT_SYMLINK_FOLLOW (root may).
		return unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), dirFD, name, unix.AT_SYMLINK_FOLLOW)
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	var tmp string
	for i := 0; ; i++ {
		tmp = fmt.Sprintf(".%s.tmp-%d-%d", name, os.Getpid(), time.Now().UnixNano()+int64(i))
		fd, err = unix.Openat(dirFD, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if !errors.Is(err, unix.EEXIST) || i > 100 {
			break
		}
	}
	if err != nil {
		return err
	}
	defer func() { _ = unix.Unlinkat(dirFD, tmp, 0) }() // gone already once linked into place
	f := os.NewFile(uintptr(fd), tmp)
	defer f.Close()
	if err := writeTar(f, root); err != nil {
		return err
	}
	return unix.Linkat(dirFD, tmp, dirFD, name, 0)
}

// writeTar writes the directories and regular files under root, by their paths relative
// to it, as an uncompressed tar to f, and syncs it.
func writeTar(f *os.File, root string) (err error) {
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Sync()
}
