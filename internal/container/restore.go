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
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/ckptsign"
	"github.com/rtshimd/rtshimd/internal/criuimg"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/fsafe/regfile"
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
	if err := m.rowAllows(sb.Handler, true); err != nil {
		return fmt.Errorf("config.image.image %q names a checkpoint: %w", path, err)
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

// verifySignature is nil where the checkpoint unpacked in dir (the daemon's own copy) was
// signed by this node or a trusted key, each of its files as signed (ckptsign), or where
// the node restores unsigned checkpoints (checkpoints.require_signature = false).
func (m *Manager) verifySignature(dir string) error {
	if !m.opts.RequireSignature {
		return nil
	}
	key, err := ckptsign.Verify(dir, m.opts.TrustedKeys)
	if err != nil {
		return fmt.Errorf("%w: only checkpoints signed by this node or a key in checkpoints.trusted_keys are restored (checkpoints.require_signature)", err)
	}
	logrus.WithField("key", key).Debug("checkpoint signature verified")
	return nil
}

// rowAllows is nil where handler's row, as served now, takes checkpoints (restore false)
// or restores (restore true), else FailedPrecondition naming the key that turned it off.
func (m *Manager) rowAllows(handler string, restore bool) error {
	if m.opts.Rows == nil {
		return nil
	}
	h, err := m.opts.Rows.Lookup(handler)
	if err != nil {
		return fmt.Errorf("handler %q is no longer in the handler table: %w", handler, errdefs.ErrFailedPrecondition)
	}
	what, on, key := "checkpoints", h.Config.CheckpointOn, h.Config.CheckpointKey
	if restore {
		what, on, key = "restores from checkpoints", h.Config.RestoreOn, h.Config.RestoreKey
	}
	if on {
		return nil
	}
	return fmt.Errorf("handler %q takes no %s (%s = false; turn it on only for checkpoints whose origin you trust): %w", handler, what, key, errdefs.ErrFailedPrecondition)
}

// restoreSource is an unpacked checkpoint archive.
type restoreSource struct {
	dir     string
	config  checkpointConfig
	process *specs.Process // the checkpointed container's, from spec.dump
	spec    *specs.Spec    // the checkpointed container's spec (spec.dump)
	deleted []string
}

// A checkpoint is untrusted input (a pod names a checkpoint image as it names any
// image): what a restore reads of it is bounded, only regular files and directories are
// ever made or opened, and no link is followed. These bound what is read whole.
const (
	maxCheckpointJSON = 16 << 20 // config.dump, spec.dump, deleted.files
	maxDeletedFiles   = 1 << 17  // entries of deleted.files
)

// errTooLarge is a checkpoint over the node's checkpoints.max_size.
func errTooLarge(max int64) error {
	return fmt.Errorf("the checkpoint holds more than checkpoints.max_size (%d bytes, counted without holes)", max)
}

// unpackCheckpoint unpacks the archive at path into dir, which it makes (root's only):
// regular files and directories under local names, nothing else, so that no entry lands
// outside it, at most max bytes in all (0: no bound). It checks that the archive holds
// what a restore needs.
func unpackCheckpoint(path, dir string, max int64, verify func(dir string) error) (*restoreSource, error) {
	if err := extractTar(path, dir, max); err != nil {
		return nil, err
	}
	return loadCheckpoint(dir, verify)
}

// copyCheckpoint copies a checkpoint image's files (its rootfs) into dir, which it makes
// (root's only): regular files and directories, at most max bytes in all (0: no bound);
// anything else (a symlink, a device, a FIFO) is an error naming it, found before
// anything is copied. Files are opened without following a link and checked to be what
// the walk saw.
func copyCheckpoint(rootfs, dir string, max int64, verify func(dir string) error) (*restoreSource, error) {
	var total int64
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is a %v, not a regular file or directory", relName(rootfs, p), d.Type())
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if total += fi.Size(); max > 0 && total > max {
			return errTooLarge(max)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == rootfs {
			return err
		}
		dst := filepath.Join(dir, relName(rootfs, p))
		if d.IsDir() {
			return os.Mkdir(dst, 0o700)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is a %v, not a regular file or directory", relName(rootfs, p), d.Type())
		}
		src, err := regfile.OpenNoFollow(p)
		if err != nil {
			return err
		}
		defer src.Close()
		fi, err := src.Stat()
		if err != nil {
			return err
		}
		if total -= fi.Size(); total < 0 {
			return errTooLarge(max) // it grew since the count
		}
		return writeNew(dst, io.LimitReader(src, fi.Size()))
	})
	if err != nil {
		return nil, err
	}
	return loadCheckpoint(dir, verify)
}

// apparentSize is the size of the regular files under dir, holes counted.
func apparentSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

func relName(root, p string) string {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return rel
}

// extractTar writes the entries of the tar at path into dir, which it makes, at most max
// bytes of files in all (0: no bound; a sparse entry counts its holes).
func extractTar(path, dir string, max int64) error {
	f, err := regfile.OpenNoFollow(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	var total int64
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
			if total += hdr.Size; max > 0 && total > max {
				return errTooLarge(max)
			}
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
func loadCheckpoint(dir string, verify func(dir string) error) (*restoreSource, error) {
	if verify != nil {
		if err := verify(dir); err != nil {
			return nil, err
		}
	}
	src := &restoreSource{dir: dir}
	if err := readJSONFile(filepath.Join(dir, configDumpFile), &src.config); err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := readJSONFile(filepath.Join(dir, specDumpFile), &spec); err != nil {
		return nil, err
	}
	src.process, src.spec = spec.Process, &spec
	if fi, err := os.Lstat(filepath.Join(dir, checkpointDir, "inventory.img")); err != nil || !fi.Mode().IsRegular() {
		if err == nil {
			err = errors.New("not a regular file")
		}
		return nil, fmt.Errorf("no CRIU image (%s/inventory.img): %w", checkpointDir, err)
	}
	if err := readJSONFile(filepath.Join(dir, deletedFilesFile), &src.deleted); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if len(src.deleted) > maxDeletedFiles {
		return nil, fmt.Errorf("%s lists %d paths, more than %d", deletedFilesFile, len(src.deleted), maxDeletedFiles)
	}
	if src.image() == "" {
		return nil, fmt.Errorf("%s names no image (rootfsImageRef, rootfsImage)", configDumpFile)
	}
	return src, nil
}

// readJSONFile decodes the regular file at path (never through a link), of at most
// maxCheckpointJSON bytes, into v.
func readJSONFile(path string, v any) error {
	b, err := regfile.ReadNoFollow(path, maxCheckpointJSON)
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
func (m *Manager) restoreFromImage(ctx context.Context, c *Container, sb *sandbox.Sandbox, ckptRootfs string, uids, gids []specs.LinuxIDMapping) (*restoreSource, string, string, error) {
	cfg := c.config
	if err := m.restoreChecks(cfg, sb); err != nil {
		return nil, "", "", err
	}
	c.Restore = filepath.Join(m.opts.RestoreDir, c.ID)
	if err := m.saveMeta(c, nil); err != nil { // so that a cleanup after a crash removes it
		return nil, "", "", err
	}
	src, err := copyCheckpoint(ckptRootfs, c.Restore, m.opts.MaxCheckpointSize, m.verifySignature)
	if err != nil {
		return nil, "", "", fmt.Errorf("config.image.image %q: checkpoint image: %w: %w", cfg.Image.Image, err, errdefs.ErrInvalidArgument)
	}
	if err := m.opts.Images.RemoveRootfs(c.ID); err != nil {
		return nil, "", "", err
	}
	if c.ImageRef, err = m.pullBase(ctx, sb, src); err != nil {
		return nil, "", "", fmt.Errorf("config.image.image %q: %w", cfg.Image.Image, err)
	}
	rootfs, imageID, err := m.opts.Images.CreateRootfs(sb.Handler, c.ID, c.ImageRef, uids, gids)
	return src, rootfs, imageID, err
}

// pullBase pulls the image a checkpoint image's checkpoint was taken on, as a pod of sb's
// namespace pulls any image: by its reference, under the namespace's signature policy,
// with no credentials (kubelet checked the pod's only for the checkpoint image), and
// returns its ID, which must be the one the checkpoint names. The node's copy is not
// taken as it is: another namespace may have pulled it with credentials this pod lacks,
// or under a policy this one refuses (security review R6).
func (m *Manager) pullBase(ctx context.Context, sb *sandbox.Sandbox, src *restoreSource) (string, error) {
	ref := src.config.RootfsImageName
	if ref == "" {
		ref = src.config.RootfsImage
	}
	if ref == "" || looksLikeID(ref) {
		return "", fmt.Errorf("the checkpoint names its image only by ID (%s rootfsImage %q, rootfsImageName %q), which a restore from a checkpoint image does not take: it pulls the image by reference: %w", configDumpFile, src.config.RootfsImage, src.config.RootfsImageName, errdefs.ErrInvalidArgument)
	}
	ns := sb.PodConfig().GetMetadata().GetNamespace()
	// The pull goes on detached from any one caller (a retry joins it); the create waits
	// for it no longer than its request's deadline.
	type pulled struct {
		id  string
		err error
	}
	ch := make(chan pulled, 1)
	go func() {
		id, err := m.opts.Images.Pull(ctx, sb.Handler, ref, image.Auth{}, ns)
		ch <- pulled{id, err}
	}()
	var id string
	var err error
	select {
	case r := <-ch:
		id, err = r.id, r.err
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return "", fmt.Errorf("the checkpoint's image %s, pulled as namespace %q pulls it (its signature policy, no credentials): %w", ref, ns, err)
	}
	if want := src.config.RootfsImageRef; want != "" && strings.TrimPrefix(want, "sha256:") != strings.TrimPrefix(id, "sha256:") {
		return "", fmt.Errorf("the checkpoint was taken on image %s, and %s is now %s: %w", want, ref, id, errdefs.ErrFailedPrecondition)
	}
	// The container's status names what was pulled, not what config.dump claims.
	src.config.RootfsImage, src.config.RootfsImageRef = ref, id
	return id, nil
}

// looksLikeID reports whether ref is an image ID or a prefix of one rather than a
// reference a registry serves.
func looksLikeID(ref string) bool {
	s := strings.TrimPrefix(ref, "sha256:")
	if len(s) < 12 || len(s) > 64 {
		return strings.HasPrefix(ref, "sha256:")
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
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
	f, err := regfile.OpenNoFollow(filepath.Join(s.dir, rootfsDiffFile))
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

// checkProcesses refuses a checkpoint whose processes, as its CRIU image records them,
// would hold more than spec grants the container (criuimg.Check): CRIU restores their
// credentials, capabilities and seccomp state from the image, not from the spec.
func (s *restoreSource) checkProcesses(spec *specs.Spec) error {
	tasks, err := criuimg.Read(filepath.Join(s.dir, checkpointDir))
	if err != nil {
		return fmt.Errorf("checkpoint: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if err := criuimg.Check(tasks, spec); err != nil {
		return fmt.Errorf("checkpoint refused: %w, which the container's security context does not grant: %w", err, errdefs.ErrInvalidArgument)
	}
	if err := s.checkSpec(spec); err != nil {
		return fmt.Errorf("checkpoint refused: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// checkSpec refuses a checkpoint whose container ran with less isolation than spec
// gives: CRIU restores the checkpointed mounts' flags and joins the namespaces the
// checkpointed processes had, over the new container's sources (a read-only volume or
// root would come back writable, a pod restored into the node's network namespace;
// second re-read S1, S2). The signed spec.dump says what that container had.
func (s *restoreSource) checkSpec(spec *specs.Spec) error {
	old := s.spec
	if old == nil || old.Linux == nil || spec.Linux == nil {
		return fmt.Errorf("%s holds no Linux spec", specDumpFile)
	}
	nsTypes := func(sp *specs.Spec) map[specs.LinuxNamespaceType]bool {
		m := map[specs.LinuxNamespaceType]bool{}
		for _, ns := range sp.Linux.Namespaces {
			m[ns.Type] = true
		}
		return m
	}
	had, has := nsTypes(old), nsTypes(spec)
	for _, ns := range spec.Linux.Namespaces {
		if !had[ns.Type] {
			return fmt.Errorf("the checkpointed container ran in the node's %s namespace, and the container has one of its own", ns.Type)
		}
	}
	if had[specs.UserNamespace] != has[specs.UserNamespace] {
		return fmt.Errorf("the checkpointed container's user namespace differs from the container's")
	}
	if spec.Root != nil && spec.Root.Readonly && (old.Root == nil || !old.Root.Readonly) {
		return fmt.Errorf("the container's root filesystem is read-only, the checkpointed container's was not")
	}
	for _, p := range spec.Linux.ReadonlyPaths {
		if !slices.Contains(old.Linux.ReadonlyPaths, p) {
			return fmt.Errorf("%s is read-only in the container, not in the checkpointed one", p)
		}
	}
	for _, p := range spec.Linux.MaskedPaths {
		if !slices.Contains(old.Linux.MaskedPaths, p) {
			return fmt.Errorf("%s is masked in the container, not in the checkpointed one", p)
		}
	}
	oldMounts := map[string]specs.Mount{}
	for _, m := range old.Mounts {
		oldMounts[filepath.Clean(m.Destination)] = m
	}
	newMounts := map[string]bool{}
	for _, m := range spec.Mounts {
		dst := filepath.Clean(m.Destination)
		newMounts[dst] = true
		o, ok := oldMounts[dst]
		if !ok {
			continue // the restored tree lacks it: less, not more
		}
		for _, opt := range []string{"ro", "nosuid", "nodev", "noexec"} {
			if mountHas(m, opt) && !mountHas(o, opt) {
				return fmt.Errorf("mount %s is %s in the container, not in the checkpointed one (CRIU restores its flags)", dst, opt)
			}
		}
	}
	for dst, o := range oldMounts {
		if !newMounts[dst] {
			return fmt.Errorf("the checkpointed container had a %s mount at %s, which the container lacks", o.Type, dst)
		}
	}
	return nil
}

// mountHas reports whether opt holds for m as mount(8) reads its options: the last of
// opt and its opposite wins ("ro" and "rw", "nosuid" and "suid", ...); "rro" counts as
// "ro" (third read T1).
func mountHas(m specs.Mount, opt string) bool {
	opposite := map[string]string{"ro": "rw", "nosuid": "suid", "nodev": "dev", "noexec": "exec"}[opt]
	on := false
	for _, o := range m.Options {
		switch {
		case o == opt || opt == "ro" && o == "rro":
			on = true
		case o == opposite || o == "defaults":
			on = false
		}
	}
	return on
}

// checkNoNewPrivs is nil where the process pid and every process below it run with
// no_new_privs. CRIU records no such state: a restore of a spec that sets it is checked
// here, before the start is answered, and killed otherwise.
func checkNoNewPrivs(pid int) error {
	seen := 0
	var walk func(pid int) error
	walk = func(pid int) error {
		if seen++; seen > 1<<16 {
			// Unchecked is not passed (second re-read S6).
			return fmt.Errorf("restored processes: more than %d to check for no_new_privs: %w", 1<<16, errdefs.ErrInvalidArgument)
		}
		// no_new_privs is a thread's: each thread of the process is read.
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
			if err != nil {
				continue // gone meanwhile
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "NoNewPrivs:"); ok && strings.TrimSpace(v) != "1" {
					return fmt.Errorf("restored thread %s of process %d runs without no_new_privs, which the container's spec sets: %w", t.Name(), pid, errdefs.ErrInvalidArgument)
				}
			}
		}
		for _, t := range tasks {
			kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
			for _, k := range strings.Fields(string(kids)) {
				if n, err := strconv.Atoi(k); err == nil {
					if err := walk(n); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	return walk(pid)
}

// restoreLSM is spec's LSM profile as runc's restore takes it (TYPE:NAME), "" for none.
func restoreLSM(spec *specs.Spec) string {
	switch p := spec.Process; {
	case p == nil:
		return ""
	case p.ApparmorProfile != "":
		return "apparmor:" + p.ApparmorProfile
	case p.SelinuxLabel != "":
		return "selinux:" + p.SelinuxLabel
	}
	return ""
}

// restoreImage is the CRIU image the container is restored from at start, "" for a
// container that is not.
func (c *Container) restoreImage() string {
	if c.Restore == "" {
		return ""
	}
	return filepath.Join(c.Restore, checkpointDir)
}

// whileFrozen runs f with the container's processes frozen (the runtime's pause), and
// resumes them whatever happens: its checkpoint is taken then, and its rootfs changes read,
// so that a container cannot change its files while root reads them (a directory swapped
// for a link to a host tree, a file for a device node: security review R2; the image side
// reads them chrooted into the writable layer too).
func (m *Manager) whileFrozen(ctx context.Context, c *Container, ck kind.Checkpointer, f func() error) (err error) {
	thaw := func() error {
		// Also past the request's deadline.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kind.DefaultTimeout)
		defer cancel()
		return ck.Freeze(tctx, c.Task(), false)
	}
	if err := ck.Freeze(ctx, c.Task(), true); err != nil {
		// A pause cut short may have frozen it all the same.
		if terr := thaw(); terr != nil {
			logrus.WithError(terr).WithField("container", c.ID).Error("resume a container whose freeze failed")
		}
		return fmt.Errorf("checkpoint container %s: freeze it: %w", c.ID, err)
	}
	defer func() {
		// Thawed whatever happened.
		if terr := thaw(); terr != nil {
			logrus.WithError(terr).WithField("container", c.ID).Error("resume a container frozen for its checkpoint")
			if err == nil {
				err = fmt.Errorf("checkpoint container %s: resume it: %w", c.ID, terr)
			}
		}
	}()
	return f()
}

// writeRootfsDiff adds the container's rootfs changes to a checkpoint archive's content:
// within checkpoints.max_size, with what CRIU wrote, counted without holes.
func (m *Manager) writeRootfsDiff(c *Container, content string) error {
	max := int64(0)
	if m.opts.MaxCheckpointSize > 0 {
		used, err := apparentSize(content)
		if err != nil {
			return err
		}
		if max = m.opts.MaxCheckpointSize - used; max <= 0 {
			return errTooLarge(m.opts.MaxCheckpointSize)
		}
	}
	rc, deleted, err := m.opts.Images.RootfsDiff(c.ID, max)
	if err != nil {
		return err
	}
	if rc != nil {
		defer rc.Close()
		var r io.Reader = rc
		if max > 0 {
			r = io.LimitReader(rc, max+1)
		}
		path := filepath.Join(content, rootfsDiffFile)
		if err := writeNew(path, r); err != nil {
			return fmt.Errorf("%s: %w", rootfsDiffFile, err)
		}
		if fi, err := os.Stat(path); err == nil && max > 0 && fi.Size() > max {
			return errTooLarge(m.opts.MaxCheckpointSize)
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
