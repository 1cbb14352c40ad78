package oci

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var errNotDevice = errors.New("not a device node")

// deviceFromPath describes the device node at path (not following a final symlink): type
// c or b, major/minor, permission bits and owner.
func deviceFromPath(path string) (specs.LinuxDevice, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return specs.LinuxDevice{}, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return specs.LinuxDevice{}, errNotDevice
	}
	mode := os.FileMode(st.Mode &^ unix.S_IFMT)
	uid, gid := st.Uid, st.Gid
	rdev := uint64(st.Rdev) //nolint:unconvert // 32 bits on some platforms
	return specs.LinuxDevice{
		Path:     path,
		Type:     typ,
		Major:    int64(unix.Major(rdev)),
		Minor:    int64(unix.Minor(rdev)),
		FileMode: &mode,
		UID:      &uid,
		GID:      &gid,
	}, nil
}

// devicesUnder lists the device nodes under dir (as containerd's HostDevices does: no
// symlinks followed, pts/shm/fd/mqueue and the console skipped), renamed from under dir to
// under containerDir.
func devicesUnder(dir, containerDir string) ([]specs.LinuxDevice, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []specs.LinuxDevice
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		cp := filepath.Join(containerDir, e.Name())
		switch {
		case e.IsDir():
			switch e.Name() {
			case "pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev":
				continue
			}
			sub, err := devicesUnder(p, cp)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return nil, err
			}
			out = append(out, sub...)
		case e.Name() == "console":
		default:
			d, err := deviceFromPath(p)
			if err != nil {
				if errors.Is(err, errNotDevice) || errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return nil, err
			}
			d.Path = cp
			out = append(out, d)
		}
	}
	return out, nil
}

// defaultDeviceRules are the device cgroup rules of an unprivileged container: deny all, then
// allow mknod of any node and use of the devices every container has (null, zero, full,
// random, urandom, tty, ptmx, the pts). runc and crun add these themselves; listing them
// keeps the spec complete for every runtime.
func defaultDeviceRules() []specs.LinuxDeviceCgroup {
	rule := func(typ string, major, minor int64, access string) specs.LinuxDeviceCgroup {
		r := specs.LinuxDeviceCgroup{Allow: true, Type: typ, Access: access}
		if major >= 0 {
			r.Major = &major
		}
		if minor >= 0 {
			r.Minor = &minor
		}
		return r
	}
	return []specs.LinuxDeviceCgroup{
		{Allow: false, Access: "rwm"},
		rule("c", -1, -1, "m"),    // mknod of any char device
		rule("b", -1, -1, "m"),    // and block device
		rule("c", 1, 3, "rwm"),    // /dev/null
		rule("c", 1, 5, "rwm"),    // /dev/zero
		rule("c", 1, 7, "rwm"),    // /dev/full
		rule("c", 1, 8, "rwm"),    // /dev/random
		rule("c", 1, 9, "rwm"),    // /dev/urandom
		rule("c", 5, 0, "rwm"),    // /dev/tty
		rule("c", 5, 2, "rwm"),    // /dev/ptmx
		rule("c", 136, -1, "rwm"), // /dev/pts/*
	}
}

// configDevices turns config.devices into spec devices and their cgroup allow rules. A host
// path that is a directory gives every device under it.
func configDevices(config *runtimeapi.ContainerConfig) ([]specs.LinuxDevice, []specs.LinuxDeviceCgroup, error) {
	var (
		devs  []specs.LinuxDevice
		rules []specs.LinuxDeviceCgroup
	)
	for i, d := range config.GetDevices() {
		if d == nil {
			return nil, nil, invalidf("config.devices[%d] is empty", i)
		}
		perms := d.GetPermissions()
		if perms == "" {
			perms = "rwm"
		}
		if strings.Trim(perms, "rwm") != "" {
			return nil, nil, invalidf("config.devices[%d].permissions %q is not a combination of r, w and m", i, d.GetPermissions())
		}
		cpath := d.GetContainerPath()
		if cpath == "" {
			cpath = d.GetHostPath()
		}
		if !filepath.IsAbs(cpath) {
			return nil, nil, invalidf("config.devices[%d].container_path %q is not an absolute path", i, d.GetContainerPath())
		}
		if d.GetHostPath() == "" {
			return nil, nil, invalidf("config.devices[%d].host_path is empty", i)
		}
		host, err := filepath.EvalSymlinks(d.GetHostPath())
		if err != nil {
			return nil, nil, invalidf("config.devices[%d].host_path %q: %s", i, d.GetHostPath(), errText(err))
		}
		var found []specs.LinuxDevice
		if st, err := os.Stat(host); err == nil && st.IsDir() {
			if found, err = devicesUnder(host, filepath.Clean(cpath)); err != nil {
				return nil, nil, invalidf("config.devices[%d].host_path %q: %s", i, d.GetHostPath(), errText(err))
			}
		} else {
			dev, err := deviceFromPath(host)
			if err != nil {
				return nil, nil, invalidf("config.devices[%d].host_path %q: %s", i, d.GetHostPath(), errText(err))
			}
			dev.Path = filepath.Clean(cpath)
			found = []specs.LinuxDevice{dev}
		}
		for _, dev := range found {
			major, minor := dev.Major, dev.Minor
			devs = append(devs, dev)
			rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: dev.Type, Major: &major, Minor: &minor, Access: perms})
		}
	}
	return devs, rules, nil
}
