package container

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/oci"
)

// checkPropagation refuses a mount whose propagation cannot happen, instead of running a
// container whose mounts silently do not propagate: BIDIRECTIONAL on a runtime that cannot
// carry a container's mounts back to the node (gVisor), and a host path on a node mount
// that does not propagate: BIDIRECTIONAL needs a shared one, HOST_TO_CONTAINER a shared or
// slave one. containerd and CRI-O refuse the same (their ensureShared and
// ensureSharedOrSlave). kubelet makes its root directory rshared, so its volumes pass; a
// hostPath on a private mount does not. Host paths exist by now (ContainerSpec made them).
func (m *Manager) checkPropagation(c *Container) error {
	var infos []*mountinfo.Info
	for i, mnt := range c.config.GetMounts() {
		p := mnt.GetPropagation()
		if p == runtimeapi.MountPropagation_PROPAGATION_PRIVATE || oci.IsImageMount(mnt) {
			continue
		}
		field := fmt.Sprintf("config.mounts[%d].propagation %s", i, strings.TrimPrefix(p.String(), "PROPAGATION_"))
		if p == runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL && !c.rt.Plan().MountsToNode {
			return fmt.Errorf("%s: runtime handler %q (%s) cannot propagate a container's mounts to the node: use HOST_TO_CONTAINER or another RuntimeClass: %w",
				field, c.Handler, c.rt.Type(), errdefs.ErrFailedPrecondition)
		}
		src, err := filepath.EvalSymlinks(mnt.GetHostPath())
		if err != nil {
			return fmt.Errorf("%s: host_path %q: %w", field, mnt.GetHostPath(), err)
		}
		if infos == nil {
			if infos, err = mountinfo.GetMounts(nil); err != nil {
				return fmt.Errorf("%s: read the node's mounts: %w", field, err)
			}
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

// mountOf is the mount point holding path and its optional fields: the deepest mount
// point above it, and of those stacked there the last mounted.
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
