package sandbox

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/events"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/lsm"
	"github.com/rtshimd/rtshimd/internal/network"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/store"
)

// StopTimeout bounds how long Stop waits for an sandbox container to die after SIGKILL.
const StopTimeout = 10 * time.Second

// Options wire a Manager.
type Options struct {
	// Handlers resolves a pod's handler, once, at RunPodSandbox (the live table).
	Handlers Handlers
	// LSM is what the node's AppArmor and SELinux can do.
	LSM lsm.Host
	// Runtimes makes the runtime of a recovered record from the row it kept.
	Runtimes     kind.Maker
	Store        *store.Store
	RunDir       string // volatile per-sandbox directories: <run_root>/sandboxes
	PauseRootfs  string
	CgroupDriver string
	// OOMScoreAdjMin is the lowest oom_score_adj the daemon may give a process (its own).
	OOMScoreAdjMin int
	// Network attaches pods to CNI networks; nil leaves pods with loopback only.
	Network *network.Manager
	// Events receives sandbox lifecycle events (GetContainerEvents); may be nil.
	Events *events.Bus
	// NRI relays pod events to NRI plugins (internal/nrihost); nil when NRI is off.
	NRI NRI
	// Node pins namespaces and mounts pod files; nil is the node itself (HostNode).
	Node Node
	// Containers gives a pod's events its containers' statuses (the container index);
	// nil sends none.
	Containers Containers
}

// NRI is what pods tell NRI plugins: that a pod runs (a plugin's error fails
// RunPodSandbox), stopped, and is removed.
type NRI interface {
	RunPodSandbox(ctx context.Context, sb *Sandbox) error
	StopPodSandbox(ctx context.Context, sb *Sandbox)
	RemovePodSandbox(ctx context.Context, sb *Sandbox)
	// UpdatePodSandbox tells plugins of a resize before it is applied; an error fails it.
	UpdatePodSandbox(ctx context.Context, sb *Sandbox, overhead, resources *runtimeapi.LinuxContainerResources) error
	PostUpdatePodSandbox(ctx context.Context, sb *Sandbox)
	// BlockSync holds off plugins' synchronization while a pod is being made.
	BlockSync() (unblock func())
}

// Handlers resolves a handler name in the table being served.
type Handlers interface {
	Lookup(name string) (*handlers.Handler, error)
	// StopUnrecorded ends a task whose record was lost wherever a row's runtime knows it.
	StopUnrecorded(ctx context.Context, task kind.Task) ([]string, error)
	// FindUnrecorded names the rows whose runtime still runs such a task.
	FindUnrecorded(ctx context.Context, task kind.Task) ([]string, error)
}

// Containers is what a pod's events take of its containers: kubelet's Evented PLEG
// replaces its view of a pod with what an event carries.
type Containers interface {
	PodStatuses(sandboxID string) []*runtimeapi.ContainerStatus
}

// PodContainers is what a pod's stop and removal do to its containers first, under the
// pod's lifecycle lock, so that none is made or started meanwhile. The caller that owns
// both managers (the CRI server) gives it; nil where the pod can have none.
type PodContainers interface {
	StopAll(ctx context.Context, sandboxID string) error
	RemoveAll(ctx context.Context, sandboxID string) error
}

// Manager runs pod sandboxes.
type Manager struct {
	opts Options

	// index lists the pods; its kept ones are pods without a usable record that still ran
	// at recovery, left running with their pins and files until an operator stops them
	// (`rtshimd quarantine stop`) or adopts their records.
	index *registry.Index[*Sandbox]

	mu sync.Mutex
	// quarantined: pods whose records recovery set aside, stopped by StopQuarantined.
	quarantined []string
	// left: records this daemon has no runtime for, left as they are for a later one.
	left map[string]bool

	// ctx ends watchers when the daemon shuts down.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewManager returns a Manager with no sandboxes; call Recover to load the stored ones.
func NewManager(opts Options) (*Manager, error) {
	if err := os.MkdirAll(opts.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create %s: %w", opts.RunDir, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{opts: opts, index: registry.New[*Sandbox]("pod_sandbox_id", "pod sandbox"), left: map[string]bool{}, ctx: ctx, cancel: cancel}, nil
}

// Close stops the watchers; sandboxes keep running.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// watch follows the sandbox container through its runtime and marks the sandbox not ready
// when the sandbox container exits.
func (m *Manager) watch(sb *Sandbox) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		e, ok, err := sb.rt.Wait(m.ctx, sb.Task())
		if err != nil {
			return // daemon shutting down; the next one watches again
		}
		if !ok {
			e = kind.Exit{Status: 255, ExitedAt: time.Now()}
		}
		sb.mu.Lock()
		expected := sb.stopping
		sb.mu.Unlock()
		var was string
		err = m.updateIf(sb, func(st *Status) bool {
			was = st.State
			code := e.Status
			st.ContainerExit, st.ExitedAt, st.State = &code, e.ExitedAt, StateNotReady
			return was != StateCreating // a half-made record stays half-made
		})
		sb.exited.Mark()
		if was == StateReady && !expected {
			logrus.WithFields(logrus.Fields{"sandbox": sb.ID, "status": e.Status}).Warn("sandbox container exited; sandbox not ready")
		}
		if err != nil {
			logrus.WithError(err).WithField("sandbox", sb.ID).Error("persist sandbox status")
		}
	}()
}

// update changes the sandbox's status and writes its record before the change is
// visible (store.Tracked); every change of status goes through it or updateIf.
func (m *Manager) update(sb *Sandbox, fn func(*Status)) error {
	return sb.status.Update(m.opts.Store, sb.ID, nil, fn)
}

// updateIf is update where fn decides whether the change is written now.
func (m *Manager) updateIf(sb *Sandbox, fn func(*Status) bool) error {
	return sb.status.UpdateIf(m.opts.Store, sb.ID, nil, fn)
}

// saveMeta is update that writes the sandbox's metadata too (fn may be nil).
func (m *Manager) saveMeta(sb *Sandbox, fn func(*Status)) error {
	return sb.status.Update(m.opts.Store, sb.ID, &sb.Metadata, fn)
}

// publish sends a sandbox lifecycle event (its ID in container_id, as containerd does)
// with the statuses of the pod's containers: kubelet's Evented PLEG replaces its view of
// the pod with what an event carries, so a stopped pod's event without them would hide
// its containers.
func (m *Manager) publish(sb *Sandbox, t runtimeapi.ContainerEventType) {
	if m.opts.Events == nil {
		return
	}
	ev := &runtimeapi.ContainerEventResponse{
		ContainerId: sb.ID, ContainerEventType: t, CreatedAt: time.Now().UnixNano(), PodSandboxStatus: criStatusOf(sb),
	}
	if m.opts.Containers != nil {
		ev.ContainersStatuses = m.opts.Containers.PodStatuses(sb.ID)
	}
	m.opts.Events.Publish(ev)
}

// ReadOOMScoreAdj returns the calling process's oom_score_adj.
func ReadOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return v
}
