package container

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/oci"
)

// checkPropagation refuses a mount whose propagation cannot happen, instead of running a
// container whose mounts silently do not propagate: BIDIRECTIONAL on a runtime that cannot
// carry a container's mounts back to the node (gVisor), and a host path on a node mount
// that does not propagate: BIDIRECTIONAL needs a shared one, HOST_TO_CONTAINER a shared or
// slave one. containerd and CRI-O refuse the same (their ensureShared and
// ensureSharedOrSlave). kubelet makes its root directory rshared, so its volumes pass; a
// hostPath on a private mount does not. It runs before anything is made for the container;
// a host path not made yet is judged by the mount of its nearest existing parent, where
// ContainerSpec will make it. Host paths ContainerSpec refuses are left to it.
func checkPropagation(cfg *runtimeapi.ContainerConfig, rt kind.Runtime, handler string) error {
	for i, mnt := range cfg.GetMounts() {
		p := mnt.GetPropagation()
		if p == runtimeapi.MountPropagation_PROPAGATION_PRIVATE || oci.IsImageMount(mnt) || !filepath.IsAbs(mnt.GetHostPath()) {
			continue
		}
		field := fmt.Sprintf("config.mounts[%d].propagation %s", i, strings.TrimPrefix(p.String(), "PROPAGATION_"))
		if p == runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL && !rt.Plan().MountsToNode {
			return fmt.Errorf("%s: runtime handler %q (%s) cannot propagate a container's mounts to the node: use HOST_TO_CONTAINER or another RuntimeClass: %w",
				field, handler, rt.Type(), errdefs.ErrFailedPrecondition)
		}
		src, err := existingPath(mnt.GetHostPath())
		if err != nil {
			return fmt.Errorf("%s: host_path %q: %w", field, mnt.GetHostPath(), err)
		}
		infos, err := mountinfo.GetMounts(mountinfo.ParentsFilter(src))
		if err != nil {
			return fmt.Errorf("%s: read the node's mounts: %w", field, err)
		}
		at, optional := mountOf(infos, src)
		shared, slave := hasTag(optional, "shared:"), hasTag(optional, "master:")
		switch {
		case p == runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL && !shared:
			return fmt.Errorf("%s: host_path %q is on the node's mount %s, which is not shared, so no mount would reach the node (make it shared, as kubelet does its root directory): %w",
				field, mnt.GetHostPath(), at, errdefs.ErrFailedPrecondition)
		case p == runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER && !shared && !slave:
			return fmt.Errorf("%s: host_path %q is on the node's mount %s, which is neither shared nor slave, so no mount would reach the container (make it shared): %w",
				field, mnt.GetHostPath(), at, errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// existingPath is path with its symlinks resolved, or, where it does not exist yet, its
// nearest existing parent's.
func existingPath(path string) (string, error) {
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		r, err := filepath.EvalSymlinks(p)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || p == "/" {
			return r, err
		}
	}
}

// mountOf is the mount point holding path and its optional fields: the deepest mount
// point above it, and of those stacked there the last mounted. (ParentsFilter compares
// bare prefixes: /var/lib/kube passes it for /var/lib/kubelet/x.)
func mountOf(infos []*mountinfo.Info, path string) (at, optional string) {
	for _, in := range infos {
		mp := in.Mountpoint
		if (mp == "/" || path == mp || strings.HasPrefix(path, mp+"/")) && len(mp) >= len(at) {
			at, optional = mp, in.Optional
		}
	}
	return at, optional
}

func hasTag(optional, prefix string) bool {
	for _, f := range strings.Fields(optional) {
		if strings.HasPrefix(f, prefix) {
			return true
		}
	}
	return false
}
