package container_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/container/containertest"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/kind/kindtest"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
)

// The lifecycle tests drive the container manager, with a real sandbox manager, through a
// fake runtime (kindtest), a fake node (sandboxtest) and fake images, on real stores
// (containertest): create, start, stop, remove, exits, failures at each step and
// recovery, without root.

// Create, start, stop and remove a container, and one that exits on its own, in a pod of
// each shape; removing the pod leaves nothing.
func TestContainerLifecycle(t *testing.T) {
	for name, plan := range sandboxtest.Plans {
		t.Run(name, func(t *testing.T) {
			e := containertest.NewEnv(t, plan)
			sbs, m := e.Managers()
			ctx := context.Background()
			podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
			if err != nil {
				t.Fatal(err)
			}
			id, err := m.Create(ctx, podID, containertest.CtrConfig("app", "busybox"))
			if err != nil {
				t.Fatal(err)
			}
			st := containertest.CtrState(t, m, id)
			if st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.Image.GetImage() != "busybox:latest" || st.ImageRef != containertest.BusyboxID {
				t.Errorf("created: %v %v %v", st.State, st.Image, st.ImageRef)
			}
			spec, err := oci.ReadBundle(filepath.Join(e.Dir, "run", "containers", id))
			if err != nil || spec.Process == nil || len(spec.Process.Args) != 2 || spec.Process.Args[0] != "sleep" {
				t.Errorf("bundle: %v %+v", err, spec)
			}
			if _, err := os.Stat(st.LogPath); err != nil {
				t.Errorf("log file: %v", err)
			}
			// The runc family's rootfs leaves the node's mount table once created; a
			// sandboxing runtime's stays (its gofer or shim reads it later).
			if got := e.Images.Detached(id); got != plan.DetachRootfs {
				t.Errorf("rootfs detached after create: %v, want %v", got, plan.DetachRootfs)
			}
			if _, err := m.Create(ctx, podID, containertest.CtrConfig("app", "busybox")); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("second container of the name: %v", err)
			}
			if err := m.Start(ctx, id); err != nil {
				t.Fatal(err)
			}
			if st := containertest.CtrState(t, m, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || e.RT.State(id) != kind.TaskRunning {
				t.Errorf("started: %v, runtime %q", st.State, e.RT.State(id))
			}
			if err := m.Start(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("second start: %v", err)
			}
			if err := m.Stop(ctx, id, 10); err != nil {
				t.Fatal(err)
			}
			if st := containertest.CtrState(t, m, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 143 {
				t.Errorf("stopped: %v code %d, want exited 143 (SIGTERM)", st.State, st.ExitCode)
			}

			// One that ends on its own.
			other, err := m.Create(ctx, podID, containertest.CtrConfig("job", "busybox"))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Start(ctx, other); err != nil {
				t.Fatal(err)
			}
			e.RT.Exit(other, 3)
			sandboxtest.Await(t, "the job's exit", func() bool {
				return containertest.CtrState(t, m, other).State == runtimeapi.ContainerState_CONTAINER_EXITED
			})
			if st := containertest.CtrState(t, m, other); st.ExitCode != 3 || st.FinishedAt < st.StartedAt {
				t.Errorf("job: code %d, started %d finished %d", st.ExitCode, st.StartedAt, st.FinishedAt)
			}

			if err := m.Remove(ctx, id); err != nil {
				t.Fatal(err)
			}
			if e.RT.State(id) != "" {
				t.Errorf("removed container still in the runtime: %q", e.RT.State(id))
			}
			if _, err := m.Get(id); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("removed container: %v", err)
			}
			// The pod's removal takes its remaining container with it.
			if err := sbs.Remove(ctx, podID, m); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Get(other); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("container of the removed pod: %v", err)
			}
			e.Clean(t)
		})
	}
}

// A create that fails at any step leaves nothing behind and frees the name.
func TestContainerCreateFailsAtEachStep(t *testing.T) {
	for _, c := range []struct {
		step  string
		image string
		want  error
		setup func(e *containertest.Env)
	}{
		{"image not pulled", "missing", errdefs.ErrNotFound, func(*containertest.Env) {}},
		{"rootfs", "busybox", containertest.ErrImagesInjected, func(e *containertest.Env) { e.Images.Fail("rootfs", 1) }},
		{"runtime create", "busybox", kindtest.ErrInjected, func(e *containertest.Env) { e.RT.FailNext("create", 1) }},
	} {
		t.Run(c.step, func(t *testing.T) {
			e := containertest.NewEnv(t, sandboxtest.Plans["namespaces"])
			sbs, m := e.Managers()
			ctx := context.Background()
			podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
			if err != nil {
				t.Fatal(err)
			}
			c.setup(e)
			if _, err := m.Create(ctx, podID, containertest.CtrConfig("app", c.image)); !errors.Is(err, c.want) {
				t.Fatalf("create: %v, want %v", err, c.want)
			}
			if ctrs := m.List(nil); len(ctrs) > 0 {
				t.Errorf("failed container listed: %v", ctrs)
			}
			if _, err := m.Create(ctx, podID, containertest.CtrConfig("app", "busybox")); err != nil {
				t.Errorf("create again: %v", err)
			}
			if err := sbs.Remove(ctx, podID, m); err != nil {
				t.Fatal(err)
			}
			e.Clean(t)
		})
	}
}

// A start the runtime refuses leaves the container created; a removal whose rootfs
// cannot be removed keeps the container and its record for a retry.
func TestContainerStartAndRemoveFail(t *testing.T) {
	e := containertest.NewEnv(t, sandboxtest.Plans["sandboxed"])
	sbs, m := e.Managers()
	ctx := context.Background()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := m.Create(ctx, podID, containertest.CtrConfig("app", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	e.RT.FailNext("start", 1)
	if err := m.Start(ctx, id); !errors.Is(err, kindtest.ErrInjected) {
		t.Fatalf("start: %v", err)
	}
	if st := containertest.CtrState(t, m, id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("after a refused start: %v", st.State)
	}
	e.Images.Fail("remove-rootfs", 1)
	if err := m.Remove(ctx, id); !errors.Is(err, containertest.ErrImagesInjected) {
		t.Fatalf("remove: %v", err)
	}
	if _, err := m.Get(id); err != nil {
		t.Errorf("container gone after a failed removal: %v", err)
	}
	if ids := sandboxtest.Records(t, e.CtrStore); len(ids) != 1 {
		t.Errorf("records after a failed removal: %v", ids)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := sbs.Remove(ctx, podID, m); err != nil {
		t.Fatal(err)
	}
	e.Clean(t)
}

// After a kill -9 the next daemon finds every container as recorded, with the exit of
// one that ended while it was down, and follows the running ones again.
// createAndStart creates a busybox container of each name in pod podID and starts all
// but the one named "created"; it returns their IDs by name.
func createAndStart(t *testing.T, m *container.Manager, podID string, names ...string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, n := range names {
		id, err := m.Create(context.Background(), podID, containertest.CtrConfig(n, "busybox"))
		if err != nil {
			t.Fatal(err)
		}
		ids[n] = id
		if n != "created" {
			if err := m.Start(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

// After a reboot (the daemon's boot record says another boot) nothing of the records'
// containers runs: running and created ones are exited at once, before anything asks,
// with containerd's code for a lost task and the boot's time; an exited one keeps its own.
func TestContainersEndedByReboot(t *testing.T) {
	plan := sandboxtest.Plans["namespaces"]
	e := containertest.NewEnv(t, plan)
	sbs, m := e.Managers()
	ctx := context.Background()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	ids := createAndStart(t, m, podID, "running", "created", "exited")
	e.RT.Exit(ids["exited"], 3)
	sandboxtest.Await(t, "the exit", func() bool {
		return containertest.CtrState(t, m, ids["exited"]).State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	m.Close()
	sbs.Close()

	booted := time.Now().Add(-time.Minute).Truncate(time.Second)
	e.Options = func(o *container.Options) { o.RebootedAt = booted }
	sbs2, m2 := e.Managers()
	for n, want := range map[string]struct {
		code   int32
		reason string
	}{"running": {255, "Unknown"}, "created": {255, "Unknown"}, "exited": {3, "Error"}} {
		st := containertest.CtrState(t, m2, ids[n])
		if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != want.code || st.Reason != want.reason {
			t.Errorf("%s after a reboot: %v exit %d %q, want EXITED %d %q", n, st.State, st.ExitCode, st.Reason, want.code, want.reason)
		}
		if n != "exited" && st.FinishedAt != booted.UnixNano() {
			t.Errorf("%s finished at %v, want the boot's time %v", n, time.Unix(0, st.FinishedAt), booted)
		}
	}
	if err := sbs2.Remove(ctx, podID, m2); err != nil {
		t.Fatal(err)
	}
	e.Clean(t)
}

func TestContainerRecovery(t *testing.T) {
	for name, plan := range sandboxtest.Plans {
		t.Run(name, func(t *testing.T) {
			e := containertest.NewEnv(t, plan)
			sbs, m := e.Managers()
			ctx := context.Background()
			podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
			if err != nil {
				t.Fatal(err)
			}
			ids := createAndStart(t, m, podID, "running", "created", "ends-while-down", "ends-after")
			m.Close() // the daemon is killed
			sbs.Close()
			e.RT.Exit(ids["ends-while-down"], 7)

			sbs2, m2 := e.Managers()
			// The exit that came while the daemon was down is recorded by the watcher
			// recovery starts, as soon as it asks the runtime.
			sandboxtest.Await(t, "the exit that came while the daemon was down", func() bool {
				st := containertest.CtrState(t, m2, ids["ends-while-down"])
				return st.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.ExitCode == 7
			})
			for n, want := range map[string]runtimeapi.ContainerState{
				"running": runtimeapi.ContainerState_CONTAINER_RUNNING, "created": runtimeapi.ContainerState_CONTAINER_CREATED,
				"ends-after": runtimeapi.ContainerState_CONTAINER_RUNNING,
			} {
				if st := containertest.CtrState(t, m2, ids[n]); st.State != want {
					t.Errorf("%s after restart: %v, want %v", n, st.State, want)
				}
			}
			e.RT.Exit(ids["ends-after"], 4)
			sandboxtest.Await(t, "the exit after the restart", func() bool {
				st := containertest.CtrState(t, m2, ids["ends-after"])
				return st.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.ExitCode == 4
			})
			if _, err := m2.Create(ctx, podID, containertest.CtrConfig("running", "busybox")); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("a recovered container's name is free: %v", err)
			}
			if err := sbs2.Remove(ctx, podID, m2); err != nil {
				t.Fatal(err)
			}
			e.Clean(t)
		})
	}
}

// hookNRI is an NRI whose plugin adds a poststart hook to every container.
type hookNRI struct{}

func (hookNRI) CreateContainer(_ context.Context, _ *container.Container, spec *specs.Spec) (bool, error) {
	spec.Hooks = &specs.Hooks{Poststart: []specs.Hook{{Path: "/bin/true"}}}
	return true, nil
}
func (hookNRI) PostCreateContainer(context.Context, *container.Container)  {}
func (hookNRI) StartContainer(context.Context, *container.Container) error { return nil }
func (hookNRI) PostStartContainer(context.Context, *container.Container)   {}
func (hookNRI) PostUpdateContainer(context.Context, *container.Container)  {}
func (hookNRI) StopContainer(context.Context, *container.Container)        {}
func (hookNRI) RemoveContainer(context.Context, *container.Container)      {}
func (hookNRI) BlockSync() func()                                          { return func() {} }
func (hookNRI) UpdateContainer(_ context.Context, _ *container.Container, res *specs.LinuxResources) (*specs.LinuxResources, error) {
	return res, nil
}

// A container whose spec has hooks that run on the node after the create keeps its
// rootfs mounted there: a poststart or poststop hook may read it by its path.
func TestRootfsKeptForHostHooks(t *testing.T) {
	e := containertest.NewEnv(t, sandboxtest.Plans["namespaces"])
	e.Node.HomeDir = t.TempDir()
	e.Options = func(o *container.Options) { o.NRI = hookNRI{} }
	sbs, m := e.Managers()
	ctx := context.Background()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := m.Create(ctx, podID, containertest.CtrConfig("app", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Images.Detached(id) {
		t.Error("rootfs detached from the node though a poststart hook may read it there")
	}
	// So are the pod files: the copy of the pod's tmpfs lent for the create stays.
	sb, err := sbs.Get(podID)
	if err != nil {
		t.Fatal(err)
	}
	if !sb.TmpfsHome || !e.Node.Lent(sb.Tmpfs) {
		t.Errorf("pod tmpfs in the home %v, lent to the node after the create %v; want both", sb.TmpfsHome, e.Node.Lent(sb.Tmpfs))
	}
	if err := sbs.Remove(ctx, podID, m); err != nil {
		t.Fatal(err)
	}
	e.Clean(t)
}

// lendCheck is the runtime with a look at the node while it creates a container.
type lendCheck struct {
	kind.Runtime
	during func()
}

func (l lendCheck) Create(ctx context.Context, t kind.Task) (kind.Created, error) {
	l.during()
	return l.Runtime.Create(ctx, t)
}

// A pod's tmpfs in the pin home is lent to the node while a runtime creates a container,
// and taken back after it; a lend that fails fails the create and leaves nothing; the
// pod's removal leaves nothing in the home. Without a home the tmpfs is the node's.
func TestPodTmpfsLent(t *testing.T) {
	for _, home := range []bool{true, false} {
		e := containertest.NewEnv(t, sandboxtest.Plans["namespaces"])
		if home {
			e.Node.HomeDir = t.TempDir()
		}
		var tmpfs string
		var lentDuring []bool
		e.Kind = lendCheck{Runtime: e.RT, during: func() { lentDuring = append(lentDuring, e.Node.Lent(tmpfs)) }}
		sbs, m := e.Managers()
		ctx := context.Background()
		podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
		if err != nil {
			t.Fatal(err)
		}
		sb, err := sbs.Get(podID)
		if err != nil {
			t.Fatal(err)
		}
		if sb.TmpfsHome != home {
			t.Errorf("home %v: pod tmpfs in the home %v", home, sb.TmpfsHome)
		}
		tmpfs = sb.Tmpfs
		for _, name := range []string{"a", "b"} {
			if _, err := m.Create(ctx, podID, containertest.CtrConfig(name, "busybox")); err != nil {
				t.Fatal(err)
			}
			if lent := e.Node.Lent(tmpfs); lent != !home { // the node's own mount, without a home
				t.Errorf("home %v: after %s's create the pod tmpfs is on the node: %v", home, name, lent)
			}
		}
		if !slices.Equal(lentDuring, []bool{true, true}) {
			t.Errorf("home %v: the pod tmpfs on the node during the runtime's creates: %v, want it there each time", home, lentDuring)
		}
		if home {
			e.Node.FailNext("lend", 1)
			if _, err := m.Create(ctx, podID, containertest.CtrConfig("c", "busybox")); !errors.Is(err, sandboxtest.ErrInjected) {
				t.Errorf("create with a lend that fails: %v, want the lend's error", err)
			}
			if ctrs := m.List(nil); len(ctrs) != 2 {
				t.Errorf("containers after a failed lend: %d, want the two made before", len(ctrs))
			}
		}
		if err := sbs.Remove(ctx, podID, m); err != nil {
			t.Fatal(err)
		}
		e.Clean(t)
	}
}

// A copy of a pod's tmpfs found on the node after a restart (lent for a container whose
// hooks run on the node, or left by a crash during a create) stays there until the pod's
// removal: a later create neither stacks another on it nor takes it away.
func TestPodTmpfsLentKeptOverRestart(t *testing.T) {
	e := containertest.NewEnv(t, sandboxtest.Plans["namespaces"])
	e.Node.HomeDir = t.TempDir()
	sbs, _ := e.Managers()
	ctx := context.Background()
	podID, _, err := sbs.Run(ctx, e.PodConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sbs.Get(podID)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Node.LendPodTmpfs(podID, sb.Tmpfs); err != nil {
		t.Fatal(err)
	}
	sbs2, m2 := e.Managers()
	if _, err := m2.Create(ctx, podID, containertest.CtrConfig("app", "busybox")); err != nil {
		t.Fatal(err)
	}
	if !e.Node.Lent(sb.Tmpfs) {
		t.Error("the copy lent before the restart was taken off the node by a later create")
	}
	if err := sbs2.Remove(ctx, podID, m2); err != nil {
		t.Fatal(err)
	}
	e.Clean(t)
}
