//go:build integration

package integration

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// propagationDir is a directory that is a mount of its own with the given propagation
// ("shared" or "private"), whatever the node's / is; unmounted with all below it at the end.
func propagationDir(t *testing.T, mode string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("sh", "-c", "mount --bind "+dir+" "+dir+" && mount --make-"+mode+" "+dir).CombinedOutput(); err != nil {
		t.Fatalf("make %s a %s mount: %v: %s", dir, mode, err, out)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestMountPropagation: mount propagation as kubelet's mountPropagation asks it, on runc.
// Bidirectional: a mount the container makes reaches the node; HostToContainer: a mount
// the node makes reaches the container. A host path on a node mount that would not carry
// them (private) is refused naming the field and the mount, as containerd and CRI-O refuse
// it, instead of a container whose mounts silently stay apart; so is Bidirectional on runsc,
// whose mounts live in gVisor's kernel (runsc itself fails late with "root mount
// propagation option must specify private or slave").
func TestMountPropagation(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	pod := func(name, handler string) (string, *runtimeapi.PodSandboxConfig) {
		cfg := podConfig(name, runtimeapi.NamespaceMode_CONTAINER)
		cfg.Linux.SecurityContext.Privileged = true
		return e.podWith(cfg, handler)
	}
	ctr := func(name, dir string, p runtimeapi.MountPropagation) *runtimeapi.ContainerConfig {
		c := e.ctrConfig(name, "sleep", "1000")
		c.Linux.SecurityContext.Privileged = true
		c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", HostPath: dir, Propagation: p}}
		return c
	}
	refused := func(what, podID string, pod *runtimeapi.PodSandboxConfig, c *runtimeapi.ContainerConfig, want ...string) {
		t.Helper()
		_, err := e.d.RS.CreateContainer(ctx, podID, c, pod)
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s: CreateContainer = %v, want FailedPrecondition", what, err)
			return
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to name %q", what, err, w)
			}
		}
	}

	runcPod, runcCfg := pod("propagation-runc", "runc")
	shared, private := propagationDir(t, "shared"), propagationDir(t, "private")

	bidir := e.run(runcPod, runcCfg, ctr("bidirectional", shared, runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL))
	if out, _ := e.exec(bidir, "sh", "-c", "mkdir -p /vol/from-ctr && mount -t tmpfs ctr /vol/from-ctr && echo mounted"); out != "mounted" {
		t.Fatalf("mount in the container: %q", out)
	}
	t.Cleanup(func() { _ = unix.Unmount(shared+"/from-ctr", unix.MNT_DETACH) })
	if !slices.Contains(mountsUnder(shared+"/from-ctr"), shared+"/from-ctr") {
		t.Errorf("the container's mount at /vol/from-ctr did not reach the node at %s/from-ctr", shared)
	}

	h2c := e.run(runcPod, runcCfg, ctr("host-to-container", shared, runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER))
	if err := os.Mkdir(shared+"/from-node", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("node", shared+"/from-node", "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(shared+"/from-node", unix.MNT_DETACH) })
	waitFor(t, 10*time.Second, "the node's mount in the container", func() (bool, string) {
		out, _ := e.exec(h2c, "grep", "-c", " /vol/from-node ", "/proc/self/mountinfo")
		return out == "1", out
	})

	refused("Bidirectional on a private mount", runcPod, runcCfg, ctr("bidir-private", private, runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL),
		"config.mounts[0].propagation BIDIRECTIONAL", private, "not shared")
	// Refused before anything is made: a host path not there yet is judged by its parent's
	// mount, and not made.
	refused("Bidirectional below a private mount, not made yet", runcPod, runcCfg, ctr("bidir-new", private+"/new", runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL),
		"config.mounts[0].propagation BIDIRECTIONAL", private+"/new", private, "not shared")
	if _, err := os.Stat(private + "/new"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused create made its host path %s/new: %v", private, err)
	}
	refused("HostToContainer on a private mount", runcPod, runcCfg, ctr("h2c-private", private, runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER),
		"config.mounts[0].propagation HOST_TO_CONTAINER", private, "neither shared nor slave")

	runscPod, runscCfg := pod("propagation-runsc", "runsc")
	refused("Bidirectional on runsc", runscPod, runscCfg, ctr("bidir-runsc", shared, runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL),
		"config.mounts[0].propagation BIDIRECTIONAL", `"runsc"`, "cannot propagate a container's mounts to the node")
	e.run(runscPod, runscCfg, ctr("h2c-runsc", shared, runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER))

	e.removePod(runcPod)
	e.removePod(runscPod)
}
