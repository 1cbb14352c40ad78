package nsfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/moby/sys/mountinfo"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/fsafe/mountpoint"
)

// Home is a mount namespace of the daemon's own in which pods' namespaces are pinned,
// so that their pins are not in the node's mount table. Every runc reads that table
// several times per container, and what that costs grows with it: with three pins per
// pod in the node's table they were half of a pod's lines there.
//
// The home's root is a small tmpfs (nothing of the node's mounts is held in it, so it
// keeps no filesystem of the node busy) with /proc and /pods/<id>/<kind>. It is pinned on
// the node at <run root>/nshome/mnt, in a private mount of its own (the kernel refuses to
// propagate a mount namespace's pin, so under a shared /run, as systemd makes it, the pin
// would fail), so it outlives the daemon as the pods do. The node reaches its pods
// directory through <run root>/pinned, a symlink to the daemon's open descriptor of it
// (/proc/<pid>/fd/<n>), which each daemon points at its own and removes when it stops. A
// pod's pins are then <pinned>/<id>/<kind>, to runc, CNI plugins and the daemon alike, as
// long as a daemon runs; nothing opens them otherwise.
type Home struct {
	dir    string // <run root>/nshome, a private mount holding the pin
	node   string // the home's pin on the node
	link   string // the node's path to the pods directory
	target string // where link points: this daemon's descriptor

	mu       sync.RWMutex // Close waits for pins and unpins under way
	closed   bool
	ns, pods *os.File // the home, and an O_PATH descriptor of /pods in it
	// canLend: the kernel has open_tree and move_mount (Linux 5.2) and lets the daemon
	// call them (a seccomp filter may not), which LendTmpfs needs.
	canLend bool
}

const homePods = "/pods"

// ErrHomeHeld: a pin home exists on the node but could not be opened. Its pods'
// namespaces are in it, so the daemon must not go on without it (nor replace it).
var ErrHomeHeld = errors.New("the node has a pin home that could not be opened; it holds the namespaces of the pods on this node, so the daemon will not start without it (to give them up: drain the node, then unmount the pin and the directory it is in)")

// OpenHome opens the pin home under runRoot, creating it if there is none (after a
// reboot, or the first start).
func OpenHome(runRoot string) (*Home, error) {
	dir := filepath.Join(runRoot, "nshome")
	h := &Home{dir: dir, node: filepath.Join(dir, "mnt"), link: filepath.Join(runRoot, "pinned")}
	// A link left by a daemon that died points at a dead process's descriptor; nothing
	// may resolve through it, whatever happens next.
	if err := os.Remove(h.link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pin home: remove the stale link %s: %w", h.link, err)
	}
	held, err := isHomePin(h.node)
	switch {
	case err != nil:
		return nil, fmt.Errorf("pin home %s: %w: %w", h.node, err, ErrHomeHeld)
	case held:
		ns, err := os.Open(h.node)
		if err != nil {
			return nil, fmt.Errorf("open pin home %s: %w: %w", h.node, err, ErrHomeHeld)
		}
		h.ns = ns
		if h.pods, err = onThreadIn(ns, func() (*os.File, error) { return openPath(homePods) }); err != nil {
			ns.Close()
			return nil, fmt.Errorf("open pin home %s: %w: %w", h.node, err, ErrHomeHeld)
		}
	default:
		if err := h.create(runRoot); err != nil {
			return nil, err
		}
	}
	h.target = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), h.pods.Fd())
	if err := h.pointLink(); err != nil {
		h.Close()
		return nil, err
	}
	h.canLend = h.probeLend()
	return h, nil
}

// probeLend reports whether LendTmpfs can work here: a copy of the home's /pods made and
// dropped, and move_mount there (called with a bad descriptor, which only a kernel
// without it, or a filter that refuses it, answers with ENOSYS or EPERM).
func (h *Home) probeLend() bool {
	_, err := onThreadIn(h.ns, func() (struct{}, error) {
		fd, err := unix.OpenTree(unix.AT_FDCWD, homePods, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		return struct{}{}, err
	})
	if err == nil {
		err = unix.MoveMount(-1, "", unix.AT_FDCWD, h.dir, unix.MOVE_MOUNT_F_EMPTY_PATH)
		if errors.Is(err, unix.EBADF) {
			err = nil
		}
	}
	if err != nil {
		logrus.WithError(err).Warn("pin home: pods' tmpfs stay on the node (open_tree and move_mount, Linux 5.2, are not available)")
		return false
	}
	return true
}

// CanLend reports whether LendTmpfs can work on this node; pods' tmpfs belong on the
// node otherwise.
func (h *Home) CanLend() bool { return h.canLend }

// isHomePin reports whether path pins a mount namespace: false if there is nothing
// there, or a file that pins nothing (its pin was unmounted); an error where it cannot
// tell, for then a live home must not be replaced.
func isHomePin(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if st.Type != unix.NSFS_MAGIC {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil {
		// Kernels before 4.11 have no NS_GET_NSTYPE; the descriptor's link names the kind.
		l, lerr := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
		if lerr != nil {
			return false, fmt.Errorf("which namespace: %w", err)
		}
		if !strings.HasPrefix(l, "mnt:[") {
			return false, fmt.Errorf("pins %s, not a mount namespace", l)
		}
		return true, nil
	}
	if t != unix.CLONE_NEWNS {
		return false, fmt.Errorf("pins a namespace of type %#x, not a mount namespace", t)
	}
	return true, nil
}

// create makes a new home and pins it at h.node, in a private mount at h.dir.
func (h *Home) create(runRoot string) error {
	if err := privateDir(h.dir); err != nil {
		return fmt.Errorf("create pin home: %w", err)
	}
	type result struct {
		ns, pods *os.File
		err      error
	}
	ch := make(chan result, 1)
	go func() {
		// Left locked: the thread ends in the home, and goes with the goroutine.
		runtime.LockOSThread()
		ns, pods, err := makeHome(runRoot)
		ch <- result{ns, pods, err}
	}()
	r := <-ch
	if r.err != nil {
		h.releaseDir()
		return fmt.Errorf("create pin home: %w", r.err)
	}
	h.ns, h.pods = r.ns, r.pods
	_ = os.Remove(h.node) // a file whose pin was unmounted
	if err := bind(fmt.Sprintf("/proc/self/fd/%d", h.ns.Fd()), h.node); err != nil {
		h.ns.Close()
		h.pods.Close()
		h.releaseDir()
		return fmt.Errorf("pin the pin home at %s: %w", h.node, err)
	}
	return nil
}

// privateDir makes dir a private mount of its own (a bind of itself), if it is not one.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	mounted, err := mountinfo.Mounted(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	return nil
}

// releaseDir unmounts and removes h.dir (the pin in it already gone).
func (h *Home) releaseDir() {
	if err := unix.Unmount(h.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		logrus.WithError(err).WithField("dir", h.dir).Warn("pin home: unmount its dir")
		return
	}
	_ = os.Remove(h.node)
	_ = os.Remove(h.dir)
}

// makeHome runs on a thread of its own: a new mount namespace whose root is a tmpfs
// with /proc and /pods.
func makeHome(runRoot string) (ns, pods *os.File, err error) {
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return nil, nil, fmt.Errorf("unshare: %w", err)
	}
	// Nothing made here reaches the node, and nothing of the node's comes in.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, nil, fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("rtshimd-pins", runRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0711"); err != nil {
		return nil, nil, fmt.Errorf("mount its root: %w", err)
	}
	if err := unix.Chdir(runRoot); err != nil {
		return nil, nil, fmt.Errorf("enter its root: %w", err)
	}
	// pivot_root(".", "."), then the old root, now stacked under the new one, is
	// detached: the home holds none of the node's mounts.
	if err := unix.PivotRoot(".", "."); err != nil {
		return nil, nil, fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return nil, nil, fmt.Errorf("detach the node's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return nil, nil, fmt.Errorf("enter its root: %w", err)
	}
	if err := os.Mkdir("/proc", 0o555); err != nil {
		return nil, nil, fmt.Errorf("its /proc: %w", err)
	}
	// /proc/thread-self/ns for the pins, /proc/sys/net for a new netns's sysctls.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, nil, fmt.Errorf("mount /proc: %w", err)
	}
	if err := os.Mkdir(homePods, 0o711); err != nil {
		return nil, nil, fmt.Errorf("its %s: %w", homePods, err)
	}
	if ns, err = os.Open("/proc/thread-self/ns/mnt"); err != nil {
		return nil, nil, err
	}
	if pods, err = openPath(homePods); err != nil {
		ns.Close()
		return nil, nil, err
	}
	return ns, pods, nil
}

func openPath(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// pointLink points h.link at this daemon's descriptor of the pods directory.
func (h *Home) pointLink() error {
	tmp := h.link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(h.target, tmp); err != nil {
		return fmt.Errorf("link the pin home at %s: %w", h.link, err)
	}
	if err := os.Rename(tmp, h.link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("link the pin home at %s: %w", h.link, err)
	}
	return nil
}

// onThreadIn runs f on a thread of its own that has entered mount namespace ns; the
// thread is discarded afterwards.
func onThreadIn[T any](ns *os.File, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // left locked: the thread goes with the goroutine
		var r result
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			r.err = fmt.Errorf("unshare fs: %w", err)
		} else if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
			r.err = fmt.Errorf("enter the pin home: %w", err)
		} else {
			r.v, r.err = f()
		}
		ch <- r
	}()
	r := <-ch
	return r.v, r.err
}

// Dir is the node's path of pod id's pins (<pinned>/<id>): the pod's namespace files
// are <Dir>/<kind>.
func (h *Home) Dir(id string) string { return filepath.Join(h.link, id) }

// errClosed: the daemon is stopping.
var errClosed = errors.New("the pin home is closed")

// Pin is Pin for pod id, in the home.
func (h *Home) Pin(id string, kinds []Kind, hostname string) (map[Kind]string, error) {
	if !validID(id) {
		return nil, fmt.Errorf("pin namespaces: pod ID %q cannot name a directory", id)
	}
	if len(kinds) == 0 {
		return map[Kind]string{}, nil
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return nil, fmt.Errorf("pin namespaces of %s: %w", id, errClosed)
	}
	inHome, err := onThreadIn(h.ns, func() (map[Kind]string, error) {
		dir := filepath.Join(homePods, id)
		if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("pin namespaces: %s in the pin home: %w", dir, err)
		}
		paths, err := pinOnThread(dir, kinds, hostname)
		if err != nil {
			_ = os.Remove(dir)
		}
		return paths, err
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", id, err)
	}
	paths := map[Kind]string{}
	for k := range inHome {
		paths[k] = filepath.Join(h.Dir(id), string(k))
	}
	return paths, nil
}

// Unpin releases pod id's pin of kind k in the home, and the pod's directory there with
// its last pin. One that is not pinned is not an error.
func (h *Home) Unpin(id string, k Kind) error {
	if !validID(id) || !validID(string(k)) {
		return fmt.Errorf("unpin %s/%s: not a pin of the home", id, k)
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return fmt.Errorf("unpin %s: %w", filepath.Join(h.Dir(id), string(k)), errClosed)
	}
	_, err := onThreadIn(h.ns, func() (struct{}, error) {
		dir := filepath.Join(homePods, id)
		if err := Unpin(filepath.Join(dir, string(k))); err != nil {
			return struct{}{}, err
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
			return struct{}{}, fmt.Errorf("remove %s: %w", dir, err)
		}
		return struct{}{}, nil
	})
	if err != nil {
		return fmt.Errorf("unpin %s (in the pin home %s): %w", filepath.Join(h.Dir(id), string(k)), h.node, err)
	}
	return nil
}

// usePod checks that id can name a pod's directory in the home and holds the home open
// (Close waits) until release.
func (h *Home) usePod(what, id string) (release func(), err error) {
	if !validID(id) {
		return nil, fmt.Errorf("%s: pod ID %q cannot name a directory", what, id)
	}
	h.mu.RLock()
	if h.closed {
		h.mu.RUnlock()
		return nil, fmt.Errorf("%s of %s: %w", what, id, errClosed)
	}
	return h.mu.RUnlock, nil
}

// TmpfsName is a pod's tmpfs in its directory of the home.
const TmpfsName = "tmpfs"

// MountTmpfs mounts a tmpfs (mount(2)'s flags and data) as pod id's in the home and
// returns the node's path to its root, through the home's link: the daemon writes the
// pod's files there, and nothing of it is in the node's mount table. A runtime's mount
// cannot take it from there (the kernel binds only from the caller's own mount
// namespace): LendTmpfs puts a copy on the node for that.
func (h *Home) MountTmpfs(id string, flags uintptr, data string) (string, error) {
	release, err := h.usePod("mount pod tmpfs", id)
	if err != nil {
		return "", err
	}
	defer release()
	_, err = onThreadIn(h.ns, func() (struct{}, error) {
		dir := filepath.Join(homePods, id)
		if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return struct{}{}, err
		}
		p := filepath.Join(dir, TmpfsName)
		err := os.Mkdir(p, 0o700)
		if err == nil {
			err = unix.Mount("rtshimd-pod", p, "tmpfs", flags, data)
			if err != nil {
				_ = os.Remove(p)
			}
		}
		if err != nil {
			_ = os.Remove(dir) // only if it holds nothing else
		}
		return struct{}{}, err
	})
	if err != nil {
		return "", fmt.Errorf("mount pod %s's tmpfs in the pin home %s: %w", id, h.node, err)
	}
	return filepath.Join(h.Dir(id), TmpfsName), nil
}

// LendTmpfs mounts a copy of pod id's tmpfs at target on the node: the same files, one
// more mount of them, which the node's unmount of target takes away again. A runtime's
// bind mounts from it outlive that (they are the container's).
func (h *Home) LendTmpfs(id, target string) error {
	release, err := h.usePod("lend pod tmpfs", id)
	if err != nil {
		return err
	}
	defer release()
	// The copy is made in the home, detached from every mount table; it is attached on
	// the node by this goroutine's thread, which is the node's (only the home's own
	// threads, locked and discarded, are elsewhere).
	fd, err := onThreadIn(h.ns, func() (int, error) {
		return unix.OpenTree(unix.AT_FDCWD, filepath.Join(homePods, id, TmpfsName), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	})
	if err != nil {
		return fmt.Errorf("lend pod %s's tmpfs: copy it in the pin home %s: %w", id, h.node, err)
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("lend pod %s's tmpfs: mount it at %s: %w", id, target, err)
	}
	return nil
}

// UnmountTmpfs unmounts pod id's tmpfs in the home and removes its directory, and the
// pod's there if nothing else is in it. None is not an error.
func (h *Home) UnmountTmpfs(id string) error {
	release, err := h.usePod("unmount pod tmpfs", id)
	if err != nil {
		return err
	}
	defer release()
	_, err = onThreadIn(h.ns, func() (struct{}, error) {
		dir := filepath.Join(homePods, id)
		p := filepath.Join(dir, TmpfsName)
		if err := mountpoint.DetachAll(p); err != nil {
			return struct{}{}, err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return struct{}{}, fmt.Errorf("remove %s: %w", p, err)
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
			return struct{}{}, fmt.Errorf("remove %s: %w", dir, err)
		}
		return struct{}{}, nil
	})
	if err != nil {
		return fmt.Errorf("unmount pod %s's tmpfs in the pin home %s: %w", id, h.node, err)
	}
	return nil
}

// Pods lists the pods with pins or a tmpfs in the home.
func (h *Home) Pods() ([]string, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return nil, errClosed
	}
	return h.pods0()
}

func (h *Home) pods0() ([]string, error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/self/fd/%d", h.pods.Fd()))
	if err != nil {
		return nil, fmt.Errorf("list the pin home %s: %w", h.node, err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids, nil
}

// Collect releases the pins of pods that keep does not know: a start cut short between
// its pins and its record's cleanup, or a pod whose record could not be read.
func (h *Home) Collect(keep func(id string) bool) {
	ids, err := h.Pods()
	if err != nil {
		logrus.WithError(err).Warn("pin home: list its pods")
		return
	}
	for _, id := range ids {
		if keep(id) {
			continue
		}
		for _, k := range []Kind{Net, IPC, UTS} {
			if err := h.Unpin(id, k); err != nil {
				logrus.WithError(err).WithField("sandbox", id).Warn("pin home: release the pins of an unknown pod")
			}
		}
		if err := h.UnmountTmpfs(id); err != nil {
			logrus.WithError(err).WithField("sandbox", id).Warn("pin home: unmount the tmpfs of an unknown pod")
		}
		logrus.WithField("sandbox", id).Info("pin home: released the pins and tmpfs of a pod no record names")
	}
}

// Close waits for pins under way and lets the descriptors go; the link goes too (no
// path resolves through a dead process's descriptors). A home that holds no pod is
// released from the node as well; one that holds pods stays for the next daemon.
func (h *Home) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	if t, err := os.Readlink(h.link); err == nil && t == h.target {
		_ = os.Remove(h.link)
	}
	if ids, err := h.pods0(); err == nil && len(ids) == 0 {
		if err := Unpin(h.node); err != nil {
			logrus.WithError(err).Warn("pin home: release it")
		} else {
			h.releaseDir()
		}
	}
	h.pods.Close()
	h.ns.Close()
}

func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}
