package sandbox

import (
	"github.com/rtshimd/rtshimd/internal/fsafe/mountpoint"
	"github.com/rtshimd/rtshimd/internal/nsfile"
	"github.com/rtshimd/rtshimd/internal/oci"
)

// Node is what a pod takes of the node itself, apart from its runtime: namespaces pinned
// on files, and the tmpfs mounts of its files and /dev/shm. The daemon uses the node's
// (HostNode, which needs root); the lifecycle unit tests give a fake one, so that the
// manager's steps, failures and recovery run without root.
type Node interface {
	// PinNamespaces creates the namespaces of kinds and pins each on a file in dir; in a
	// new user namespace when userns is set.
	PinNamespaces(dir string, kinds []nsfile.Kind, hostname string, userns *nsfile.UserNS) error
	// Unpin releases a pinned namespace file; one that is not pinned is not an error.
	Unpin(path string) error
	// IsPinned reports whether a namespace is pinned at path.
	IsPinned(path string) bool
	// MountFiles mounts the tmpfs the pod files live on at path.
	MountFiles(path string) error
	// MountShm mounts the pod's /dev/shm at path, owned by the pod's root (owner).
	MountShm(path string, owner *oci.IDMappings) error
	// Unmount undoes every mount stacked at path; none is not an error.
	Unmount(path string) error
}

// host is the Node the manager works on.
func (m *Manager) host() Node {
	if m.opts.Node != nil {
		return m.opts.Node
	}
	return HostNode{}
}

// HostNode is the node the daemon runs on.
type HostNode struct{}

var _ Node = HostNode{}

func (HostNode) PinNamespaces(dir string, kinds []nsfile.Kind, hostname string, userns *nsfile.UserNS) error {
	var err error
	if userns == nil {
		_, err = nsfile.Pin(dir, kinds, hostname)
	} else {
		_, err = nsfile.PinInUserNS(dir, kinds, hostname, *userns)
	}
	return err
}

func (HostNode) Unpin(path string) error                           { return nsfile.Unpin(path) }
func (HostNode) IsPinned(path string) bool                         { return nsfile.IsPinned(path) }
func (HostNode) MountFiles(path string) error                      { return mountFiles(path) }
func (HostNode) MountShm(path string, owner *oci.IDMappings) error { return mountShm(path, owner) }
func (HostNode) Unmount(path string) error                         { return mountpoint.DetachAll(path) }
