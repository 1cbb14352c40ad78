package container

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/store"
)

// noCheckpoint is a kind without kind.Checkpointer (as shim v2).
type noCheckpoint struct{ kind.Runtime }

func (noCheckpoint) Type() string { return kind.ShimV2 }

// fakeCRIU checkpoints as runc does: an image in imageDir, CRIU's log in workDir.
type fakeCRIU struct {
	kind.Runtime
	err    error
	during func(imageDir string) // runs while it dumps
	frozen *bool                 // set by Freeze
}

func (fakeCRIU) Restorable() error { return nil }

func (f fakeCRIU) Freeze(_ context.Context, _ kind.Task, frozen bool) error {
	if f.frozen != nil {
		*f.frozen = frozen
	}
	return nil
}

// diffImages gives a container's rootfs changes as a fixed layer tar and deleted paths.
type diffImages struct {
	Images
	diff    []byte
	deleted []string
	read    func() // called as the diff is read
}

func (d diffImages) RootfsDiff(string, int64) (io.ReadCloser, []string, error) {
	if d.read != nil {
		d.read()
	}
	return io.NopCloser(bytes.NewReader(d.diff)), d.deleted, nil
}

func (f fakeCRIU) Checkpoint(ctx context.Context, t kind.Task, imageDir, workDir string) error {
	if f.during != nil {
		f.during(imageDir)
	}
	if err := os.WriteFile(filepath.Join(workDir, "dump.log"), []byte("(00.1) Dumping finished successfully\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(imageDir, "inventory.img"), []byte("img of "+t.ID), 0o600); err != nil {
		return err
	}
	return f.err
}

// A checkpoint is a tar of CRIU's image, config.dump, spec.dump and dump.log at the
// location; a failed one leaves nothing there or beside it.
func TestCheckpointArchive(t *testing.T) {
	bundle := t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"process":{"args":["sleep","1000"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// As kubelet sends it: the image's ID, and the pod spec's name beside it.
	c := &Container{Metadata: Metadata{ID: "c1", Name: "sleeper", Handler: "runc", Dir: bundle, ImageRef: "sha256:abc", ImageID: "sha256:abc", ImageName: "busybox:1"},
		config: &runtimeapi.ContainerConfig{Image: &runtimeapi.ImageSpec{Image: "sha256:abc", UserSpecifiedImage: "busybox:1"}},
		status: store.NewTracked(Status{State: StateRunning})}
	frozen, frozenWhileRead := false, false
	c.rt = fakeCRIU{frozen: &frozen}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	_ = tw.WriteHeader(&tar.Header{Name: "written", Mode: 0o644, Size: 4, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("kept"))
	_ = tw.Close()
	images := diffImages{diff: layer.Bytes(), deleted: []string{"/etc/group"}, read: func() { frozenWhileRead = frozen }}
	m := &Manager{index: indexOf(c), opts: Options{CheckpointDir: t.TempDir(), Images: images}}
	out := t.TempDir()
	loc := filepath.Join(out, "c1.tar")
	if err := m.Checkpoint(context.Background(), "c1", loc, 0); err != nil {
		t.Fatal(err)
	}
	if !frozenWhileRead || frozen {
		t.Errorf("the rootfs changes were read with the container frozen: %v; it is frozen after: %v; want read frozen, then thawed", frozenWhileRead, frozen)
	}
	f, err := os.Open(loc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[hdr.Name] = string(b)
	}
	if got["checkpoint/inventory.img"] != "img of c1" || !strings.Contains(got["spec.dump"], "sleep") ||
		!strings.Contains(got["config.dump"], `"id":"c1"`) || !strings.Contains(got["config.dump"], `"rootfsImageRef":"sha256:abc"`) ||
		!strings.Contains(got["config.dump"], `"rootfsImage":"busybox:1"`) || !strings.Contains(got["config.dump"], `"rootfsImageName":"busybox:1"`) ||
		!strings.Contains(got["dump.log"], "finished") || got["deleted.files"] != `["/etc/group"]` ||
		got["rootfs-diff.tar"] != layer.String() {
		t.Errorf("archive entries: %v", got)
	}
	// What a restore reads of it.
	src, err := unpackCheckpoint(loc, filepath.Join(t.TempDir(), "unpacked"), 0, nil)
	if err != nil {
		t.Fatalf("unpack the archive: %v", err)
	}
	if src.image() != "sha256:abc" || src.imageSpec().UserSpecifiedImage != "busybox:1" || strings.Join(src.process.Args, " ") != "sleep 1000" ||
		strings.Join(src.deleted, ",") != "/etc/group" {
		t.Errorf("unpacked: image %q (%q), process %v, deleted %v", src.image(), src.imageSpec().UserSpecifiedImage, src.process.Args, src.deleted)
	}
	rootfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "group"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := src.applyRootfs(rootfs); err != nil {
		t.Fatalf("apply the rootfs changes: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(rootfs, "written")); err != nil || string(b) != "kept" {
		t.Errorf("written after the apply: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "etc", "group")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/etc/group after the apply: %v, want gone", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("beside the archive: %v", entries)
	}
	if err := m.Checkpoint(context.Background(), "c1", loc, 0); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("over an existing archive: %v", err)
	}

	c.rt = fakeCRIU{err: fmt.Errorf("CRIU failed: %w", errdefs.ErrFailedPrecondition)}
	loc = filepath.Join(out, "failed.tar")
	if err := m.Checkpoint(context.Background(), "c1", loc, 0); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("failed checkpoint: %v", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("a failed checkpoint left files: %v", entries)
	}
}

func TestCheckpointRefusals(t *testing.T) {
	dir := t.TempDir()
	m := &Manager{index: indexOf(
		&Container{Metadata: Metadata{ID: "exited1", Handler: "runc"}, status: store.NewTracked(Status{State: StateExited})},
		&Container{Metadata: Metadata{ID: "shim1", Handler: "runc-shim"}, status: store.NewTracked(Status{State: StateRunning}), rt: noCheckpoint{}},
	)}
	loc := filepath.Join(dir, "c.tar")
	for _, tc := range []struct {
		id, location string
		kind         error
		says         []string
	}{
		{"", loc, errdefs.ErrInvalidArgument, []string{"container_id"}},
		{"exited1", "", errdefs.ErrInvalidArgument, []string{"location"}},
		{"exited1", "c.tar", errdefs.ErrInvalidArgument, []string{"location", `"c.tar"`}},
		{"nosuch", loc, errdefs.ErrNotFound, []string{`"nosuch"`}},
		{"exited1", loc, errdefs.ErrFailedPrecondition, []string{"exited1", "exited"}},
		{"shim1", loc, errdefs.ErrNotImplemented, []string{`handler "runc-shim"`, kind.ShimV2}},
		{"shim1", filepath.Join(dir, "no", "c.tar"), errdefs.ErrNotImplemented, nil}, // the kind is asked first
	} {
		err := m.Checkpoint(context.Background(), tc.id, tc.location, 0)
		if !errors.Is(err, tc.kind) {
			t.Errorf("Checkpoint(%q, %q) = %v, want %v", tc.id, tc.location, err, tc.kind)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Checkpoint(%q, %q) = %v: does not say %s", tc.id, tc.location, err, s)
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refusals left %d files, e.g. %s", len(entries), entries[0].Name())
	}
}

func TestWriteTar(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"checkpoint/pages-1.img": "pages", "config.dump": `{"id":"x"}`, "spec.dump": "{}"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "a.tar")
	dirFD, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirFD)
	if err := publishTar(dirFD, out, root); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("beside the archive: %v", entries)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("archive mode: %v %v", fi.Mode(), err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[hdr.Name] = string(b)
	}
	if _, ok := got["checkpoint/"]; !ok || len(got) != len(files)+1 {
		t.Errorf("entries %v", got)
	}
	for name, body := range files {
		if got[name] != body {
			t.Errorf("%s: %q, want %q", name, got[name], body)
		}
	}
}

// A user who can write location's parent swaps location's directory for a symlink while
// CRIU dumps: root's writes still go to the directory the call named (through its
// descriptor), never through the symlink, and nothing of the dump was ever in that
// directory (today's code made its image beside location and linked the archive in by path).
func TestCheckpointSwappedDirectory(t *testing.T) {
	bundle := t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	parent, elsewhere := t.TempDir(), t.TempDir()
	dir := filepath.Join(parent, "ck")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(parent, "moved")
	var imageIn string
	swap := func(imageDir string) {
		imageIn = imageDir
		if err := os.Rename(dir, moved); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(elsewhere, dir); err != nil {
			t.Error(err)
		}
	}
	c := &Container{Metadata: Metadata{ID: "c1", Name: "n", Handler: "runc", Dir: bundle},
		config: &runtimeapi.ContainerConfig{}, status: store.NewTracked(Status{State: StateRunning}), rt: fakeCRIU{during: swap}}
	ckDir := t.TempDir()
	m := &Manager{index: indexOf(c), opts: Options{CheckpointDir: ckDir, Images: diffImages{}}}
	if err := m.Checkpoint(context.Background(), "c1", filepath.Join(dir, "c1.tar"), 0); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(imageIn, ckDir+"/") {
		t.Errorf("CRIU's image was made in %s, not in the daemon's checkpoint dir %s", imageIn, ckDir)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("written through the swapped-in symlink: %v", entries)
	}
	if entries, _ := os.ReadDir(moved); len(entries) != 1 || entries[0].Name() != "c1.tar" {
		t.Errorf("the named directory holds %v, want the archive alone", entries)
	}
	if entries, _ := os.ReadDir(ckDir); len(entries) != 0 {
		t.Errorf("the work dir was left: %v", entries)
	}
}

// An archive to restore from is unpacked only as files and directories under their own
// names, and must hold what a restore needs.
func TestUnpackCheckpointRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		says    string
	}{
		{"leaves", []tar.Header{{Name: "../x", Typeflag: tar.TypeReg}}, "leaves the archive"},
		{"absolute", []tar.Header{{Name: "/etc/x", Typeflag: tar.TypeReg}}, "leaves the archive"},
		{"symlink", []tar.Header{{Name: "checkpoint", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}, "not a regular file or directory"},
		{"no config", []tar.Header{{Name: "checkpoint/", Typeflag: tar.TypeDir}}, "config.dump"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "a.tar")
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			for _, h := range tc.entries {
				h.Mode = 0o644
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			_ = tw.Close()
			if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := unpackCheckpoint(path, filepath.Join(dir, "out"), 0, nil)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("unpack: %v, want an error saying %q", err, tc.says)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "x")); err == nil {
				t.Errorf("an entry was written outside")
			}
		})
	}
}

// A sparse entry counts its holes against the bound: a few bytes of archive cannot
// become a full disk.
func TestUnpackCheckpointBounded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.tar")
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	// An entry of 1 TiB whose data never comes: as a sparse one, its header says what
	// unpacking it would write.
	if err := tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 1 << 40, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	_ = tw.Flush()
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := unpackCheckpoint(path, filepath.Join(dir, "out"), 1<<20, nil)
	if err == nil || !strings.Contains(err.Error(), "checkpoints.max_size") {
		t.Errorf("unpack: %v, want the bound named", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "out", "big")); err == nil {
		t.Errorf("big was written (%d bytes)", fi.Size())
	}
}

// A checkpoint image's files are copied only as regular files and directories, within
// the bound, and read without following a link: each hostile form is refused by name, and
// nothing outside is read (security review R3, R4).
func TestCopyCheckpointRefuses(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "host.tar")
	if err := os.WriteFile(secret, []byte("HOST-DATA"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := func(t *testing.T, root string) {
		t.Helper()
		for name, data := range map[string]string{
			configDumpFile: `{"rootfsImageRef":"sha256:` + strings.Repeat("a", 64) + `"}`,
			specDumpFile:   `{"process":{"args":["sh"]}}`,
		} {
			if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(root, checkpointDir), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, checkpointDir, "inventory.img"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		make func(t *testing.T, root string)
		max  int64
		says string
	}{
		{"as it should be", func(*testing.T, string) {}, 0, ""},
		{"a link to a host tar", func(t *testing.T, root string) {
			if err := os.Symlink(secret, filepath.Join(root, rootfsDiffFile)); err != nil {
				t.Fatal(err)
			}
		}, 0, rootfsDiffFile},
		{"a link to /dev/ptmx", func(t *testing.T, root string) {
			os.Remove(filepath.Join(root, specDumpFile))
			if err := os.Symlink("/dev/ptmx", filepath.Join(root, specDumpFile)); err != nil {
				t.Fatal(err)
			}
		}, 0, specDumpFile},
		{"a FIFO", func(t *testing.T, root string) {
			if err := unix.Mkfifo(filepath.Join(root, rootfsDiffFile), 0o600); err != nil {
				t.Fatal(err)
			}
		}, 0, rootfsDiffFile},
		{"a sparse file past the bound", func(t *testing.T, root string) {
			f, err := os.Create(filepath.Join(root, "pages-1.img"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(1 << 40); err != nil {
				t.Fatal(err)
			}
		}, 1 << 30, "checkpoints.max_size"},
		{"a huge config.dump", func(t *testing.T, root string) {
			if err := os.Truncate(filepath.Join(root, configDumpFile), maxCheckpointJSON+1); err != nil {
				t.Fatal(err)
			}
		}, 0, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, dir := t.TempDir(), filepath.Join(t.TempDir(), "out")
			good(t, root)
			tc.make(t, root)
			_, err := copyCheckpoint(root, dir, tc.max, nil)
			switch {
			case tc.says == "" && err != nil:
				t.Fatalf("copy: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("copy: %v, want an error naming %q", err, tc.says)
			}
			var du int64
			_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					if strings.Contains(string(b), "HOST-DATA") {
						t.Errorf("%s holds the host file", p)
					}
					var st unix.Stat_t
					_ = unix.Stat(p, &st)
					du += st.Blocks * 512
				}
				return nil
			})
			if tc.max > 0 && du > 1<<20 {
				t.Errorf("the copy takes %d bytes of disk", du)
			}
		})
	}
}

// A restored process tree is checked for no_new_privs, which CRIU does not record: a
// child without it fails the check, a tree with it passes.
func TestCheckNoNewPrivs(t *testing.T) {
	start := func(args ...string) int {
		cmd := exec.Command(args[0], args[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	with := start("setpriv", "--no-new-privs", "sh", "-c", "sleep 30 & wait")
	without := start("sh", "-c", "sleep 30 & wait")
	time.Sleep(200 * time.Millisecond) // the children forked
	if err := checkNoNewPrivs(with); err != nil {
		t.Errorf("a tree under no_new_privs: %v", err)
	}
	if err := checkNoNewPrivs(without); err == nil || !strings.Contains(err.Error(), "without no_new_privs") {
		t.Errorf("a tree without no_new_privs: %v, want it refused", err)
	}
}

// A checkpoint restores into a container only as isolated as the checkpointed one was:
// CRIU gives back its mounts' flags and namespaces over the new sources (second re-read
// S1, S2).
func TestRestoreCheckSpec(t *testing.T) {
	base := func() *specs.Spec {
		return &specs.Spec{
			Root:   &specs.Root{Path: "rootfs"},
			Mounts: []specs.Mount{{Destination: "/proc", Type: "proc"}, {Destination: "/data", Type: "bind", Options: []string{"rbind", "rw"}}},
			Linux: &specs.Linux{
				Namespaces:    []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace, Path: "/run/netns/x"}, {Type: specs.MountNamespace}},
				ReadonlyPaths: []string{"/proc/sys"}, MaskedPaths: []string{"/proc/kcore"},
			},
		}
	}
	for _, tc := range []struct {
		name      string
		old, next func(*specs.Spec)
		says      string
	}{
		{"the same", nil, nil, ""},
		{"a volume read-only now", nil, func(s *specs.Spec) { s.Mounts[1].Options = []string{"rbind", "ro"} }, "mount /data is ro"},
		{"a volume rro now", nil, func(s *specs.Spec) { s.Mounts[1].Options = []string{"rbind", "rro"} }, "mount /data is ro"},
		{"ro then rw before", func(s *specs.Spec) { s.Mounts[1].Options = []string{"rbind", "ro", "rw"} }, func(s *specs.Spec) { s.Mounts[1].Options = []string{"rbind", "ro"} }, "mount /data is ro"},
		{"read-only both times", func(s *specs.Spec) { s.Mounts[1].Options = []string{"rbind", "rw", "ro"} }, func(s *specs.Spec) { s.Mounts[1].Options = []string{"rbind", "ro"} }, ""},
		{"the root read-only now", nil, func(s *specs.Spec) { s.Root.Readonly = true }, "root filesystem is read-only"},
		{"from the node's network", func(s *specs.Spec) {
			s.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}}
		}, nil, "node's network namespace"},
		{"a mount the container lacks", func(s *specs.Spec) { s.Mounts = append(s.Mounts, specs.Mount{Destination: "/host", Type: "bind"}) }, nil, "mount at /host"},
		{"unmasked before", func(s *specs.Spec) { s.Linux.MaskedPaths = nil }, nil, "/proc/kcore is masked"},
		{"fewer mounts now", nil, func(s *specs.Spec) { s.Mounts = append(s.Mounts, specs.Mount{Destination: "/new", Type: "bind"}) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, next := base(), base()
			if tc.old != nil {
				tc.old(old)
			}
			if tc.next != nil {
				tc.next(next)
			}
			err := (&restoreSource{spec: old}).checkSpec(next)
			switch {
			case tc.says == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Errorf("got %v, want a refusal naming %q", err, tc.says)
			}
		})
	}
}
