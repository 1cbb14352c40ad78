package container

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/sandbox"
)

// A container is restored from a checkpoint archive when CreateContainer's
// config.image.image is the archive's path, as CRI-O and containerd take one (crictl
// create with the archive as image), or names a checkpoint image: an OCI image holding
// the archive's files, annotated as one (image.CheckpointName), which a pod spec can name
// (kubelet has no restore of its own). The archive is unpacked into the daemon's state
// (Metadata.Restore), the container made from the image the checkpoint names, with the
// files it had changed and deleted put back and the process (command, environment,
// working directory) it checkpointed, and the runtime's create is not run:
// StartContainer restores its processes (CRIU, through the runtime's restore, run by the
// monitor with the container's stdio).

// The rootfs changes in a checkpoint archive (checkpointctl's names, as CRI-O's).
const (
	rootfsDiffFile   = "rootfs-diff.tar" // the writable layer's changes, as a layer tar
	deletedFilesFile = "deleted.files"   // a JSON list of the paths the container deleted
)

// checkpointArchive reports whether a config's image names a checkpoint archive: a path,
// which no image reference or ID is.
func checkpointArchive(img string) bool { return filepath.IsAbs(img) }

// archiveChecks refuses, before anything is made, a checkpoint archive that is not a
// file, and a restore this pod cannot have.
func (m *Manager) archiveChecks(cfg *runtimeapi.ContainerConfig, sb *sandbox.Sandbox) error {
	path := cfg.GetImage().GetImage()
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		why := "not a regular file"
		if err != nil {
			why = err.Error()
		}
		return invalid("config.image.image %q is a path, taken as a checkpoint archive to restore from: %s", path, why)
	}
	return m.restoreChecks(cfg, sb)
}

// restoreChecks refuses a restore this pod cannot have.
func (m *Manager) restoreChecks(cfg *runtimeapi.ContainerConfig, sb *sandbox.Sandbox) error {
	path := cfg.GetImage().GetImage()
	if m.opts.RestoreDir == "" {
		return fmt.Errorf("config.image.image %q: this daemon restores no checkpoints (no restore directory): %w", path, errdefs.ErrFailedPrecondition)
	}
	ck, ok := sb.KindRuntime().(kind.Checkpointer)
	if !ok {
		return fmt.Errorf("config.image.image %q: handler %q (%s) cannot restore containers from checkpoints: %w", path, sb.Handler, sb.KindRuntime().Type(), errdefs.ErrFailedPrecondition)
	}
	if err := ck.Restorable(); err != nil {
		return err
	}
	if cfg.GetTty() {
		return fmt.Errorf("config.tty: a container with a terminal cannot be restored from checkpoint %q: %w", path, errdefs.ErrFailedPrecondition)
	}
	if sb.IDMappings != nil {
		return fmt.Errorf("config.image.image %q: pod %s has a user namespace (hostUsers: false), and restoring a checkpoint into one is not supported: %w", path, sb.ID, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// restoreSource is an unpacked checkpoint archive.
type restoreSource struct {
	dir     string
	config  checkpointConfig
	process *specs.Process // the checkpointed container's, from spec.dump
	deleted []string
}

// unpackCheckpoint unpacks the archive at path into dir, which it makes (root's only):
// regular files and directories under local names, nothing else, so that no entry lands
// outside it. It checks that the archive holds what a restore needs.
func unpackCheckpoint(path, dir string) (*restoreSource, error) {
	if err := extractTar(path, dir); err != nil {
		return nil, err
	}
	return loadCheckpoint(dir)
}

// copyCheckpoint copies a checkpoint image's files (its rootfs) into dir, which it makes
// (root's only): regular files and directories, a symlink or device being an error.
func copyCheckpoint(rootfs, dir string) (*restoreSource, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.CopyFS(dir, os.DirFS(rootfs)); err != nil {
		return nil, err
	}
	return loadCheckpoint(dir)
}

// extractTar writes the entries of the tar at path into dir, which it makes.
func extractTar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("not a checkpoint archive (an uncompressed tar): %w", err)
		}
		name := filepath.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q leaves the archive", hdr.Name)
		}
		dst := filepath.Join(dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return err
			}
			if err := writeNew(dst, tr); err != nil {
				return fmt.Errorf("entry %q: %w", hdr.Name, err)
			}
		default:
			return fmt.Errorf("entry %q is not a regular file or directory (type %q)", hdr.Name, hdr.Typeflag)
		}
	}
	return nil
}

// writeNew writes r into a new file at path, root's only; an existing one is an error.
func writeNew(path string, r io.Reader) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// loadCheckpoint reads what a restore needs from an unpacked archive in dir.
func loadCheckpoint(dir string) (*restoreSource, error) {
	src := &restoreSource{dir: dir}
	if err := readJSONFile(filepath.Join(dir, configDumpFile), &src.config); err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := readJSONFile(filepath.Join(dir, specDumpFile), &spec); err != nil {
		return nil, err
	}
	src.process = spec.Process
	if _, err := os.Stat(filepath.Join(dir, checkpointDir, "inventory.img")); err != nil {
		return nil, fmt.Errorf("no CRIU image (%s/inventory.img): %w", checkpointDir, err)
	}
	if err := readJSONFile(filepath.Join(dir, deletedFilesFile), &src.deleted); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if src.image() == "" {
		return nil, fmt.Errorf("%s names no image (rootfsImageRef, rootfsImage)", configDumpFile)
	}
	return src, nil
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// restoreFromImage makes a container whose image, just made its rootfs, is a checkpoint
// image a restored one: the checkpoint's files are copied out of that rootfs, which then
// goes, and the rootfs is made again from the image the checkpoint names. It returns the
// checkpoint and the new rootfs and image ID.
func (m *Manager) restoreFromImage(c *Container, sb *sandbox.Sandbox, ckptRootfs string, uids, gids []specs.LinuxIDMapping) (*restoreSource, string, string, error) {
	cfg := c.config
	if err := m.restoreChecks(cfg, sb); err != nil {
		return nil, "", "", err
	}
	c.Restore = filepath.Join(m.opts.RestoreDir, c.ID)
	if err := m.saveMeta(c, nil); err != nil { // so that a cleanup after a crash removes it
		return nil, "", "", err
	}
	src, err := copyCheckpoint(ckptRootfs, c.Restore)
	if err != nil {
		return nil, "", "", fmt.Errorf("config.image.image %q: checkpoint image: %w: %w", cfg.Image.Image, err, errdefs.ErrInvalidArgument)
	}
	if err := m.opts.Images.RemoveRootfs(c.ID); err != nil {
		return nil, "", "", err
	}
	c.ImageRef = src.image()
	rootfs, imageID, err := m.opts.Images.CreateRootfs(sb.Handler, c.ID, c.ImageRef, uids, gids)
	if errors.Is(err, errdefs.ErrNotFound) {
		err = fmt.Errorf("config.image.image %q: the checkpoint's image %s (%s) is not pulled on this node (pull it first): %w", cfg.Image.Image, c.ImageRef, src.config.RootfsImage, err)
	}
	return src, rootfs, imageID, err
}

// image is the image the checkpointed container ran: its ID, else its name.
func (s *restoreSource) image() string {
	if s.config.RootfsImageRef != "" {
		return s.config.RootfsImageRef
	}
	return s.config.RootfsImage
}

// imageSpec is the image as the restored container's status shows it.
func (s *restoreSource) imageSpec() *runtimeapi.ImageSpec {
	return &runtimeapi.ImageSpec{Image: s.image(), UserSpecifiedImage: s.config.RootfsImage}
}

// applyRootfs puts the checkpointed container's changes to its rootfs into rootfs.
func (s *restoreSource) applyRootfs(rootfs string) error {
	f, err := os.Open(filepath.Join(s.dir, rootfsDiffFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return image.ApplyRootfsDiff(rootfs, s.deleted, nil)
	case err != nil:
		return err
	}
	defer f.Close()
	return image.ApplyRootfsDiff(rootfs, s.deleted, f)
}

// applyProcess gives spec the checkpointed process's command, environment and working
// directory: what the restored process is, whatever the request said.
func (s *restoreSource) applyProcess(spec *specs.Spec) {
	if s.process == nil || spec.Process == nil {
		return
	}
	spec.Process.Args = s.process.Args
	spec.Process.Env = s.process.Env
	spec.Process.Cwd = s.process.Cwd
}

// restoreImage is the CRIU image the container is restored from at start, "" for a
// container that is not.
func (c *Container) restoreImage() string {
	if c.Restore == "" {
		return ""
	}
	return filepath.Join(c.Restore, checkpointDir)
}

// writeRootfsDiff adds the container's rootfs changes to a checkpoint archive's content.
func (m *Manager) writeRootfsDiff(c *Container, content string) error {
	rc, deleted, err := m.opts.Images.RootfsDiff(c.ID)
	if err != nil {
		return err
	}
	if rc != nil {
		defer rc.Close()
		if err := writeNew(filepath.Join(content, rootfsDiffFile), rc); err != nil {
			return fmt.Errorf("%s: %w", rootfsDiffFile, err)
		}
	}
	if deleted == nil {
		deleted = []string{}
	}
	b, err := json.Marshal(deleted)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(content, deletedFilesFile), b, 0o600)
}
