// Package rootlock makes one daemon the only one on its roots: a second rtshimd on the
// same state or run root would append to the same record journals, take the CRI socket
// and the pin link, and collect the first one's layers. Each root holds a lock file with
// a POSIX record lock (fcntl F_SETLK) held for the daemon's life, and its PID; the kernel
// lets it go when the process ends, however it ends, so a crash leaves nothing to clean up.
// Not flock(2): a flock belongs to the open file, which a child that inherited it (the
// soak saw one outlive a killed daemon) holds on; a record lock belongs to the process.
//
// Hand-written over x/sys/unix rather than a library: the lock is one fcntl call, and the
// error must name the holder, which F_GETLK gives and the libraries' lock files don't.
package rootlock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// File is the lock file's name in each root.
const File = "rtshimd.lock"

// ErrHeld is returned when another process holds a root's lock.
var ErrHeld = errors.New("held by another rtshimd")

// Lock is the held locks of a set of roots.
type Lock struct{ files []*os.File }

// Acquire locks each dir (created 0711 where missing) for this process, or fails without
// waiting: with ErrHeld and the holder's PID when another process holds one.
func Acquire(dirs ...string) (*Lock, error) {
	l := &Lock{}
	for _, dir := range dirs {
		f, err := lockOne(dir)
		if err != nil {
			l.Release()
			return nil, err
		}
		l.files = append(l.files, f)
	}
	return l, nil
}

func lockOne(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	path := filepath.Join(dir, File)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
		holder := holderOf(f, dir)
		f.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%s is %w (pid %s): stop it first, or give this one other roots", dir, ErrHeld, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// holderOf is the PID of the process holding f's lock, as the kernel says, else as the
// file says.
func holderOf(f *os.File, dir string) string {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err == nil && lk.Type != unix.F_UNLCK && lk.Pid > 0 {
		return strconv.Itoa(int(lk.Pid))
	}
	return Holder(dir)
}

// Holder is the PID written in dir's lock file ("unknown" when it cannot be read).
func Holder(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, File))
	if s := strings.TrimSpace(string(b)); err == nil && s != "" {
		return s
	}
	return "unknown"
}

// Held says whether another process holds dir's lock now. (Closing any descriptor of the
// file drops this process's own record locks: a daemon never calls it.)
func Held(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, File), os.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	return unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk) == nil && lk.Type != unix.F_UNLCK
}

// Release lets the locks go (a process's exit does it too).
func (l *Lock) Release() {
	if l == nil {
		return
	}
	for _, f := range l.files {
		f.Close()
	}
	l.files = nil
}
