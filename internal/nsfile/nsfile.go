// Package nsfile creates Linux namespaces that outlive any process by bind-mounting them
// onto files, and releases them. It owns nothing but those files and their mounts.
package nsfile

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Kind is a namespace type as named under /proc/<pid>/ns.
type Kind string

const (
	Net  Kind = "net"
	IPC  Kind = "ipc"
	UTS  Kind = "uts"
	User Kind = "user"
)

// pinDirMode is the mode of a directory of pins on the node: root's alone. Every user of
// the pins opens them as root on the node (the runtimes, before they enter a pod's user
// namespace; CNI plugins; NRI plugins), so no other user, a pod user namespace's root
// included, needs to reach them.
const pinDirMode = 0o700

var cloneFlags = map[Kind]uintptr{Net: unix.CLONE_NEWNET, IPC: unix.CLONE_NEWIPC, UTS: unix.CLONE_NEWUTS}

// Pin creates one new namespace of each kind and bind-mounts it to dir/<kind>. If UTS is
// among them, its hostname is set first. On error nothing is left mounted.
func Pin(dir string, kinds []Kind, hostname string) (map[Kind]string, error) {
	if len(kinds) == 0 {
		return map[Kind]string{}, nil
	}
	if err := os.MkdirAll(dir, pinDirMode); err != nil {
		return nil, fmt.Errorf("pin namespaces: %w", err)
	}
	type result struct {
		paths map[Kind]string
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread is left locked on purpose: it ends up in the new namespaces, and a
		// goroutine that exits while locked takes its thread with it, so no other
		// goroutine ever runs in them.
		runtime.LockOSThread()
		paths, err := pinOnThread(dir, kinds, hostname)
		ch <- result{paths, err}
	}()
	r := <-ch
	return r.paths, r.err
}

// UserNS is a user namespace for PinInUserNS: its ID mappings and a program that waits
// until it is killed (the pause program), which creates the namespaces for us.
type UserNS struct {
	UIDs, GIDs []specs.LinuxIDMapping
	Holder     string
}

// PinInUserNS is Pin for a pod in a user namespace: a new user namespace with the given
// mappings, and namespaces of kinds owned by it (so that the pod's root may mount sysfs
// and mqueue and set sysctls there), all bind-mounted to dir/<kind> ("user" among them).
// A process of the daemon cannot enter a new user namespace (the kernel refuses
// multi-threaded callers), so a holder process is started in all of them at once and
// killed once they are pinned. On error nothing is left mounted.
func PinInUserNS(dir string, kinds []Kind, hostname string, u UserNS) (paths map[Kind]string, err error) {
	flags := uintptr(unix.CLONE_NEWUSER)
	for _, k := range kinds {
		f, ok := cloneFlags[k]
		if !ok {
			return nil, fmt.Errorf("pin namespaces: unsupported kind %q", k)
		}
		flags |= f
	}
	if err := os.MkdirAll(dir, pinDirMode); err != nil {
		return nil, fmt.Errorf("pin namespaces: %w", err)
	}
	cmd := exec.Command(u.Holder)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  flags,
		UidMappings: sysProcIDMaps(u.UIDs),
		GidMappings: sysProcIDMaps(u.GIDs),
		// Written by the daemon (root in the parent namespace), so setgroups stays allowed,
		// as for a runc-made user namespace.
		GidMappingsEnableSetgroups: true,
	}
	if err := cmd.Start(); err != nil {
		hint := ""
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSPC) {
			hint = " (the node allows no new user namespace: check sysctl user.max_user_namespaces; pods with hostUsers: false need one each)"
		}
		return nil, fmt.Errorf("pin namespaces: start %s in a new user namespace: %w%s", u.Holder, err, hint)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	proc := fmt.Sprintf("/proc/%d/ns/", cmd.Process.Pid)

	ch := make(chan error, 1)
	go func() {
		// Left locked on purpose, as in Pin: the thread ends up in the pod's namespaces.
		runtime.LockOSThread()
		ch <- setUpJoined(proc, kinds, hostname)
	}()
	if err := <-ch; err != nil {
		return nil, fmt.Errorf("pin namespaces: %w", err)
	}
	paths = map[Kind]string{}
	for _, k := range append([]Kind{User}, kinds...) {
		target := filepath.Join(dir, string(k))
		if err := bind(proc+string(k), target); err != nil {
			for _, p := range paths {
				_ = Unpin(p)
			}
			return nil, fmt.Errorf("pin %s namespace at %s: %w", k, target, err)
		}
		paths[k] = target
	}
	return paths, nil
}

func sysProcIDMaps(ms []specs.LinuxIDMapping) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(ms))
	for i, m := range ms {
		out[i] = syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
	}
	return out
}

// setUpJoined joins the calling thread to the network and UTS namespaces under proc and
// does there what Pin does in namespaces it made (root of the parent user namespace
// holds every capability in the child's).
func setUpJoined(proc string, kinds []Kind, hostname string) error {
	for _, k := range kinds {
		if k != Net && (k != UTS || hostname == "") {
			continue
		}
		f, err := os.Open(proc + string(k))
		if err != nil {
			return err
		}
		err = unix.Setns(int(f.Fd()), int(cloneFlags[k]))
		f.Close()
		if err != nil {
			return fmt.Errorf("join the new %s namespace: %w", k, err)
		}
		switch k {
		case UTS:
			if err := unix.Sethostname([]byte(hostname)); err != nil {
				return fmt.Errorf("set hostname %q: %w", hostname, err)
			}
		case Net:
			if err := loopbackUp(); err != nil {
				return fmt.Errorf("bring up lo: %w", err)
			}
			if err := podNetSysctls(); err != nil {
				return err
			}
		}
	}
	return nil
}

func pinOnThread(dir string, kinds []Kind, hostname string) (map[Kind]string, error) {
	var flags uintptr
	for _, k := range kinds {
		f, ok := cloneFlags[k]
		if !ok {
			return nil, fmt.Errorf("pin namespaces: unsupported kind %q", k)
		}
		flags |= f
	}
	if err := unix.Unshare(int(flags)); err != nil {
		return nil, fmt.Errorf("pin namespaces: unshare: %w", err)
	}
	for _, k := range kinds {
		if k == UTS && hostname != "" {
			if err := unix.Sethostname([]byte(hostname)); err != nil {
				return nil, fmt.Errorf("pin namespaces: set hostname %q: %w", hostname, err)
			}
		}
		if k == Net {
			// Containers of a pod talk over localhost even before (or without) CNI.
			if err := loopbackUp(); err != nil {
				return nil, fmt.Errorf("pin namespaces: bring up lo: %w", err)
			}
			if err := podNetSysctls(); err != nil {
				return nil, fmt.Errorf("pin namespaces: %w", err)
			}
		}
	}
	tid := unix.Gettid()
	paths := map[Kind]string{}
	for _, k := range kinds {
		target := filepath.Join(dir, string(k))
		if err := bind(fmt.Sprintf("/proc/self/task/%d/ns/%s", tid, k), target); err != nil {
			for _, p := range paths {
				_ = Unpin(p)
			}
			return nil, fmt.Errorf("pin %s namespace at %s: %w", k, target, err)
		}
		paths[k] = target
	}
	return paths, nil
}

func bind(src, target string) error {
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		os.Remove(target)
		return err
	}
	return nil
}

// Unpin unmounts and removes a pinned namespace file. A missing file is not an error,
// so Unpin can be repeated after a crash.
func Unpin(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// IsPinned reports whether path is a mounted namespace file (false after a reboot
// emptied /run, for example).
func IsPinned(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// loopbackUp sets IFF_UP on lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// podNetSysctls are the defaults containerd 2 gives every pod network namespace: any user
// may bind ports below 1024 and open ICMP echo sockets. The pod's own sysctls, applied per
// container, still win. A sandboxing runtime that uses the pod netns through the host
// kernel (runsc --network=host) has no other way to serve on port 80.
func podNetSysctls() error {
	for _, s := range []struct{ path, value string }{
		{"/proc/sys/net/ipv4/ip_unprivileged_port_start", "0"},
		{"/proc/sys/net/ipv4/ping_group_range", "0 2147483647"},
	} {
		// /proc/sys/net is the calling thread's network namespace.
		if err := os.WriteFile(s.path, []byte(s.value), 0o644); err != nil {
			return fmt.Errorf("set %s in the pod netns: %w", filepath.Base(s.path), err)
		}
	}
	return nil
}
