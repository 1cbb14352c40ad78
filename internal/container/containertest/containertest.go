// Package containertest holds what the container manager's lifecycle tests, and those of
// the services that read it, need to run the real sandbox and container managers without
// root: an Env (a node of fakes: kindtest's runtime, sandboxtest's node, fake images; real
// stores) from which each call of Managers makes a daemon, and the pod and container
// configs kubelet would send.
package containertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/kind/kindtest"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
	"github.com/rtshimd/rtshimd/internal/store"
)

// ErrImagesInjected is what a failure of Images wraps.
var ErrImagesInjected = errors.New("fake images: injected failure")

// Images is the image service: one image, "busybox", whose container rootfs are plain
// directories.
type Images struct {
	dir    string
	mu     sync.Mutex
	rootfs map[string]string // container ID → its rootfs
	// detached: the rootfs was taken out of the node's mount table after create.
	detached map[string]bool
	fail     map[string]int
}

const BusyboxID = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

// Fail makes the next n calls of op fail ("rootfs", "remove-rootfs").
func (f *Images) Fail(op string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op] += n
}

func (f *Images) failing(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[op] > 0 {
		f.fail[op]--
		return fmt.Errorf("%s: %w", op, ErrImagesInjected)
	}
	return nil
}

func (f *Images) CreateRootfs(_, id, ref string, _, _ []specs.LinuxIDMapping) (string, string, error) {
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
	return dir, BusyboxID, nil
}

// CheckpointName: the fake has no checkpoint images.
func (f *Images) CheckpointName(string, string, string) (string, error) { return "", nil }

// RootfsDiff: the fake keeps no changes.
func (f *Images) RootfsDiff(string, int64) (io.ReadCloser, []string, error) { return nil, nil, nil }

// Pull: the fake's images are all there; the reference is its ID.
func (f *Images) Pull(_ context.Context, _, ref string, _ image.Auth, _ string) (string, error) {
	return ref, nil
}

func (f *Images) DetachRootfs(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.rootfs[id]; ok {
		f.detached[id] = true
	}
}

// Detached reports whether container id's rootfs was detached from the node's mount table.
func (f *Images) Detached(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.detached[id]
}

func (f *Images) RemoveRootfs(id string) error {
	if err := f.failing("remove-rootfs"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.rootfs, id)
	return os.RemoveAll(filepath.Join(f.dir, id))
}

// left is the rootfs not removed.
func (f *Images) Left() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.rootfs {
		ids = append(ids, id)
	}
	return ids
}

func (f *Images) RootfsUsage(string) (image.Usage, error) { return image.Usage{}, nil }
func (f *Images) MountVolume(string, string, int, string, []specs.LinuxIDMapping, []specs.LinuxIDMapping) (*image.Volume, error) {
	return nil, errors.New("fake images: no image volumes")
}
func (f *Images) RemoveVolumes(string) error      { return nil }
func (f *Images) VolumeOwners() ([]string, error) { return nil, nil }

func (f *Images) Config(_, ref string) ([]byte, error) {
	if ref != BusyboxID {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return json.Marshal(ocispec.Image{Config: ocispec.ImageConfig{Env: []string{"PATH=/bin"}, Cmd: []string{"sh"}, StopSignal: "SIGTERM"}})
}

func (f *Images) Status(_, ref string) (*image.Image, error) {
	if ref != BusyboxID {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return &image.Image{ID: BusyboxID, RepoTags: []string{"busybox:latest"}}, nil
}

// env is one node; managers built from it are a daemon, and built again after the first
// are dropped, the daemon after a kill -9.
type Env struct {
	T                  *testing.T
	Dir                string
	RT                 *kindtest.Runtime
	Node               *sandboxtest.Node
	Images             *Images
	PodStore, CtrStore *store.Store
	// Kind is the runtime the handler and recovery give (RT unless a test wraps it).
	Kind kind.Runtime
	// Options, if set, adjusts the container manager's options before it is made.
	Options func(*container.Options)
}

func NewEnv(t *testing.T, plan kind.PodPlan) *Env {
	t.Helper()
	dir := t.TempDir()
	rt := kindtest.New(kind.OCI, plan)
	e := &Env{T: t, Dir: dir, RT: rt, Kind: rt, Node: sandboxtest.NewNode(),
		Images: &Images{dir: filepath.Join(dir, "rootfs"), rootfs: map[string]string{}, detached: map[string]bool{}, fail: map[string]int{}}}
	var err error
	if e.PodStore, err = store.New(filepath.Join(dir, "pods")); err != nil {
		t.Fatal(err)
	}
	if e.CtrStore, err = store.New(filepath.Join(dir, "containers")); err != nil {
		t.Fatal(err)
	}
	return e
}

// managers are a daemon's sandbox and container managers, recovered in the daemon's order.
func (e *Env) Managers() (*sandbox.Manager, *container.Manager) {
	e.T.Helper()
	index := container.NewIndex()
	sbs, err := sandbox.NewManager(sandbox.Options{
		Handlers: sandboxtest.NewHandlers(e.Kind, filepath.Join(e.Dir, "runtime")), Runtimes: kindtest.Maker{Runtime: e.Kind},
		Store: e.PodStore, RunDir: filepath.Join(e.Dir, "run", "sandboxes"), PauseRootfs: filepath.Join(e.Dir, "pause"),
		CgroupDriver: config.CgroupfsDriver, Node: e.Node, Containers: index,
	})
	if err != nil {
		e.T.Fatal(err)
	}
	opts := container.Options{
		Store: e.CtrStore, RunDir: filepath.Join(e.Dir, "run", "containers"), Runtimes: kindtest.Maker{Runtime: e.Kind},
		Images: e.Images, Sandboxes: sbs, Index: index, CgroupDriver: config.CgroupfsDriver, Capabilities: oci.GrantableCapabilities(),
	}
	if e.Options != nil {
		e.Options(&opts)
	}
	m, err := container.NewManager(opts)
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { m.Close(); sbs.Close() })
	ctx := context.Background()
	if err := sbs.Recover(ctx); err != nil {
		e.T.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		e.T.Fatal(err)
	}
	return sbs, m
}

// PodConfig is sandboxtest.PodConfig with a log directory of its own on the env.
func (e *Env) PodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := sandboxtest.PodConfig(name)
	cfg.LogDirectory = filepath.Join(e.Dir, "logs", name)
	return cfg
}

// CtrConfig is a container of image img running `sleep 1000`, as kubelet sends it.
func CtrConfig(name, img string) *runtimeapi.ContainerConfig {
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

// Clean fails unless nothing of any container or pod is left.
func (e *Env) Clean(t *testing.T) {
	t.Helper()
	sandboxtest.CheckLeft(t, e.RT, e.Node, e.PodStore, e.CtrStore)
	if left := e.Images.Left(); len(left) > 0 {
		t.Errorf("rootfs not removed: %v", left)
	}
	for _, d := range []string{"run/sandboxes", "run/containers"} {
		if ents, _ := os.ReadDir(filepath.Join(e.Dir, d)); len(ents) > 0 {
			t.Errorf("%s still has %v", d, ents)
		}
	}
}

// CtrState is container id's status.
func CtrState(t *testing.T, m *container.Manager, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	st, _, err := m.CRIStatus(id, false)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
