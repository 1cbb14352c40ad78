package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/kind/kindtest"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
	"github.com/rtshimd/rtshimd/internal/store"
)

// The lifecycle tests drive the container manager, with a real sandbox manager, through a
// fake runtime (kindtest), a fake node (sandboxtest) and fake images, on real stores:
// create, start, stop, remove, exits, failures at each step and recovery, without root.

// ErrImagesInjected is what a failure of fakeImages wraps.
var errImagesInjected = errors.New("fake images: injected failure")

// fakeImages is the image service: one image, "busybox", whose container rootfs are plain
// directories.
type fakeImages struct {
	dir    string
	mu     sync.Mutex
	rootfs map[string]string // container ID → its rootfs
	fail   map[string]int
}

const busyboxID = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

func (f *fakeImages) failing(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[op] > 0 {
		f.fail[op]--
		return fmt.Errorf("%s: %w", op, errImagesInjected)
	}
	return nil
}

func (f *fakeImages) CreateRootfs(id, ref string, _, _ []specs.LinuxIDMapping) (string, string, error) {
	if ref != "busybox" {
		return "", "", fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	if err := f.failing("rootfs"); err != nil {
		return "", "", err
	}
	dir := filepath.Join(f.dir, id)
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		return "", "", err
	}
	f.mu.Lock()
	f.rootfs[id] = dir
	f.mu.Unlock()
	return dir, busyboxID, nil
}

func (f *fakeImages) RemoveRootfs(id string) error {
	if err := f.failing("remove-rootfs"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.rootfs, id)
	return os.RemoveAll(filepath.Join(f.dir, id))
}

// left is the rootfs not removed.
func (f *fakeImages) left() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.rootfs {
		ids = append(ids, id)
	}
	return ids
}

func (f *fakeImages) RootfsUsage(string) (image.Usage, error) { return image.Usage{}, nil }
func (f *fakeImages) MountVolume(string, int, string, []specs.LinuxIDMapping, []specs.LinuxIDMapping) (*image.Volume, error) {
	return nil, errors.New("fake images: no image volumes")
}
func (f *fakeImages) RemoveVolumes(string) error      { return nil }
func (f *fakeImages) VolumeOwners() ([]string, error) { return nil, nil }

func (f *fakeImages) Config(ref string) ([]byte, error) {
	if ref != busyboxID {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return json.Marshal(ocispec.Image{Config: ocispec.ImageConfig{Env: []string{"PATH=/bin"}, Cmd: []string{"sh"}, StopSignal: "SIGTERM"}})
}

func (f *fakeImages) Status(ref string) (*image.Image, error) {
	if ref != busyboxID {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return &image.Image{ID: busyboxID, RepoTags: []string{"busybox:latest"}}, nil
}

// env is one node; managers built from it are a daemon, and built again after the first
// are dropped, the daemon after a kill -9.
type env struct {
	t                  *testing.T
	dir                string
	rt                 *kindtest.Runtime
	node               *sandboxtest.Node
	images             *fakeImages
	podStore, ctrStore *store.Store
}

func newEnv(t *testing.T, plan kind.PodPlan) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, rt: kindtest.New(kind.OCI, plan), node: sandboxtest.NewNode(),
		images: &fakeImages{dir: filepath.Join(dir, "rootfs"), rootfs: map[string]string{}, fail: map[string]int{}}}
	var err error
	if e.podStore, err = store.New(filepath.Join(dir, "pods")); err != nil {
		t.Fatal(err)
	}
	if e.ctrStore, err = store.New(filepath.Join(dir, "containers")); err != nil {
		t.Fatal(err)
	}
	return e
}

// managers are a daemon's sandbox and container managers, recovered in the daemon's order.
func (e *env) managers() (*sandbox.Manager, *Manager) {
	e.t.Helper()
	sbs, err := sandbox.NewManager(sandbox.Options{
		Handlers: sandboxtest.NewHandlers(e.rt, filepath.Join(e.dir, "runtime")), Runtimes: kindtest.Maker{Runtime: e.rt},
		Store: e.podStore, RunDir: filepath.Join(e.dir, "run", "sandboxes"), PauseRootfs: filepath.Join(e.dir, "pause"),
		CgroupDriver: config.CgroupfsDriver, Node: e.node,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := NewManager(Options{
		Store: e.ctrStore, RunDir: filepath.Join(e.dir, "run", "containers"), Runtimes: kindtest.Maker{Runtime: e.rt},
		Images: e.images, Sandboxes: sbs, CgroupDriver: config.CgroupfsDriver, Capabilities: oci.GrantableCapabilities(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	sbs.SetContainers(m)
	e.t.Cleanup(func() { m.Close(); sbs.Close() })
	ctx := context.Background()
	if err := sbs.Recover(ctx); err != nil {
		e.t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		e.t.Fatal(err)
	}
	return sbs, m
}

func (e *env) podConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		LogDirectory: filepath.Join(e.dir, "logs", name),
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

func ctrConfig(name, img string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: img},
		Command:  []string{"sleep", "1000"},
		LogPath:  name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

// clean fails unless nothing of any container or pod is left.
func (e *env) clean(t *testing.T) {
	t.Helper()
	if tasks := e.rt.Tasks(); len(tasks) > 0 {
		t.Errorf("runtime still holds %v", tasks)
	}
	if left := e.node.Left(); len(left) > 0 {
		t.Errorf("node still has %v", left)
	}
	if left := e.images.left(); len(left) > 0 {
		t.Errorf("rootfs not removed: %v", left)
	}
	for _, d := range []string{"run/sandboxes", "run/containers"} {
		if ents, _ := os.ReadDir(filepath.Join(e.dir, d)); len(ents) > 0 {
			t.Errorf("%s still has %v", d, ents)
		}
	}
	for _, st := range []*store.Store{e.podStore, e.ctrStore} {
		if recs, err := st.Load(); err != nil || len(recs) > 0 {
			t.Errorf("records left: %d (%v)", len(recs), err)
		}
	}
}

func ctrState(t *testing.T, m *Manager, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	st, _, err := m.CRIStatus(id, false)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

var plans = map[string]kind.PodPlan{
	"namespaces": {PinIPCUTS: true, HostNamespaces: true},
	"sandboxed":  {SandboxContainer: true, PodLimits: true, DeleteSandboxAtStop: true},
}

// Create, start, stop and remove a container, and one that exits on its own, in a pod of
// each shape; removing the pod leaves nothing.
func TestContainerLifecycle(t *testing.T) {
	for name, plan := range plans {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, plan)
			sbs, m := e.managers()
			ctx := context.Background()
			podID, _, err := sbs.Run(ctx, e.podConfig("web"), "")
			if err != nil {
				t.Fatal(err)
			}
			id, err := m.Create(ctx, podID, ctrConfig("app", "busybox"))
			if err != nil {
				t.Fatal(err)
			}
			st := ctrState(t, m, id)
			if st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.Image.GetImage() != "busybox:latest" || st.ImageRef != busyboxID {
				t.Errorf("created: %v %v %v", st.State, st.Image, st.ImageRef)
			}
			spec, err := oci.ReadBundle(filepath.Join(e.dir, "run", "containers", id))
			if err != nil || spec.Process == nil || len(spec.Process.Args) != 2 || spec.Process.Args[0] != "sleep" {
				t.Errorf("bundle: %v %+v", err, spec)
			}
			if _, err := os.Stat(st.LogPath); err != nil {
				t.Errorf("log file: %v", err)
			}
			if _, err := m.Create(ctx, podID, ctrConfig("app", "busybox")); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("second container of the name: %v", err)
			}
			if err := m.Start(ctx, id); err != nil {
				t.Fatal(err)
			}
			if st := ctrState(t, m, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || e.rt.State(id) != kind.TaskRunning {
				t.Errorf("started: %v, runtime %q", st.State, e.rt.State(id))
			}
			if err := m.Start(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("second start: %v", err)
			}
			if err := m.Stop(ctx, id, 10); err != nil {
				t.Fatal(err)
			}
			if st := ctrState(t, m, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 143 {
				t.Errorf("stopped: %v code %d, want exited 143 (SIGTERM)", st.State, st.ExitCode)
			}

			// One that ends on its own.
			other, err := m.Create(ctx, podID, ctrConfig("job", "busybox"))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Start(ctx, other); err != nil {
				t.Fatal(err)
			}
			e.rt.Exit(other, 3)
			await(t, "the job's exit", func() bool { return ctrState(t, m, other).State == runtimeapi.ContainerState_CONTAINER_EXITED })
			if st := ctrState(t, m, other); st.ExitCode != 3 || st.FinishedAt < st.StartedAt {
				t.Errorf("job: code %d, started %d finished %d", st.ExitCode, st.StartedAt, st.FinishedAt)
			}

			if err := m.Remove(ctx, id); err != nil {
				t.Fatal(err)
			}
			if e.rt.State(id) != "" {
				t.Errorf("removed container still in the runtime: %q", e.rt.State(id))
			}
			if _, err := m.Get(id); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("removed container: %v", err)
			}
			// The pod's removal takes its remaining container with it.
			if err := sbs.Remove(ctx, podID); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Get(other); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("container of the removed pod: %v", err)
			}
			e.clean(t)
		})
	}
}

// A create that fails at any step leaves nothing behind and frees the name.
func TestContainerCreateFailsAtEachStep(t *testing.T) {
	for _, c := range []struct {
		step  string
		image string
		want  error
		setup func(e *env)
	}{
		{"image not pulled", "missing", errdefs.ErrNotFound, func(*env) {}},
		{"rootfs", "busybox", errImagesInjected, func(e *env) { e.images.fail["rootfs"] = 1 }},
		{"runtime create", "busybox", kindtest.ErrInjected, func(e *env) { e.rt.FailNext("create", 1) }},
	} {
		t.Run(c.step, func(t *testing.T) {
			e := newEnv(t, plans["namespaces"])
			sbs, m := e.managers()
			ctx := context.Background()
			podID, _, err := sbs.Run(ctx, e.podConfig("web"), "")
			if err != nil {
				t.Fatal(err)
			}
			c.setup(e)
			if _, err := m.Create(ctx, podID, ctrConfig("app", c.image)); !errors.Is(err, c.want) {
				t.Fatalf("create: %v, want %v", err, c.want)
			}
			if ctrs := m.List(nil); len(ctrs) > 0 {
				t.Errorf("failed container listed: %v", ctrs)
			}
			if _, err := m.Create(ctx, podID, ctrConfig("app", "busybox")); err != nil {
				t.Errorf("create again: %v", err)
			}
			if err := sbs.Remove(ctx, podID); err != nil {
				t.Fatal(err)
			}
			e.clean(t)
		})
	}
}

// A start the runtime refuses leaves the container created; a removal whose rootfs
// cannot be removed keeps the container and its record for a retry.
func TestContainerStartAndRemoveFail(t *testing.T) {
	e := newEnv(t, plans["sandboxed"])
	sbs, m := e.managers()
	ctx := context.Background()
	podID, _, err := sbs.Run(ctx, e.podConfig("web"), "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := m.Create(ctx, podID, ctrConfig("app", "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	e.rt.FailNext("start", 1)
	if err := m.Start(ctx, id); !errors.Is(err, kindtest.ErrInjected) {
		t.Fatalf("start: %v", err)
	}
	if st := ctrState(t, m, id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("after a refused start: %v", st.State)
	}
	e.images.fail["remove-rootfs"] = 1
	if err := m.Remove(ctx, id); !errors.Is(err, errImagesInjected) {
		t.Fatalf("remove: %v", err)
	}
	if _, err := m.Get(id); err != nil {
		t.Errorf("container gone after a failed removal: %v", err)
	}
	if recs, _ := e.ctrStore.Load(); len(recs) != 1 {
		t.Errorf("records after a failed removal: %d", len(recs))
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := sbs.Remove(ctx, podID); err != nil {
		t.Fatal(err)
	}
	e.clean(t)
}

// After a kill -9 the next daemon finds every container as recorded, with the exit of
// one that ended while it was down, and follows the running ones again.
func TestContainerRecovery(t *testing.T) {
	for name, plan := range plans {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, plan)
			sbs, m := e.managers()
			ctx := context.Background()
			podID, _, err := sbs.Run(ctx, e.podConfig("web"), "")
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]string{}
			for _, n := range []string{"running", "created", "ends-while-down", "ends-after"} {
				if ids[n], err = m.Create(ctx, podID, ctrConfig(n, "busybox")); err != nil {
					t.Fatal(err)
				}
				if n != "created" {
					if err := m.Start(ctx, ids[n]); err != nil {
						t.Fatal(err)
					}
				}
			}
			m.Close() // the daemon is killed
			sbs.Close()
			e.rt.Exit(ids["ends-while-down"], 7)

			sbs2, m2 := e.managers()
			// The exit that came while the daemon was down is recorded by the watcher
			// recovery starts, as soon as it asks the runtime.
			await(t, "the exit that came while the daemon was down", func() bool {
				st := ctrState(t, m2, ids["ends-while-down"])
				return st.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.ExitCode == 7
			})
			for n, want := range map[string]runtimeapi.ContainerState{
				"running": runtimeapi.ContainerState_CONTAINER_RUNNING, "created": runtimeapi.ContainerState_CONTAINER_CREATED,
				"ends-after": runtimeapi.ContainerState_CONTAINER_RUNNING,
			} {
				if st := ctrState(t, m2, ids[n]); st.State != want {
					t.Errorf("%s after restart: %v, want %v", n, st.State, want)
				}
			}
			e.rt.Exit(ids["ends-after"], 4)
			await(t, "the exit after the restart", func() bool {
				st := ctrState(t, m2, ids["ends-after"])
				return st.State == runtimeapi.ContainerState_CONTAINER_EXITED && st.ExitCode == 4
			})
			if _, err := m2.Create(ctx, podID, ctrConfig("running", "busybox")); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("a recovered container's name is free: %v", err)
			}
			if err := sbs2.Remove(ctx, podID); err != nil {
				t.Fatal(err)
			}
			e.clean(t)
		})
	}
}
