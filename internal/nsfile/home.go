package nsfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Home is a mount namespace of the daemon's own in which pods' namespaces are pinned,
// so that their pins are not in the node's mount table. Every runc reads that table
// several times per container, and what that costs grows with it: with three pins per
// pod in the node's table they were half of a pod's lines there.
//
// The home's root is a small tmpfs (nothing of the node's mounts is held in it, so it
// keeps no filesystem of the node busy) with /proc and /pods/<id>/<kind>. It is pinned on
// the node at <run root>/nshome, so it outlives the daemon as the pods do; the node
// reaches its pods directory through <run root>/pinned, a symlink to the daemon's open
// descriptor of it (/proc/<pid>/fd/<n>), which each daemon points at its own. A pod's
// pins are then <pinned>/<id>/<kind>, to runc, CNI plugins and the daemon alike, as
// long as a daemon runs; nothing opens them otherwise.
type Home struct {
	node string // the home's pin on the node
	link string // the node's path to the pods directory
	ns   *os.File
	pods *os.File // O_PATH descriptor of /pods in the home
}

const homePods = "/pods"

// OpenHome opens the pin home under runRoot, creating it if there is none (after a
// reboot, or the first start).
func OpenHome(runRoot string) (*Home, error) {
	h := &Home{node: filepath.Join(runRoot, "nshome"), link: filepath.Join(runRoot, "pinned")}
	if isMountNS(h.node) {
		ns, err := os.Open(h.node)
		if err != nil {
			return nil, fmt.Errorf("open pin home %s: %w", h.node, err)
		}
		h.ns = ns
		if h.pods, err = onThreadIn(ns, func() (*os.File, error) { return openPath(homePods) }); err != nil {
			ns.Close()
			return nil, fmt.Errorf("open pin home %s: %w", h.node, err)
		}
	} else if err := h.create(runRoot); err != nil {
		return nil, err
	}
	if err := h.pointLink(); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// create makes a new home and pins it at h.node.
func (h *Home) create(runRoot string) error {
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
		return fmt.Errorf("create pin home: %w", r.err)
	}
	h.ns, h.pods = r.ns, r.pods
	_ = Unpin(h.node) // a pin of a home that is gone (not a mount namespace any more)
	if err := bind(fmt.Sprintf("/proc/self/fd/%d", h.ns.Fd()), h.node); err != nil {
		h.ns.Close()
		h.pods.Close()
		return fmt.Errorf("pin the pin home at %s: %w", h.node, err)
	}
	return nil
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
		return nil, nil, err
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
		return nil, nil, err
	}
	if err := os.Mkdir("/proc", 0o555); err != nil {
		return nil, nil, err
	}
	// /proc/thread-self/ns for the pins, /proc/sys/net for a new netns's sysctls.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, nil, fmt.Errorf("mount /proc: %w", err)
	}
	if err := os.Mkdir(homePods, 0o711); err != nil {
		return nil, nil, err
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
	target := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), h.pods.Fd())
	tmp := h.link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("link the pin home: %w", err)
	}
	if err := os.Rename(tmp, h.link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("link the pin home: %w", err)
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

// Pin is Pin for pod id, in the home.
func (h *Home) Pin(id string, kinds []Kind, hostname string) (map[Kind]string, error) {
	if !validID(id) {
		return nil, fmt.Errorf("pin namespaces: pod ID %q cannot name a directory", id)
	}
	if len(kinds) == 0 {
		return map[Kind]string{}, nil
	}
	inHome, err := onThreadIn(h.ns, func() (map[Kind]string, error) {
		dir := filepath.Join(homePods, id)
		if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("pin namespaces: %w", err)
		}
		paths, err := pinOnThread(dir, kinds, hostname)
		if err != nil {
			_ = os.Remove(dir)
		}
		return paths, err
	})
	if err != nil {
		return nil, err
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
	_, err := onThreadIn(h.ns, func() (struct{}, error) {
		dir := filepath.Join(homePods, id)
		if err := Unpin(filepath.Join(dir, string(k))); err != nil {
			return struct{}{}, err
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
			return struct{}{}, fmt.Errorf("remove %s in the pin home: %w", dir, err)
		}
		return struct{}{}, nil
	})
	return err
}

// Pods lists the pods with pins in the home.
func (h *Home) Pods() ([]string, error) {
	entries, err := os.ReadDir(h.link)
	if err != nil {
		return nil, fmt.Errorf("list the pin home: %w", err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids, nil
}

// Close lets the descriptors go. A home that holds no pod is released from the node as
// well; one that holds pods stays for the next daemon.
func (h *Home) Close() {
	if ids, err := h.Pods(); err == nil && len(ids) == 0 {
		_ = Unpin(h.node)
		_ = os.Remove(h.link)
	}
	if h.pods != nil {
		h.pods.Close()
	}
	if h.ns != nil {
		h.ns.Close()
	}
}

// isMountNS reports whether path is a pinned mount namespace.
func isMountNS(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	return err == nil && t == unix.CLONE_NEWNS
}

func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}
