package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/store"
)

// mountNSEnv names, in the test binary run again by inPrivateMountNS, the test it runs.
const mountNSEnv = "RTSHIMD_TEST_PRIVATE_MOUNTNS"

// inPrivateMountNS runs the calling test again, alone, in a test binary of its own under
// `unshare --mount --propagation private`, so that what it mounts and unmounts (and what
// a bug would unmount) is never the node's; it reports there whether the test passed.
// It returns true in that binary, where the test's body is to run, and false in the
// first, which is to return. Not root: the test is skipped.
func inPrivateMountNS(t *testing.T) bool {
	t.Helper()
	if os.Getenv(mountNSEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private",
		os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), mountNSEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a private mount namespace: %v\n%s", t.Name(), err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("%s did not pass in a private mount namespace:\n%s", t.Name(), out)
	}
	return false
}

// isMountPoint: path, not followed, has another device than its parent.
func isMountPoint(path string) bool {
	var st, parent unix.Stat_t
	return unix.Lstat(path, &st) == nil && unix.Stat(filepath.Dir(path), &parent) == nil && st.Dev != parent.Dev
}

func mountTmpfs(t *testing.T, path string, flags uintptr, data string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", path, "tmpfs", flags, data); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) == nil {
		}
	})
}

// noRuntimes is a handler table whose runtimes run nothing and have no row to look up.
type noRuntimes struct{}

func (noRuntimes) Lookup(name string) (*handlers.Handler, error) {
	return nil, fmt.Errorf("no runtime handler %q: %w", name, errdefs.ErrNotFound)
}
func (noRuntimes) StopUnrecorded(context.Context, kind.Task) ([]string, error) { return nil, nil }
func (noRuntimes) FindUnrecorded(context.Context, kind.Task) ([]string, error) { return nil, nil }

// Recovery cleans up the run directory of a pod it has no record of (lost, or never
// written), of every layout a release made. In the earliest one the pod's /dev/shm tmpfs
// is mounted at <dir>/shm itself, so <dir>/shm/mnt is a name the pod's containers choose:
// a symlink there to a node mount must not make the daemon unmount the node's mount
// (audit 2026-11-26, N4). A pod of the next layout, its /dev/shm tmpfs at <dir>/shm/mnt,
// still has that unmounted.
func TestOrphanCleanupDoesNotFollowShmSymlink(t *testing.T) {
	if !inPrivateMountNS(t) {
		return
	}
	dir := t.TempDir()
	victim := filepath.Join(dir, "node-mount") // stands for /var/lib/kubelet, /run, …
	mountTmpfs(t, victim, 0, "")
	runDir := filepath.Join(dir, "run", "sandboxes")
	shmFlags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)

	// The earliest layout, and what a container did in its /dev/shm.
	early := filepath.Join(runDir, strings.Repeat("0123456789abcdef", 4))
	shm := filepath.Join(early, sandbox.ShmDir)
	mountTmpfs(t, shm, shmFlags, "mode=1777")
	if err := os.Symlink(victim, filepath.Join(shm, sandbox.ShmMount)); err != nil {
		t.Fatal(err)
	}
	// The next layout: /dev/shm at <dir>/shm/mnt, the files at <dir>/files.
	next := filepath.Join(runDir, strings.Repeat("fedcba9876543210", 4))
	nextShm := filepath.Join(next, sandbox.ShmDir, sandbox.ShmMount)
	mountTmpfs(t, nextShm, shmFlags, "mode=1777")
	nextFiles := filepath.Join(next, sandbox.FilesDir)
	mountTmpfs(t, nextFiles, shmFlags, "")

	st, err := store.New(filepath.Join(dir, "state", "sandboxes")) // no record of either
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	m, err := sandbox.NewManager(sandbox.Options{Store: st, RunDir: runDir, Node: sandbox.HostNode{}, Handlers: noRuntimes{}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}

	if !isMountPoint(victim) {
		t.Errorf("the node mount %s was unmounted through the symlink %s", victim, filepath.Join(shm, sandbox.ShmMount))
	}
	for _, p := range []string{shm, nextShm, nextFiles} {
		if isMountPoint(p) {
			t.Errorf("%s is still mounted", p)
		}
	}
	for _, p := range []string{early, next} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("orphan pod dir %s not removed: %v", p, err)
		}
	}
}
