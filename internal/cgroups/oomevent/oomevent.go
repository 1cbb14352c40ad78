// Package oomevent learns of an OOM in a container's memory cgroup when it happens, not
// when the container's exit is handled: by then the cgroup may be gone. runc's systemd
// driver puts each container in a transient scope, and systemd removes a scope's cgroups
// as soon as its last process has exited, so reading the OOM-kill count at exit raced
// systemd and an OOM-killed container was reported "Error". containerd's shim and CRI-O's
// conmon register the same cgroup v1 notification. On cgroup v2 (WatchEvents) the kernel
// signals a change of memory.events through inotify, and the watch reads the OOM-kill
// count at once, while the cgroup is still there, as containerd's cgroups v2 manager does.
package oomevent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
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
	// v2: the memory.events followed, its parent's and the parent's count at the start;
	// seen: a change was read. mu orders reading changes and counts.
	file, parentFile string
	parentBase       uint64
	mu               sync.Mutex
	seen             bool
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

// WatchEvents follows the cgroup v2 cgroup at dir (absolute: /sys/fs/cgroup/...): each
// change of its memory.events is read at once, and an oom_kill count above zero is an OOM.
// memory.events counts the cgroup's descendants too, so a runtime that puts the container
// in a child of the cgroup it was asked for (crun under systemd: <scope>/container) is
// seen. The kernel signals no removal of the file, so the watch ends after an OOM or with
// Stop.
//
// The OOM kill empties the cgroup, and systemd may remove the scope before the change is
// read (one busy CPU). Then the parent's count (memory.events is hierarchical: the pod's
// slice) tells: it rose since the watch began while this cgroup's memory.events changed.
// That misattributes only a sibling's OOM kill in the same moment as this container's
// own memory event and removal.
func WatchEvents(dir string) (*Watcher, error) {
	file := filepath.Join(dir, "memory.events")
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("oom events of %s: inotify: %w", dir, err)
	}
	w := &Watcher{ev: os.NewFile(uintptr(fd), "oom-inotify"), done: make(chan struct{}),
		file: file, parentFile: filepath.Join(filepath.Dir(dir), "memory.events")}
	if _, err := unix.InotifyAddWatch(fd, file, unix.IN_MODIFY); err != nil {
		w.ev.Close()
		return nil, fmt.Errorf("oom events of %s: watch memory.events: %w", dir, err)
	}
	w.parentBase, _ = oomKills(w.parentFile)
	// A kill before the watch was added (the container's first moments) shows in the count.
	if n, err := oomKills(file); err == nil && n > 0 {
		w.oom.Store(true)
	}
	go w.runEvents()
	return w, nil
}

func (w *Watcher) runEvents() {
	defer close(w.done)
	defer w.ev.Close()
	rc, err := w.ev.SyscallConn()
	if err != nil {
		return
	}
	for !w.oom.Load() {
		// Called when the fd is readable; false waits again.
		if err := rc.Read(func(fd uintptr) bool { return w.drain(int(fd)) }); err != nil {
			return // stopped
		}
	}
}

// drain reads the changes pending on the inotify fd and, if there were any, the counts, in
// one step under mu: OOMKilled never sees a change taken from the fd but not yet read.
// false: nothing was pending.
func (w *Watcher) drain(fd int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	var buf [4096]byte
	got := false
	for {
		n, err := unix.Read(fd, buf[:])
		if n <= 0 || err != nil {
			break
		}
		got = true
	}
	if got {
		w.seen = true
		if w.readCounts() {
			w.oom.Store(true)
		}
	}
	return got
}

// readCounts: the cgroup's oom_kill is above zero, or, the cgroup gone after a change of
// its memory.events, the parent's rose since the watch began.
func (w *Watcher) readCounts() bool {
	k, err := oomKills(w.file)
	if err == nil {
		return k > 0
	}
	pk, err := oomKills(w.parentFile)
	return err == nil && pk > w.parentBase
}

// oomKills reads oom_kill from a cgroup v2 memory.events file.
func oomKills(file string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := bytes.Cut(sc.Bytes(), []byte(" ")); ok && string(k) == "oom_kill" {
			return strconv.ParseUint(string(v), 10, 64)
		}
	}
	return 0, nil
}

// OOMKilled says whether an OOM was notified. A notification the watch has not read yet,
// or is still telling apart from the cgroup's removal, is waited for (at most
// removalWait and a little): an exit can be handled before the watch's goroutine ran.
func (w *Watcher) OOMKilled() bool {
	if w.file != "" {
		return w.oomKilledV2()
	}
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

// oomKilledV2: the changes not yet read are read now; while the cgroup is there its count
// is the answer; after, the parent's, if this cgroup's memory.events changed.
func (w *Watcher) oomKilledV2() bool {
	if w.oom.Load() {
		return true
	}
	if rc, err := w.ev.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { w.drain(int(fd)) })
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := os.Stat(w.file); err == nil || w.seen {
		if w.readCounts() {
			w.oom.Store(true)
		}
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
