// Package oomevent learns of an OOM in a container's memory cgroup when it happens, not
// when the container's exit is handled: by then the cgroup may be gone. runc's systemd
// driver puts each container in a transient scope, and systemd removes a scope's cgroups
// as soon as its last process has exited, so reading the OOM-kill count at exit raced
// systemd and an OOM-killed container was reported "Error". containerd's shim and CRI-O's
// conmon register the same cgroup v1 notification.
package oomevent

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// removalWait bounds the wait for a removal's notification after an ambiguous one: the
// kernel takes a removed cgroup offline within milliseconds of the rmdir.
const removalWait = 200 * time.Millisecond

// Watcher follows one memory cgroup.
type Watcher struct {
	ev      *os.File
	oom     atomic.Bool
	pending atomic.Bool // a notification is being told apart (at most removalWait)
	done    chan struct{}
}

// Watch registers for OOM notifications of the cgroup v1 memory cgroup at dir (absolute:
// /sys/fs/cgroup/memory/...) through cgroup.event_control. The notification also fires
// when the cgroup is removed, once; the count of notifications and whether the cgroup is
// still there tell the two apart. The watch ends by itself after the first notification,
// or with Stop.
func Watch(dir string) (*Watcher, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("oom events of %s: eventfd: %w", dir, err)
	}
	// Pollable: a blocked Read parks the goroutine, not a thread.
	w := &Watcher{ev: os.NewFile(uintptr(efd), "oom-eventfd"), done: make(chan struct{})}
	ctl, err := os.Open(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		w.ev.Close()
		return nil, fmt.Errorf("oom events of %s: %w", dir, err)
	}
	// The kernel keeps its own reference to memory.oom_control once registered.
	defer ctl.Close()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(fmt.Sprintf("%d %d", efd, ctl.Fd())), 0o600); err != nil {
		w.ev.Close()
		return nil, fmt.Errorf("oom events of %s: %w", dir, err)
	}
	go w.run(dir)
	return w, nil
}

func (w *Watcher) run(dir string) {
	defer close(w.done)
	defer w.ev.Close()
	var buf [8]byte
	if _, err := w.ev.Read(buf[:]); err != nil {
		return // stopped
	}
	// The count of notifications since registration: an OOM adds one, the cgroup's
	// removal one (when the kernel takes it offline, after the rmdir). Two or more
	// include an OOM; one is an OOM if the cgroup is still there.
	n := binary.NativeEndian.Uint64(buf[:])
	if _, err := os.Stat(filepath.Join(dir, "memory.oom_control")); n >= 2 || err == nil {
		w.oom.Store(true)
		return
	}
	// One notification and the cgroup gone: its removal, or an OOM read late, after the
	// rmdir but before the kernel took the cgroup offline; that removal's notification
	// then comes soon after.
	w.pending.Store(true)
	defer w.pending.Store(false)
	if err := w.ev.SetReadDeadline(time.Now().Add(removalWait)); err != nil {
		return
	}
	if _, err := w.ev.Read(buf[:]); err == nil {
		w.oom.Store(true)
	}
}

// OOMKilled says whether an OOM was notified. A notification the watch has not read yet,
// or is still telling apart from the cgroup's removal, is waited for (at most
// removalWait and a little): an exit can be handled before the watch's goroutine ran.
func (w *Watcher) OOMKilled() bool {
	if !w.oom.Load() && !w.pending.Load() && w.unread() {
		select {
		case <-w.done:
		case <-time.After(2 * removalWait):
		}
	}
	if w.pending.Load() {
		<-w.done
	}
	return w.oom.Load()
}

// unread: the eventfd holds a notification no one has read.
func (w *Watcher) unread() bool {
	rc, err := w.ev.SyscallConn()
	if err != nil {
		return false
	}
	ready := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		ready = err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
	})
	return ready
}

// Stop ends the watch.
func (w *Watcher) Stop() { w.ev.Close() }
