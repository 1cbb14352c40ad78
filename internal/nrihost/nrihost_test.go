package nrihost

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	dto "github.com/prometheus/client_model/go"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/metrics"
	"github.com/rtshimd/rtshimd/internal/sandbox"
)

func baseSpec() *specs.Spec {
	limit := int64(1 << 30)
	return &specs.Spec{
		Process: &specs.Process{Args: []string{"sh"}, Env: []string{"PATH=/bin", "KEEP=1", "DROP=1"}},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/data", Type: "bind", Source: "/old", Options: []string{"rbind"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: "/kubepods/pod1/ctr1",
			Resources:   &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}},
		},
		Annotations: map[string]string{"a": "1"},
	}
}

func TestAdjust(t *testing.T) {
	spec := baseSpec()
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("ADDED", "yes")
	adj.AddEnv("KEEP", "2")
	adj.RemoveEnv("DROP")
	adj.AddMount(&api.Mount{Destination: "/data", Type: "bind", Source: "/new", Options: []string{"rbind", "ro"}})
	adj.AddMount(&api.Mount{Destination: "/extra", Type: "bind", Source: "/host/extra", Options: []string{"rbind"}})
	adj.AddAnnotation("b", "2")
	adj.SetLinuxMemoryLimit(64 << 20)
	adj.SetLinuxCPUShares(512)
	adj.SetLinuxOomScoreAdj(intp(500))
	adj.AddRlimit("RLIMIT_NOFILE", 1024, 512)
	adj.AddHooks(&api.Hooks{Poststart: []*api.Hook{{Path: "/bin/true"}}})
	adj.AddDevice(&api.LinuxDevice{Path: "/dev/fake", Type: "c", Major: 1, Minor: 3})
	if err := Adjust(spec, adj); err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin", "KEEP=2", "ADDED=yes"}; !slices.Equal(spec.Process.Env, want) {
		t.Errorf("env = %q, want %q", spec.Process.Env, want)
	}
	var data, extra *specs.Mount
	for i, m := range spec.Mounts {
		switch m.Destination {
		case "/data":
			data = &spec.Mounts[i]
		case "/extra":
			extra = &spec.Mounts[i]
		}
	}
	if data == nil || data.Source != "/new" || extra == nil || extra.Source != "/host/extra" {
		t.Errorf("mounts = %+v, want /data replaced from /new and /extra added", spec.Mounts)
	}
	if spec.Annotations["a"] != "1" || spec.Annotations["b"] != "2" {
		t.Errorf("annotations = %v", spec.Annotations)
	}
	if l := spec.Linux.Resources.Memory.Limit; l == nil || *l != 64<<20 {
		t.Errorf("memory limit = %v, want 64Mi", l)
	}
	if s := spec.Linux.Resources.CPU; s == nil || s.Shares == nil || *s.Shares != 512 {
		t.Errorf("cpu = %+v, want shares 512", s)
	}
	if o := spec.Process.OOMScoreAdj; o == nil || *o != 500 {
		t.Errorf("oom_score_adj = %v, want 500", o)
	}
	if len(spec.Process.Rlimits) != 1 || spec.Process.Rlimits[0] != (specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 512}) {
		t.Errorf("rlimits = %+v", spec.Process.Rlimits)
	}
	if spec.Hooks == nil || len(spec.Hooks.Poststart) != 1 || spec.Hooks.Poststart[0].Path != "/bin/true" {
		t.Errorf("hooks = %+v", spec.Hooks)
	}
	if len(spec.Linux.Devices) != 1 || spec.Linux.Devices[0].Path != "/dev/fake" || len(spec.Linux.Resources.Devices) != 1 {
		t.Errorf("devices = %+v, cgroup rules %+v", spec.Linux.Devices, spec.Linux.Resources.Devices)
	}
}

func intp(v int) *int { return &v }

func TestAdjustNilAndCgroupsPath(t *testing.T) {
	spec := baseSpec()
	if err := Adjust(spec, nil); err != nil {
		t.Fatal(err)
	}
	adj := &api.ContainerAdjustment{}
	adj.SetLinuxCgroupsPath("/elsewhere/ctr1")
	if err := Adjust(spec, adj); err != nil {
		t.Fatal(err)
	}
	if spec.Linux.CgroupsPath != "/elsewhere/ctr1" {
		t.Errorf("cgroups path = %q", spec.Linux.CgroupsPath)
	}
}

func TestMergeResources(t *testing.T) {
	limit, shares := int64(1<<30), uint64(1024)
	cur := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}, CPU: &specs.LinuxCPU{Shares: &shares, Cpus: "0-3"}}
	u := &api.ContainerUpdate{}
	u.SetLinuxMemoryLimit(1 << 20)
	u.SetLinuxCPUSetCPUs("1")
	got := mergeResources(cur, u.GetLinux().GetResources())
	if *got.Memory.Limit != 1<<20 || *got.CPU.Shares != 1024 || got.CPU.Cpus != "1" {
		t.Errorf("merged = memory %d shares %d cpus %q", *got.Memory.Limit, *got.CPU.Shares, got.CPU.Cpus)
	}
	if *cur.Memory.Limit != 1<<30 || cur.CPU.Cpus != "0-3" {
		t.Errorf("merge changed the current limits: %+v", cur)
	}
}

func TestContainerForm(t *testing.T) {
	c := &container.Container{Metadata: container.Metadata{ID: "c1", SandboxID: "p1", CgroupsPath: "/kubepods/pod1/c1", ImageRef: "busybox"}}
	got := nriContainer(c, baseSpec())
	if got.Id != "c1" || got.PodSandboxId != "p1" || got.State != api.ContainerState_CONTAINER_UNKNOWN {
		t.Errorf("ids/state = %s %s %v", got.Id, got.PodSandboxId, got.State)
	}
	if !slices.Equal(got.Env, []string{"PATH=/bin", "KEEP=1", "DROP=1"}) || len(got.Mounts) != 2 || got.Annotations["a"] != "1" {
		t.Errorf("env %q mounts %d annotations %v", got.Env, len(got.Mounts), got.Annotations)
	}
	// The spec's cgroups path is the one the runtime gets.
	if got.Linux.CgroupsPath != "/kubepods/pod1/ctr1" || got.Linux.Resources.GetMemory().GetLimit().GetValue() != 1<<30 {
		t.Errorf("linux = %+v", got.Linux)
	}
	if bare := nriContainer(c, nil); bare.Id != "c1" || bare.Linux.CgroupsPath != "/kubepods/pod1/c1" {
		t.Errorf("without a spec: %+v", bare)
	}
}

// plugin adjusts every container it is asked about, or fails it while fail is set.
type plugin struct {
	synced chan int
	fail   bool
	bad    bool // an adjustment rtshimd cannot apply
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.synced <- len(pods) + len(ctrs)
	return nil, nil
}

func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if p.fail {
		return nil, nil, errors.New("refused by test")
	}
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("FROM_PLUGIN", c.Id)
	if p.bad {
		adj.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "bogus"})
	}
	return adj, nil, nil
}

type noPods struct{}

func (noPods) Get(string) (*sandbox.Sandbox, error) { return nil, errors.New("none") }
func (noPods) All() []*sandbox.Sandbox              { return nil }

type noContainers struct{}

func (noContainers) Get(string) (*container.Container, error) { return nil, errors.New("none") }
func (noContainers) All() []*container.Container              { return nil }
func (noContainers) ApplyResources(context.Context, string, *specs.LinuxResources) error {
	return errors.New("none")
}

// The host with NRI's real adaptation and a plugin on its socket: the plugin is
// synchronized, its adjustment lands in the spec, and its error fails the create.
func TestHostWithPlugin(t *testing.T) {
	dir := t.TempDir()
	cfg := config.NRI{
		Enable: true, SocketPath: filepath.Join(dir, "nri.sock"), PluginPath: filepath.Join(dir, "plugins"),
		PluginConfigPath:    filepath.Join(dir, "conf.d"),
		RegistrationTimeout: config.Duration{Duration: 5 * time.Second}, RequestTimeout: config.Duration{Duration: 2 * time.Second},
	}
	h, err := New(cfg, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(noPods{}, noContainers{}); err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	// Before a plugin connects, an event reaches no one: no undo is owed, the spec is as
	// it was, and the event is still counted.
	ctx0 := context.Background()
	before := createEvents(t)
	c0, spec0 := &container.Container{Metadata: container.Metadata{ID: "c0", SandboxID: "p1"}}, baseSpec()
	if undo, err := h.CreateContainer(ctx0, c0, spec0); err != nil || undo {
		t.Errorf("CreateContainer with no plugin = %v, %v; want no undo owed and no error", undo, err)
	}
	if !reflect.DeepEqual(spec0, baseSpec()) {
		t.Errorf("spec changed with no plugin: %+v", spec0)
	}
	if got := createEvents(t); got != before+1 {
		t.Errorf("CreateContainer events counted %v, want %v", got, before+1)
	}
	p := &plugin{synced: make(chan int, 1)}
	s, err := stub.New(p, stub.WithPluginName("test"), stub.WithPluginIdx("10"), stub.WithSocketPath(cfg.SocketPath))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	select {
	case <-p.synced:
	case <-time.After(10 * time.Second):
		t.Fatal("plugin was not synchronized")
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.Info().Plugins != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if info := h.Info(); !info.Enabled || info.Plugins != 1 || info.Socket != cfg.SocketPath {
		t.Errorf("info = %+v, want one plugin on %s", info, cfg.SocketPath)
	}
	c := &container.Container{Metadata: container.Metadata{ID: "c1", SandboxID: "p1"}}
	spec := baseSpec()
	if undo, err := h.CreateContainer(ctx, c, spec); err != nil || !undo {
		t.Fatalf("CreateContainer = %v, %v; want undo owed and no error", undo, err)
	}
	if !slices.Contains(spec.Process.Env, "FROM_PLUGIN=c1") {
		t.Errorf("env = %q, want the plugin's variable", spec.Process.Env)
	}
	// An adjustment that cannot be applied fails the create after plugins accepted it:
	// they are owed RemoveContainer.
	p.bad = true
	undo, err := h.CreateContainer(ctx, c, baseSpec())
	p.bad = false
	if err == nil || !undo || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("CreateContainer with an adjustment that fails = %v, %v; want the error and undo owed", undo, err)
	}
	p.fail = true
	undo, err = h.CreateContainer(ctx, c, baseSpec())
	if err == nil || undo || !strings.Contains(err.Error(), "refused by test") || !strings.HasPrefix(err.Error(), "nri: create container c1: ") {
		t.Errorf("error = %v (undo %v), want the plugin's and no undo", err, undo)
	}
	var nilHost *Host
	if info := nilHost.Info(); info.Enabled {
		t.Errorf("nil host info = %+v", info)
	}
}

// What Status tells of each plugin comes from the adaptation's metrics calls.
func TestPluginsSeen(t *testing.T) {
	h := &Host{}
	m := pluginMetrics{h}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.seen.call("10-b", "Synchronize", nil, t0)
	h.seen.call("05-a", "Synchronize", nil, t0.Add(time.Second))
	h.seen.call("10-b", "CreateContainer", errors.New("no"), t0.Add(2*time.Second))
	// Through the adaptation's hook, as the adaptation calls it: one more plugin, which
	// failed its Synchronize (never synchronized, so no such time in Status).
	m.RecordPluginInvocation("20-c", "Synchronize", errors.New("refused"))
	m.UpdatePluginCount(2)
	info := h.Info()
	if info.Plugins != 2 || len(info.Seen) != 3 {
		t.Fatalf("Info = %+v, want 2 plugins, 3 seen", info)
	}
	if c := info.Seen[2]; c.Name != "20-c" || c.Calls != 1 || c.Errors != 1 || c.LastError != "Synchronize: refused" || !c.Synchronized.IsZero() {
		t.Errorf("20-c: %+v", c)
	}
	if js, _ := json.Marshal(info.Seen[2]); strings.Contains(string(js), "synchronized") {
		t.Errorf("a plugin never synchronized shows a time: %s", js)
	}
	a, b := info.Seen[0], info.Seen[1]
	if a.Name != "05-a" || a.Calls != 1 || a.Errors != 0 || !a.Synchronized.Equal(t0.Add(time.Second)) {
		t.Errorf("05-a: %+v", a)
	}
	if b.Name != "10-b" || b.Calls != 2 || b.Errors != 1 || b.LastError != "CreateContainer: no" ||
		!b.Synchronized.Equal(t0) || !b.LastCall.Equal(t0.Add(2*time.Second)) {
		t.Errorf("10-b: %+v", b)
	}
}

// Installed lists what the adaptation would start, and fails where it would.
func TestInstalled(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("10-cpu", 0o755)
	write("05-mem", 0o700)
	write("20-readme", 0o644) // not executable: not a plugin
	if err := os.Mkdir(filepath.Join(dir, "30-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Installed(dir); err != nil || !slices.Equal(got, []string{"05-mem", "10-cpu"}) {
		t.Errorf("Installed = %q, %v", got, err)
	}
	if got, err := Installed(filepath.Join(dir, "absent")); err != nil || got != nil {
		t.Errorf("Installed(absent) = %q, %v; want none", got, err)
	}
	write("x-bad", 0o755)
	if _, err := Installed(dir); err == nil || !strings.Contains(err.Error(), "x-bad") {
		t.Errorf("Installed with x-bad = %v, want an error naming it", err)
	}
}

// createEvents is the count of CreateContainer events the host has handled.
func createEvents(t *testing.T) float64 {
	var m dto.Metric
	if err := metrics.NRIRequests.WithLabelValues("CreateContainer").Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// With a plugin installed in plugin_path, events are made even while no plugin is
// counted: the adaptation counts the plugins it starts itself only once it relays an
// event, so skipping them then would keep them from every event.
func TestHostWithInstalledPlugin(t *testing.T) {
	dir := t.TempDir()
	cfg := config.NRI{
		Enable: true, SocketPath: filepath.Join(dir, "nri.sock"), PluginPath: filepath.Join(dir, "plugins"),
		PluginConfigPath:    filepath.Join(dir, "conf.d"),
		RegistrationTimeout: config.Duration{Duration: time.Second}, RequestTimeout: config.Duration{Duration: time.Second},
	}
	if err := os.MkdirAll(cfg.PluginPath, 0o755); err != nil {
		t.Fatal(err)
	}
	// It never registers (the adaptation gives up on it and goes on), but it is installed.
	if err := os.WriteFile(filepath.Join(cfg.PluginPath, "10-quits"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := New(cfg, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(noPods{}, noContainers{}); err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	c := &container.Container{Metadata: container.Metadata{ID: "c1", SandboxID: "p1"}}
	if undo, err := h.CreateContainer(context.Background(), c, baseSpec()); err != nil || !undo {
		t.Errorf("CreateContainer with a plugin installed = %v, %v; want it relayed (undo owed) and no error", undo, err)
	}
}
