package container

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cdidevices"
	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/cgroups/oomevent"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/events"
	"github.com/rtshimd/rtshimd/internal/fsafe/regfile"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/lsm"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Options wire a Manager.
type Options struct {
	Store  *store.Store
	RunDir string // <run_root>/containers
	// CheckpointDir is where checkpoints are made before their archive is written
	// (<state_root>/checkpoints, root's only; emptied at start).
	CheckpointDir string
	// RestoreDir holds the checkpoint archives unpacked for containers restored from
	// them (<state_root>/restores, root's only), each until its container's start or
	// removal. Empty: no restores.
	RestoreDir string
	// Rows is the handler table served now (handlers.Live): whether a pod's row takes
	// checkpoints and restores is read from it at each call, so a reload that turns one
	// off holds at once. nil allows both (unit tests).
	Rows Rows
	// MaxCheckpointSize bounds a checkpoint's content as if its files had no holes: what
	// a checkpoint writes, what a restore unpacks or copies (checkpoints.max_size); 0: no
	// bound.
	MaxCheckpointSize int64
	// CheckpointKey signs every checkpoint written (ckptsign); nil signs none.
	CheckpointKey ed25519.PrivateKey
	// RequireSignature restores only checkpoints signed by one of TrustedKeys (this
	// node's public key among them).
	RequireSignature bool
	TrustedKeys      []ed25519.PublicKey
	// Runtimes makes the runtime of a recovered record from the row it kept.
	Runtimes  kind.Maker
	Images    Images
	LSM       lsm.Host // what the node's AppArmor and SELinux can do
	Sandboxes Sandboxes
	// Index is where the manager lists its containers, shared with the pods' side (their
	// events carry their containers' statuses); nil makes one of its own.
	Index          *Index
	CgroupDriver   string
	OOMScoreAdjMin int
	// Capabilities the node can grant at all (the daemon's bounding set).
	Capabilities []string
	// Events receives container lifecycle events (GetContainerEvents); may be nil.
	Events *events.Bus
	// CDI resolves the CDI devices a container asks for; nil refuses every such request.
	CDI *cdidevices.Registry
	// NRI relays container events to NRI plugins (internal/nrihost); nil when NRI is off.
	NRI NRI
	// RebootedAt, when set, is when the node booted after the records were written
	// (internal/boot): no container of theirs still runs.
	RebootedAt time.Time
}

// Rows finds a handler row by name (handlers.Live).
type Rows interface {
	Lookup(name string) (*handlers.Handler, error)
}

// Images is what containers take of the image stores: rootfs layers, image volumes, an
// image's config and names, from the store of the pod's row (handler); the calls by
// container ID find the store that holds it. The daemon's is image.Stores; the lifecycle
// unit tests give a fake one.
type Images interface {
	CreateRootfs(handler, id, ref string, uids, gids []specs.LinuxIDMapping) (rootfs, imageID string, err error)
	RemoveRootfs(id string) error
	RootfsDiff(id string, max int64) (io.ReadCloser, []string, error)
	// Pull pulls ref into handler's store for a pod of namespace (its signature policy),
	// with auth's credentials, and returns the image ID: a restore's base image.
	Pull(ctx context.Context, handler, ref string, auth image.Auth, namespace string) (string, error)
	CheckpointName(handler, imageID, ref string) (string, error)
	DetachRootfs(id string)
	RootfsUsage(id string) (image.Usage, error)
	MountVolume(handler, owner string, index int, ref string, uids, gids []specs.LinuxIDMapping) (*image.Volume, error)
	RemoveVolumes(owner string) error
	VolumeOwners() ([]string, error)
	Config(handler, ref string) ([]byte, error)
	Status(handler, ref string) (*image.Image, error)
}

var _ Images = (*image.Stores)(nil)

// Sandboxes is what containers need of the pods: a pod to make or start a container in,
// its status for the events, its tmpfs lent to a container's hooks, and at recovery the
// pods kept without a record (naming them) and what the runtimes still run.
type Sandboxes interface {
	Get(id string) (*sandbox.Sandbox, error)
	CRIStatus(id string, verbose bool) (*runtimeapi.PodSandboxStatus, map[string]string, error)
	LendTmpfs(sb *sandbox.Sandbox) (giveBack func(keep bool), err error)
	Kept(id string) bool
	NameKept(id string, md *runtimeapi.PodSandboxMetadata)
	BundleOf(id string) string
	FindUnrecorded(ctx context.Context, task kind.Task) ([]string, error)
	StopUnrecorded(ctx context.Context, task kind.Task) ([]string, error)
}

var _ Sandboxes = (*sandbox.Manager)(nil)

// Index is the daemon's index of containers. The daemon makes it before either manager:
// the container manager lists its containers there, and the pods' events read their
// containers' statuses from it (sandbox.Containers).
type Index struct{ x *registry.Index[*Container] }

// NewIndex returns an empty index.
func NewIndex() *Index { return &Index{registry.New[*Container]("container_id", "container")} }

var _ sandbox.Containers = (*Index)(nil)

// NRI is what containers tell NRI plugins, in NRI's order. CreateContainer comes before
// the runtime's create and may adjust the spec; it, StartContainer and UpdateContainer
// fail the CRI call on a plugin's error, the others only log.
type NRI interface {
	// CreateContainer returns undo true once plugins accepted the create: from then on a
	// failure of the create owes them RemoveContainer (a plugin's refusal does not).
	CreateContainer(ctx context.Context, c *Container, spec *specs.Spec) (undo bool, err error)
	PostCreateContainer(ctx context.Context, c *Container)
	StartContainer(ctx context.Context, c *Container) error
	PostStartContainer(ctx context.Context, c *Container)
	// UpdateContainer returns the limits to apply: res as plugins changed it.
	UpdateContainer(ctx context.Context, c *Container, res *specs.LinuxResources) (*specs.LinuxResources, error)
	PostUpdateContainer(ctx context.Context, c *Container)
	// StopContainer is told once per container, by a stop or by its exit.
	StopContainer(ctx context.Context, c *Container)
	RemoveContainer(ctx context.Context, c *Container)
	// BlockSync holds off plugins' synchronization while a container is being made.
	BlockSync() (unblock func())
}

// Manager runs containers.
type Manager struct {
	opts Options

	// index lists the containers, by pod too; its kept ones are containers without a
	// usable record that still ran at recovery, left running with their files until an
	// operator decides.
	index *registry.Index[*Container]

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// cg reads the OOM kills of a container's cgroup when it exits.
	cgOnce sync.Once
	cg     *cgstats.Reader
}

// NewManager returns a Manager with no containers; call Recover to load the stored ones.
func NewManager(opts Options) (*Manager, error) {
	if err := os.MkdirAll(opts.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create %s: %w", opts.RunDir, err)
	}
	if opts.CheckpointDir != "" {
		// What a checkpoint cut short by a crash left: its processes' memory.
		if err := os.RemoveAll(opts.CheckpointDir); err != nil {
			return nil, fmt.Errorf("remove %s: %w", opts.CheckpointDir, err)
		}
		if err := os.MkdirAll(opts.CheckpointDir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", opts.CheckpointDir, err)
		}
	}
	if opts.RestoreDir != "" {
		if err := os.MkdirAll(opts.RestoreDir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", opts.RestoreDir, err)
		}
	}
	if opts.Index == nil {
		opts.Index = NewIndex()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{opts: opts, index: opts.Index.x, ctx: ctx, cancel: cancel}
	return m, nil
}

// Close stops the watchers and the stats collector; containers keep running.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// watch follows the container through its runtime and records its exit. A recovered
// container that was created but never started, and whose supervision is gone, can never
// start: it is recorded exited.
func (m *Manager) watch(c *Container, recovered bool) {
	oom := m.watchOOM(c)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if oom != nil {
			defer oom.Stop()
		}
		e, ok, err := c.rt.Wait(m.ctx, c.Task())
		if err != nil {
			return // daemon shutting down
		}
		m.recordExit(c, e, ok)
		if recovered && !ok && c.Status().State != StateExited {
			_ = m.update(c, func(s *Status) { s.State = StateExited; s.ExitCode = 255; s.Reason = "Unknown" })
			c.exited.Mark()
		}
	}()
}

func (m *Manager) recordExit(c *Container, e kind.Exit, ok bool) {
	st := c.Status()
	if st.State == StateExited {
		c.exited.Mark()
		return
	}
	lostMsg := ""
	if !ok {
		if st.State == StateCreated || st.State == StateCreating {
			c.exited.Mark() // never started; removal ends its monitor
			return
		}
		// The supervisor died without recording an exit. Its container may still run, with
		// nobody holding its output; end it rather than report a live process as exited.
		e = c.rt.KillLost(m.ctx, c.Task())
		lostMsg = "its supervisor died; rtshimd stopped the container"
	}
	reason := "Completed"
	if e.Status != 0 {
		reason = "Error"
	}
	if m.oomKilled(c) {
		reason = "OOMKilled"
	}
	msg := lostMsg
	if c.TerminationLog != "" && msg == "" {
		if b, err := regfile.Read(c.TerminationLog, 4096); err == nil {
			msg = string(b)
		}
	}
	err := m.update(c, func(s *Status) {
		s.State = StateExited
		s.ExitCode = int32(e.Status)
		s.FinishedAt = e.ExitedAt.UnixNano()
		if s.StartedAt == 0 {
			s.StartedAt = s.FinishedAt
		}
		s.Reason, s.Message = reason, msg
	})
	c.exited.Mark()
	if err != nil {
		logrus.WithError(err).WithField("container", c.ID).Error("persist container status")
	}
	logrus.WithFields(logrus.Fields{"container": c.ID, "exit": e.Status, "reason": reason}).Info("container exited")
	m.publish(c, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	if m.opts.NRI != nil {
		// A container that ends on its own is stopped to plugins too (they free what it held).
		m.opts.NRI.StopContainer(m.ctx, c)
	}
}

// oomKilled says whether the kernel OOM-killed in the container's memory cgroup: as it
// was notified while the container ran (the cgroup may be gone by now: systemd removes a
// container's scope once it is empty), or by the cgroup's OOM-kill count, for either
// cgroup driver and version.
func (m *Manager) oomKilled(c *Container) bool {
	c.mu.Lock()
	w := c.oom
	c.mu.Unlock()
	if w != nil && w.OOMKilled() {
		return true
	}
	dir, err := cgpath.Dir(c.CgroupsPath)
	if err != nil {
		return false
	}
	return m.cgroups().OOMKills(dir) > 0
}

// watchOOM follows the OOM kills of the container's memory cgroup: v1's notification, or
// on cgroup v2 changes of memory.events (none where the runtime keeps no cgroup of the
// container's own).
func (m *Manager) watchOOM(c *Container) *oomevent.Watcher {
	dir, err := cgpath.Dir(c.CgroupsPath)
	if err != nil {
		return nil
	}
	var w *oomevent.Watcher
	if m.cgroups().V2() {
		w, err = oomevent.WatchEvents(filepath.Join(m.cgroups().Root, dir))
	} else {
		w, err = oomevent.Watch(filepath.Join("/sys/fs/cgroup/memory", dir))
	}
	if err != nil {
		logrus.WithError(err).WithField("container", c.ID).Debug("no OOM notifications")
		return nil
	}
	c.mu.Lock()
	c.oom = w
	c.mu.Unlock()
	return w
}

// cgroups is the node's cgroup reader, made once.
func (m *Manager) cgroups() *cgstats.Reader {
	m.cgOnce.Do(func() { m.cg = cgstats.New("/sys/fs/cgroup") })
	return m.cg
}

// update changes the container's status and writes its record before the change is
// visible (store.Tracked); every change of status goes through it or saveMeta.
func (m *Manager) update(c *Container, fn func(*Status)) error {
	return c.status.Update(m.opts.Store, c.ID, nil, fn)
}

// saveMeta is update that writes the container's metadata too (fn may be nil).
func (m *Manager) saveMeta(c *Container, fn func(*Status)) error {
	return c.status.Update(m.opts.Store, c.ID, &c.Metadata, fn)
}

// publish sends a lifecycle event with its pod's status and those of the pod's
// containers, as containerd does: kubelet's Evented PLEG replaces its view of the pod with
// what an event carries, so one container's status alone would hide the others.
func (m *Manager) publish(c *Container, t runtimeapi.ContainerEventType) {
	if m.opts.Events == nil {
		return
	}
	pod, _, _ := m.opts.Sandboxes.CRIStatus(c.SandboxID, false)
	statuses := m.PodStatuses(c.SandboxID)
	if !slices.ContainsFunc(statuses, func(s *runtimeapi.ContainerStatus) bool { return s.Id == c.ID }) {
		// A removed container is unlisted before its DELETED event, which still names it.
		statuses = append(statuses, criStatus(c))
	}
	m.opts.Events.Publish(&runtimeapi.ContainerEventResponse{
		ContainerId: c.ID, ContainerEventType: t, CreatedAt: time.Now().UnixNano(),
		PodSandboxStatus: pod, ContainersStatuses: statuses,
	})
}

// All returns every container, whatever its state.
func (m *Manager) All() []*Container { return m.index.All() }

// Get finds a container by ID or unique ID prefix.
func (m *Manager) Get(id string) (*Container, error) { return m.index.Get(id) }

// OfSandbox is the containers of a pod (none for a pod it does not know).
func (m *Manager) OfSandbox(sandboxID string) []*Container { return m.index.OfPod(sandboxID) }

// Spec reads the container's OCI spec from its bundle.
func (c *Container) Spec() (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
