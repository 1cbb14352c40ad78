// Package regfile reads files that must be regular files — an image's /etc/passwd, a
// termination log, a seccomp profile — without the side effects of opening anything else:
// a FIFO would block the open for ever, a device node would be opened as root.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// Read reads at most max bytes of the regular file at path.
func Read(path string, max int64) ([]byte, error) {
	p, err := os.OpenFile(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return readPath(p, path, max)
}

// ReadInRoot is Read of name inside root: symlinks are followed as if root were "/",
// never out of it (securejoin's O_PATH open).
func ReadInRoot(root, name string, max int64) ([]byte, error) {
	p, err := securejoin.OpenInRoot(root, name)
	if err != nil {
		return nil, err
	}
	return readPath(p, name, max)
}

// readPath checks what an O_PATH descriptor names (an O_PATH open has no side effects and
// never blocks) and reads it through that same descriptor, so what is read is what was
// checked.
func readPath(p *os.File, name string, max int64) ([]byte, error) {
	defer p.Close()
	fi, err := p.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("is a %s, not a regular file", kind(fi.Mode()))}
	}
	f, err := securejoin.Reopen(p, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsDir():
		return "directory"
	}
	return "special file"
}

// OpenNoFollow opens the regular file at path for reading: a link at path is not
// followed, and anything but a regular file (a FIFO, which would block; a device) is an
// error naming it, checked on the opened file.
func OpenNoFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, &fs.PathError{Op: "open", Path: filepath.Base(path), Err: errors.New("is a symbolic link, not a regular file")}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = &fs.PathError{Op: "open", Path: filepath.Base(path), Err: fmt.Errorf("is a %s, not a regular file", kind(fi.Mode()))}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadNoFollow reads the regular file at path (OpenNoFollow), refusing one larger than
// max bytes rather than cutting it short.
func ReadNoFollow(path string, max int64) ([]byte, error) {
	f, err := OpenNoFollow(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", filepath.Base(path), max)
	}
	return b, nil
}
