package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/store"
)

// podLimitsKind is a kind whose sandbox container holds the pod (as runsc); it records
// the limits Update gets.
type podLimitsKind struct {
	kind.Runtime
	updates []*specs.LinuxResources
	err     error
}

func (k *podLimitsKind) Plan() kind.PodPlan {
	return kind.PodPlan{SandboxContainer: true, PodLimits: true}
}
func (k *podLimitsKind) Update(ctx context.Context, t kind.Task, res *specs.LinuxResources) error {
	k.updates = append(k.updates, res)
	return k.err
}

// The systemd driver leaves the pod's slice alone: the resize reaches the sandbox
// container that holds the pod, with the overhead added, and is kept in the record.
func TestUpdateResources(t *testing.T) {
	dir := t.TempDir()
	st, err := store.New(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(Options{RunDir: filepath.Join(dir, "run"), Store: st, CgroupDriver: config.SystemdDriver})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rt := &podLimitsKind{}
	sb := &Sandbox{
		Metadata: Metadata{ID: "sb1", Handler: "runsc", SandboxContainer: true, Overhead: config.Overhead{MemoryBytes: 64 << 20, MilliCPU: 100}},
		config:   &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: "u"}},
		rt:       rt, status: store.NewTracked(Status{State: StateReady}), exited: registry.NewExit(),
	}
	m.index.Add(sb)
	if err := m.saveMeta(sb, nil); err != nil {
		t.Fatal(err)
	}
	res := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 256 << 20, CpuQuota: 50000, CpuPeriod: 100000, CpuShares: 512}
	if err := m.UpdateResources(context.Background(), "sb1", nil, res); err != nil {
		t.Fatal(err)
	}
	if len(rt.updates) != 1 || *rt.updates[0].Memory.Limit != (256+64)<<20 || *rt.updates[0].CPU.Quota != 60000 {
		t.Fatalf("sandbox container updates: %+v", rt.updates)
	}
	r := sb.Status().Resize
	if r == nil || r.Applied.Source != "handler" || !r.Applied.SandboxContainer || !strings.Contains(r.Applied.PodCgroupNote, "systemd") || !strings.Contains(string(r.Resources), "268435456") {
		t.Errorf("recorded resize: %+v", r)
	}
	if recs, err := store.Read(filepath.Join(dir, "store")); err != nil || len(recs) != 1 || !strings.Contains(string(recs[0].Status), `"resize"`) {
		t.Errorf("the record's status has no resize: %q %v", recs, err)
	}

	// A failure to set the limits is returned and kept; the record still has the values.
	rt.err = errors.New("update refused")
	res.MemoryLimitInBytes = 512 << 20
	if err := m.UpdateResources(context.Background(), "sb1", nil, res); err == nil || !strings.Contains(err.Error(), "update refused") {
		t.Errorf("refused update: %v", err)
	}
	if r := sb.Status().Resize; !strings.Contains(r.NotApplied, "update refused") || !strings.Contains(string(r.Resources), "536870912") {
		t.Errorf("refused update recorded as %+v", r)
	}

	// A pod that is not ready is only recorded.
	rt.err, rt.updates = nil, nil
	_ = m.update(sb, func(st *Status) { st.State = StateNotReady })
	if err := m.UpdateResources(context.Background(), "sb1", nil, res); err != nil || len(rt.updates) != 0 {
		t.Errorf("not ready pod: %v, updates %d", err, len(rt.updates))
	}

	if err := m.UpdateResources(context.Background(), "nosuch", nil, res); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("unknown pod: %v", err)
	}
}
