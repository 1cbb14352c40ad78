package container

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/fsafe/mountpoint"
	"github.com/rtshimd/rtshimd/internal/oci"
)

// Where, in its directory, a container of a pod user namespace gets its rootfs and its
// idmapped volume mounts.
// Both live under usernsDir, a guard directory only the pod's root may enter: they are
// mounted in the node's mount namespace, and the container directories above are
// searchable by every user (0711), so without it any local user could read the pod's
// volumes (secrets included) and run the image's setuid programs as the pod's root.
const (
	usernsDir       = "userns"
	usernsRootfsDir = "userns/rootfs"
	idmapDir        = "userns/idmap"
)

// usernsGuard makes dir/userns, 0700 and owned by the pod's root on the node (the first
// mapping's host IDs), which runc 1.1 needs to pass as that user.
func usernsGuard(dir string, uid, gid uint32) error {
	guard := filepath.Join(dir, usernsDir)
	if err := os.Mkdir(guard, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	if err := os.Chown(guard, int(uid), int(gid)); err != nil {
		return err
	}
	return os.Chmod(guard, 0o700)
}

// bindUsernsRootfs bind-mounts the rootfs containers/storage mounted at merged into the
// container's own directory and returns that path. runc 1.1 mounts the rootfs from inside
// the user namespace, as the pod's root, which cannot pass through the store's 0700
// layer directories; the container's directory is reachable (0711 all the way up), and the
// mount's root is the image's, owned by the pod's root. Podman does the same.
func bindUsernsRootfs(dir, merged string, uid, gid uint32) (string, error) {
	if err := usernsGuard(dir, uid, gid); err != nil {
		return "", fmt.Errorf("rootfs for the pod user namespace: %w", err)
	}
	target := filepath.Join(dir, usernsRootfsDir)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return "", fmt.Errorf("rootfs for the pod user namespace: %w", err)
	}
	if err := unix.Mount(merged, target, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("rootfs for the pod user namespace: bind %s at %s: %w", merged, target, err)
	}
	if err := unix.Mount("", target, "", unix.MS_PRIVATE, ""); err != nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return "", fmt.Errorf("rootfs for the pod user namespace: make %s private: %w", target, err)
	}
	return target, nil
}

// idmapMounts gives each CRI mount that asks for ID mappings (kubelet sends the pod's for
// every volume of a hostUsers: false pod) an idmapped clone of its source, through the
// pod's user namespace, and points the spec's bind mount at it: files the node owns as
// the pod's host IDs appear as the container's own. runc 1.1 cannot make idmapped mounts;
// a bind of an idmapped mount keeps its mapping, so the daemon makes the clone and runc
// binds it. The mappings were checked against the pod's by the spec builder.
func idmapMounts(dir, userns string, cfg *runtimeapi.ContainerConfig, spec *specs.Spec) error {
	for i, m := range cfg.GetMounts() {
		// An image volume is mapped by the image store (mountImageVolumes).
		if (len(m.GetUidMappings()) == 0 && len(m.GetGidMappings()) == 0) || oci.IsImageMount(m) {
			continue
		}
		dst := filepath.Clean(m.GetContainerPath())
		idx := slices.IndexFunc(spec.Mounts, func(sm specs.Mount) bool { return sm.Destination == dst && sm.Type == "bind" })
		if idx < 0 {
			return fmt.Errorf("config.mounts[%d]: no bind mount at %s to idmap", i, dst)
		}
		target := filepath.Join(dir, idmapDir, strconv.Itoa(i))
		if err := idmapClone(spec.Mounts[idx].Source, target, userns); err != nil {
			return fmt.Errorf("config.mounts[%d] %q: idmapped mount: %w", i, m.GetHostPath(), err)
		}
		spec.Mounts[idx].Source = target
	}
	return nil
}

// idmapClone mounts a clone of src at target, idmapped through the user namespace at
// userns (open_tree, mount_setattr, move_mount: what runc 1.2 does for "idmap" mounts).
func idmapClone(src, target, userns string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	// Searchable by the pod's root, inside the guard the others cannot pass.
	if err := os.MkdirAll(filepath.Dir(target), 0o711); err != nil {
		return err
	}
	if fi.IsDir() {
		err = os.Mkdir(target, 0o755)
	} else {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			f.Close()
		}
	}
	if err != nil {
		return err
	}
	ns, err := os.Open(userns)
	if err != nil {
		return err
	}
	defer ns.Close()
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("mount_setattr idmap on %s: %w", src, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount to %s: %w", target, err)
	}
	return nil
}

// unmountUsernsMounts undoes bindUsernsRootfs and idmapMounts; nothing there is not an
// error. It must succeed before the container's directory is removed, or the removal
// would reach into the rootfs and the volumes.
func unmountUsernsMounts(dir string) error {
	targets := []string{filepath.Join(dir, usernsRootfsDir)}
	entries, _ := os.ReadDir(filepath.Join(dir, idmapDir))
	for _, e := range entries {
		targets = append(targets, filepath.Join(dir, idmapDir, e.Name()))
	}
	for _, t := range targets {
		if err := mountpoint.DetachAll(t); err != nil {
			return err
		}
	}
	return nil
}
