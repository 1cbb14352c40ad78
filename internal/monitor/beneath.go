package monitor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A container's log file lies in a directory that others may write into (a log
// directory shared with the node's log agents, a volume): the monitor and the daemon
// open it as root, so no component below the log directory may be a symlink, or a
// planted link would have root append to any file on the node.

// openat2Missing is set once openat2 answered ENOSYS (kernels before 5.6): the walk
// with O_NOFOLLOW per component is used from then on.
var openat2Missing atomic.Bool

// LogRel returns path relative to the log directory dir, refusing a path that is not
// below it. An empty dir (a config written before log_dir existed) means path's own
// directory.
func LogRel(dir, path string) (string, error) {
	if dir == "" {
		dir = filepath.Dir(path)
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil || !filepath.IsLocal(rel) || rel == "." {
		return "", fmt.Errorf("log file %q is not below the log directory %q", path, dir)
	}
	return rel, nil
}

// logFlags open a log file for appending. O_NONBLOCK: a FIFO planted at the path fails
// (ENXIO) instead of blocking the open; the flag is cleared again for the regular file.
const logFlags = unix.O_WRONLY | unix.O_CREAT | unix.O_APPEND | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK

// OpenLog opens (creating, appending) the log file rel below dir without following a
// symlink in any component of rel, and only if it is a regular file.
func OpenLog(dir, rel string) (*os.File, error) {
	f, err := openBeneath(dir, rel, logFlags, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", filepath.Join(dir, rel), err)
	}
	return f, nil
}

// PrepareLog makes the directories of the log file rel below dir (0755) and the file
// itself, following no symlink below dir: the daemon calls it before the container's
// supervisor opens the file, so a refused path fails the create.
func PrepareLog(dir, rel string) error {
	if err := MkdirBeneath(dir, filepath.Dir(rel), 0o755); err != nil {
		return err
	}
	f, err := OpenLog(dir, rel)
	if err != nil {
		return err
	}
	return f.Close()
}

// MkdirBeneath makes the directories of rel (relative, ".": none) below dir, one
// component at a time and following no symlink.
func MkdirBeneath(dir, rel string, mode uint32) error {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open log directory %s: %w", dir, err)
	}
	if rel == "." || rel == "" {
		return unix.Close(dfd)
	}
	parts, err := components(rel)
	if err != nil {
		unix.Close(dfd)
		return err
	}
	cur := dfd
	defer func() { unix.Close(cur) }()
	for i, p := range parts {
		if err := unix.Mkdirat(cur, p, mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create %s: %w", filepath.Join(dir, filepath.Join(parts[:i+1]...)), err)
		}
		next, err := unix.Openat(cur, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", filepath.Join(dir, filepath.Join(parts[:i+1]...)), noFollowErr(err))
		}
		unix.Close(cur)
		cur = next
	}
	return nil
}

// components splits a relative path, refusing one that could leave its directory.
func components(rel string) ([]string, error) {
	if !filepath.IsLocal(rel) || filepath.Clean(rel) != rel || rel == "." {
		return nil, fmt.Errorf("path %q is not a clean relative path below the log directory", rel)
	}
	return strings.Split(rel, "/"), nil
}

// openBeneath opens rel below dir: openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS
// relative to dir's fd, or, where the kernel lacks openat2, one component at a time with
// O_NOFOLLOW.
func openBeneath(dir, rel string, flags int, mode uint32) (*os.File, error) {
	parts, err := components(rel)
	if err != nil {
		return nil, err
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open log directory: %w", err)
	}
	defer unix.Close(dfd)
	fd := -1
	if !openat2Missing.Load() {
		fd, err = openat2(dfd, rel, flags, mode)
		if errors.Is(err, unix.ENOSYS) {
			openat2Missing.Store(true)
		}
	}
	if openat2Missing.Load() {
		fd, err = walkOpen(dfd, parts, flags, mode)
	}
	if err != nil {
		return nil, noFollowErr(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("not a regular file (mode %#o)", st.Mode&unix.S_IFMT)
	}
	if st.Nlink > 1 {
		// A link planted at the log path would have root append to the file it names.
		unix.Close(fd)
		return nil, fmt.Errorf("the file has %d hard links: a log file has one, so it is not written", st.Nlink)
	}
	if flags&unix.O_NONBLOCK != 0 {
		if err := unix.SetNonblock(fd, false); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, rel)), nil
}

func openat2(dfd int, rel string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 8 {
		fd, err := unix.Openat2(dfd, rel, how)
		// EAGAIN: a rename elsewhere in the tree raced the lookup; try again.
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// walkOpen opens parts below dfd, each directory with O_NOFOLLOW|O_DIRECTORY and the
// last with flags|O_NOFOLLOW.
func walkOpen(dfd int, parts []string, flags int, mode uint32) (int, error) {
	cur, err := unix.Dup(dfd)
	if err != nil {
		return -1, err
	}
	for _, p := range parts[:len(parts)-1] {
		next, err := unix.Openat(cur, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	fd, err := unix.Openat(cur, parts[len(parts)-1], flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	unix.Close(cur)
	return fd, err
}

// noFollowErr says what the kernel's answer to a refused symlink means.
func noFollowErr(err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("a path component is a symlink, which is not followed: %w", err)
	}
	return err
}
