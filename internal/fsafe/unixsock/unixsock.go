// Package unixsock listens on Unix sockets whose mode is set before anyone can connect.
package unixsock

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Listen binds a stream socket at path, gives the file mode (connecting needs write
// permission on it) and only then listens: a socket never accepts with the mode the
// process's umask would have left. The listener unlinks path when closed.
func Listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listen unix %s: socket: %w", path, err)
	}
	fail := func(step string, err error) (*net.UnixListener, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("listen unix %s: %s: %w", path, step, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return fail("bind", err)
	}
	// Before listen: until then a connect is refused, so no client sees the old mode.
	if err := unix.Fchmodat(unix.AT_FDCWD, path, uint32(mode.Perm()), 0); err != nil {
		_ = os.Remove(path)
		return fail("chmod", err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		_ = os.Remove(path)
		return fail("listen", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("listen unix %s: %w", path, err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(true)
	return ul, nil
}
