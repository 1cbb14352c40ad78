package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// readDropIns reads the *.toml files of dir (config.d), in name order; directories among
// them are skipped. A drop-in can add a row whose runtime_path is any binary, run as
// root, and a reload follows config.d with no signal: so, as sudoers' includedir and
// sshd's StrictModes, dir and each drop-in must be writable by their owner only, and owned
// by root (or by the user running this, for `rtshimd config check` and tests as another
// user), and a drop-in that is a symlink must stay inside dir. Anything else is refused,
// naming the file: the whole config is, so a reload keeps the one being served.
func readDropIns(dir string) ([]source, error) {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config drop-ins: %w", err)
	}
	if !st.IsDir() {
		return nil, nil // not a drop-in directory: as if there were none, as ever
	}
	if err := checkWriters("config drop-in directory", dir, st); err != nil {
		return nil, err
	}
	real, err := resolve(dir)
	if err != nil {
		return nil, fmt.Errorf("read config drop-ins: %w", err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.toml"))
	if err != nil {
		return nil, fmt.Errorf("read config drop-ins: %w", err)
	}
	sort.Strings(names)
	var out []source
	for _, n := range names {
		lst, err := os.Lstat(n)
		if err != nil {
			return nil, fmt.Errorf("read config drop-in: %w", err)
		}
		if lst.Mode()&fs.ModeSymlink != 0 {
			target, err := resolve(n)
			if err != nil {
				return nil, fmt.Errorf("read config drop-in: %w", err)
			}
			if !strings.HasPrefix(target, real+string(filepath.Separator)) {
				return nil, fmt.Errorf("config drop-in %s is a symlink to %s, outside %s: refused (a drop-in names any binary to run as root; copy the file in)", n, target, dir)
			}
		}
		if st, err := os.Stat(n); err == nil && st.IsDir() {
			continue
		}
		b, err := readDropIn(n)
		if err != nil {
			return nil, err
		}
		out = append(out, source{n, b})
	}
	return out, nil
}

// resolve is the absolute path of name with its symlinks followed.
func resolve(name string) (string, error) {
	p, err := filepath.EvalSymlinks(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// readDropIn reads the regular file name, checking the owner and mode of what it opened,
// so that what is checked is what is read.
func readDropIn(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read config drop-in: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read config drop-in: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("config drop-in %s is not a regular file (%s): refused", name, st.Mode().Type())
	}
	if err := checkWriters("config drop-in", name, st); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read config drop-in: %w", err)
	}
	return b, nil
}

// checkWriters refuses a file or directory that a user other than root (or the one
// running this) could write: another owner, or group or others' write bit.
func checkWriters(what, name string, st fs.FileInfo) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s %s: its owner cannot be read: refused", what, name)
	}
	if uid := int(sys.Uid); uid != 0 && uid != os.Geteuid() {
		return fmt.Errorf("%s %s is owned by uid %d, not root: refused (its owner could run any binary as root; chown it to root)", what, name, uid)
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s %s has mode %#o, writable by group or others: refused (chmod go-w it)", what, name, perm)
	}
	return nil
}
