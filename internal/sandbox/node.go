package sandbox

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/fsafe/mountpoint"
	"github.com/rtshimd/rtshimd/internal/nsfile"
	"github.com/rtshimd/rtshimd/internal/oci"
)

// Node is what a pod takes of the node itself, apart from its runtime: namespaces pinned
// on files, and the tmpfs mounts of its files and /dev/shm. The daemon uses the node's
// (HostNode, which needs root); the lifecycle unit tests give a fake one, so that the
// manager's steps, failures and recovery run without root.
type Node interface {
	// PinNamespaces creates pod id's namespaces of kinds and pins each so that dir/<kind>
	// names it; in a new user namespace when userns is set.
	PinNamespaces(id, dir string, kinds []nsfile.Kind, hostname string, userns *nsfile.UserNS) error
	// Unpin releases a pinned namespace file; one that is not pinned is not an error.
	Unpin(path string) error
	// IsPinned reports whether a namespace is pinned at path.
	IsPinned(path string) bool
	// MountPodTmpfs mounts the pod's tmpfs at path, with its /dev/shm and its files in
	// it (ShmSub, FilesSub), owned by the pod's root (owner).
	MountPodTmpfs(path string, owner *oci.IDMappings) error
	// Unmount undoes every mount stacked at path; none is not an error.
	Unmount(path string) error
	// TmpfsInHome reports whether a new pod's tmpfs goes in the pin home (a home is open,
	// can lend, and pin_home is on). Tmpfs of pods no record names are released by the
	// home's Collect whatever this says.
	TmpfsInHome() bool
	// MountPodTmpfsInHome mounts pod id's tmpfs, as MountPodTmpfs makes it, in the pin
	// home, and returns the node's path to its root there (through the home's link,
	// which is no mount of the node's).
	MountPodTmpfsInHome(id string, owner *oci.IDMappings) (string, error)
	// LendPodTmpfs mounts a copy of pod id's tmpfs in the home at path on the node;
	// Unmount(path) takes it away.
	LendPodTmpfs(id, path string) error
	// UnmountPodTmpfsInHome undoes MountPodTmpfsInHome; none is not an error.
	UnmountPodTmpfsInHome(id string) error
	// IsLent reports whether a copy of a pod's tmpfs is mounted at path on the node.
	IsLent(path string) bool
}

// host is the Node the manager works on.
func (m *Manager) host() Node {
	if m.opts.Node != nil {
		return m.opts.Node
	}
	return HostNode{}
}

// HostNode is the node the daemon runs on. With a Home, pods' namespaces are pinned in
// it and a pod's ns directory is a symlink to its pins there; without one (or in a user
// namespace, whose holder pins on the node) they are pinned on the node in that
// directory, as pods of earlier releases are.
type HostNode struct {
	Home *nsfile.Home
	// PinOnNode: new pods pin their namespaces, and keep their tmpfs, on the node even
	// with a home open ([mechanisms] pin_home = false); pods already in the home stay.
	PinOnNode bool
}

var _ Node = HostNode{}

func (n HostNode) PinNamespaces(id, dir string, kinds []nsfile.Kind, hostname string, userns *nsfile.UserNS) error {
	if userns != nil {
		_, err := nsfile.PinInUserNS(dir, kinds, hostname, *userns)
		return err
	}
	if n.Home == nil || n.PinOnNode || len(kinds) == 0 {
		_, err := nsfile.Pin(dir, kinds, hostname)
		return err
	}
	if _, err := n.Home.Pin(id, kinds, hostname); err != nil {
		return err
	}
	if err := os.Symlink(n.Home.Dir(id), dir); err != nil {
		for _, k := range kinds {
			_ = n.Home.Unpin(id, k)
		}
		return fmt.Errorf("pin namespaces: link %s: %w", dir, err)
	}
	return nil
}

// Unpin releases the pin at <pod dir>/ns/<kind>: on the node when the ns directory is
// one, else in the home (its link, or none yet: a start cut short between the pins and
// the link).
func (n HostNode) Unpin(path string) error {
	nsDir := filepath.Dir(path)
	fi, err := os.Lstat(nsDir)
	if err == nil && fi.IsDir() {
		return nsfile.Unpin(path)
	}
	if n.Home == nil {
		if err == nil {
			return fmt.Errorf("unpin %s: pinned in the pin home, which is not open", path)
		}
		return nil
	}
	return n.Home.Unpin(filepath.Base(filepath.Dir(nsDir)), nsfile.Kind(filepath.Base(path)))
}

func (HostNode) IsPinned(path string) bool { return nsfile.IsPinned(path) }
func (HostNode) MountPodTmpfs(path string, owner *oci.IDMappings) error {
	return mountPodTmpfs(path, owner)
}
func (HostNode) Unmount(path string) error { return mountpoint.DetachAll(path) }

func (n HostNode) TmpfsInHome() bool { return n.Home != nil && !n.PinOnNode && n.Home.CanLend() }

func (n HostNode) MountPodTmpfsInHome(id string, owner *oci.IDMappings) (string, error) {
	if n.Home == nil {
		return "", fmt.Errorf("pod tmpfs of %s: no pin home", id)
	}
	root, err := n.Home.MountTmpfs(id, podTmpfsFlags, podTmpfsData(owner))
	if err != nil {
		return "", err
	}
	if err := makePodTmpfsDirs(root); err != nil {
		_ = n.Home.UnmountTmpfs(id)
		return "", err
	}
	return root, nil
}

func (n HostNode) LendPodTmpfs(id, path string) error {
	if n.Home == nil {
		return fmt.Errorf("lend pod %s's tmpfs: no pin home", id)
	}
	return n.Home.LendTmpfs(id, path)
}

// IsLent: path is a mount point (its device is not its parent's, the run root's).
func (HostNode) IsLent(path string) bool {
	var st, parent unix.Stat_t
	return unix.Stat(path, &st) == nil && unix.Stat(filepath.Dir(path), &parent) == nil && st.Dev != parent.Dev
}

func (n HostNode) UnmountPodTmpfsInHome(id string) error {
	if n.Home == nil {
		return fmt.Errorf("unmount pod %s's tmpfs: it is in the pin home, which is not open", id)
	}
	return n.Home.UnmountTmpfs(id)
}
