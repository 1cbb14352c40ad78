// Package cgpath turns a runtime spec's cgroupsPath into the cgroup directory the runtime
// puts the container in, for both cgroup drivers: with cgroupfs the path is the directory;
// with systemd it is "slice:prefix:name", which runc turns into a scope under the slice's
// expanded path (github.com/opencontainers/cgroups, runc's own cgroup code, expands it).
// Spec building writes cgroupsPath with For, and stats, OOM detection and pod stats read
// cgroups through Dir, so both drivers are written and read in one place.
package cgpath

import (
	"fmt"
	"path"
	"strings"

	"github.com/opencontainers/cgroups/systemd"
)

// For is the cgroupsPath of the task id under a pod's cgroup_parent: with cgroupfs the
// directory parent/id (parent "" is /rtshimd); with systemd "slice:rtshimd:id", which runc
// makes the scope rtshimd-<id>.scope in the slice (parent "" is system.slice, runc's own
// default).
func For(systemdDriver bool, parent, id string) string {
	if systemdDriver {
		// kubelet sends the slice's expanded path ("/kubepods.slice/kubepods-burstable.slice/
		// kubepods-burstable-pod<uid>.slice"); runc wants the slice's name, its last element
		// (containerd and CRI-O take the base too).
		parent = path.Base(parent)
		if parent == "" || parent == "." || parent == "/" {
			parent = "system.slice"
		}
		return parent + ":rtshimd:" + id
	}
	if parent == "" {
		parent = "/rtshimd"
	}
	if !strings.HasPrefix(parent, "/") {
		parent = "/" + parent
	}
	return path.Join(parent, id)
}

// Dir is the cgroup directory, relative to a hierarchy's root, of cgroupsPath.
func Dir(cgroupsPath string) (string, error) {
	if cgroupsPath == "" {
		return "", fmt.Errorf("empty cgroupsPath")
	}
	if strings.HasPrefix(cgroupsPath, "/") {
		return path.Clean(cgroupsPath), nil
	}
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("cgroupsPath %q is neither a path nor slice:prefix:name", cgroupsPath)
	}
	slice, prefix, name := parts[0], parts[1], parts[2]
	if slice == "" {
		slice = "system.slice" // runc's default parent
	}
	dir, err := systemd.ExpandSlice(slice)
	if err != nil {
		return "", fmt.Errorf("cgroupsPath %q: %w", cgroupsPath, err)
	}
	unit := name // a name ending in .slice is a slice of its own, as runc makes it
	if !strings.HasSuffix(name, ".slice") {
		unit = prefix + "-" + name + ".scope"
		if prefix == "" {
			unit = name + ".scope"
		}
	}
	return path.Join(dir, unit), nil
}

// Parent is the directory of a pod's cgroup_parent: a path with cgroupfs, a slice name
// (kubelet's "kubepods-burstable-pod<uid>.slice") with systemd.
func Parent(systemdDriver bool, parent string) (string, error) {
	if !systemdDriver || strings.HasPrefix(parent, "/") {
		if !strings.HasPrefix(parent, "/") {
			parent = "/" + parent
		}
		return path.Clean(parent), nil
	}
	return systemd.ExpandSlice(parent)
}
