// Package podcgroup sets the limits of a pod's cgroup (the PodSandboxConfig's
// cgroup_parent, which holds every container of the pod whatever the runtime): the pod's
// limits plus its handler's overhead. kubelet makes that cgroup and sets the same values
// when its RuntimeClass declares the overhead; rtshimd sets them too, so that a handler's
// overhead counts where kubelet does not know it and for clients that are not kubelet.
// Only the cgroupfs driver: under systemd the pod's slice belongs to systemd.
package podcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Root is where the cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// Exists reports whether the cgroup at path (relative to the hierarchy) is there: on
// v1, in the memory hierarchy.
func Exists(path string) bool {
	dir := filepath.Join(Root, path)
	if cgroups.Mode() != cgroups.Unified {
		dir = filepath.Join(Root, "memory", path)
	}
	_, err := os.Stat(dir)
	return err == nil
}

// Apply sets res on the cgroup at path, creating it where it is absent; created says
// whether it did (then Remove deletes it with the pod).
func Apply(path string, res *specs.LinuxResources) (created bool, err error) {
	created = !Exists(path)
	if cgroups.Mode() == cgroups.Unified {
		_, err = cgroup2.NewManager(Root, path, cgroup2.ToResources(res))
	} else if created {
		_, err = cgroup1.New(cgroup1.StaticPath(path), res)
	} else {
		var cg cgroup1.Cgroup
		if cg, err = cgroup1.Load(cgroup1.StaticPath(path)); err == nil {
			err = cg.Update(res)
		}
	}
	if err != nil {
		return created, fmt.Errorf("pod cgroup %s: %w", path, err)
	}
	return created, nil
}

// Remove deletes the cgroup at path (Apply created it); one already gone is no error.
func Remove(path string) error {
	var err error
	if cgroups.Mode() == cgroups.Unified {
		var m *cgroup2.Manager
		if m, err = cgroup2.Load(path); err == nil {
			err = m.Delete()
		}
	} else {
		var cg cgroup1.Cgroup
		if cg, err = cgroup1.Load(cgroup1.StaticPath(path)); err == nil {
			err = cg.Delete()
		}
		if errors.Is(err, cgroup1.ErrCgroupDeleted) {
			err = nil
		}
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove pod cgroup %s: %w", path, err)
	}
	return nil
}
