package container

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cdidevices"
	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/cgroups/podcgroup"
	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/events"
	"github.com/rtshimd/rtshimd/internal/failpoint"
	"github.com/rtshimd/rtshimd/internal/fsafe/regfile"
	"github.com/rtshimd/rtshimd/internal/idmap"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/lsm"
	"github.com/rtshimd/rtshimd/internal/monitor"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/phasetime"
	"github.com/rtshimd/rtshimd/internal/retry"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/stats/statscache"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Options wire a Manager.
type Options struct {
	Store  *store.Store
	RunDir string // <run_root>/containers
	// CheckpointDir is where checkpoints are made before their archive is written
	// (<state_root>/checkpoints, root's only; emptied at start).
	CheckpointDir string
	// Runtimes makes the runtime of a recovered record from the row it kept.
	Runtimes       kind.Maker
	Images         Images
	LSM            lsm.Host // what the node's AppArmor and SELinux can do
	Sandboxes      *sandbox.Manager
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
	// StatsPeriod is how often the collector reads every running container's and ready
	// pod's usage (stats.collection_period); 0 reads at each stats call.
	StatsPeriod time.Duration
}

// Images is what containers take of the image service: rootfs layers, image volumes, an
// image's config and names. The daemon's is image.Service; the lifecycle unit tests give
// a fake one.
type Images interface {
	CreateRootfs(id, ref string, uids, gids []specs.LinuxIDMapping) (rootfs, imageID string, err error)
	RemoveRootfs(id string) error
	RootfsUsage(id string) (image.Usage, error)
	MountVolume(owner string, index int, ref string, uids, gids []specs.LinuxIDMapping) (*image.Volume, error)
	RemoveVolumes(owner string) error
	VolumeOwners() ([]string, error)
	Config(ref string) ([]byte, error)
	Status(ref string) (*image.Image, error)
}

var _ Images = (*image.Service)(nil)

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

	mu         sync.RWMutex
	containers map[string]*Container
	// bySandbox indexes containers by their pod: kubelet's stats calls and the collector
	// ask for each pod's containers, and a scan of all of them per pod was O(pods²)
	// (a third of the daemon's idle CPU at 1,000 pods).
	bySandbox map[string]map[string]*Container
	names     map[string]string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Stats: the cgroup reader, the latest readings of running containers and ready pods
	// (each with its CPU rate), and the collector that takes them.
	cgOnce    sync.Once
	cg        *cgstats.Reader
	ctrStats  statscache.Cache[sample]
	podStats  statscache.Cache[podSample]
	collector *statscache.Collector
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
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{opts: opts, containers: map[string]*Container{}, bySandbox: map[string]map[string]*Container{}, names: map[string]string{}, ctx: ctx, cancel: cancel}
	m.collector = statscache.NewCollector(0, m.collectUnits, m.collect)
	m.SetStatsPeriod(opts.StatsPeriod)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.collector.Run(ctx)
	}()
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

func newID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Create makes a container in a ready sandbox: its rootfs from the image, its spec and
// bundle, and the runtime's `create` under a monitor. On error nothing is left.
func (m *Manager) Create(ctx context.Context, sandboxID string, cfg *runtimeapi.ContainerConfig) (string, error) {
	if cfg == nil || cfg.Metadata == nil || cfg.Metadata.Name == "" {
		return "", invalid("config.metadata.name is required")
	}
	if cfg.GetImage().GetImage() == "" {
		return "", invalid("config.image.image is required")
	}
	// kubelet sends <container>/<attempt>.log; anything that leaves the pod's log
	// directory would have the monitor, as root, write elsewhere on the node.
	if p := cfg.GetLogPath(); p != "" && (!filepath.IsLocal(p) || filepath.Clean(p) == ".") {
		return "", invalid("config.log_path %q must be a relative path below the pod's log_directory", p)
	}
	if _, err := oci.CRIStopSignal(cfg.GetStopSignal()); err != nil {
		return "", err
	}
	tm := phasetime.Start()
	sb, err := m.opts.Sandboxes.Get(sandboxID)
	if err != nil {
		return "", err
	}
	release, err := sb.Use()
	if err != nil {
		return "", err
	}
	defer release()
	if m.opts.NRI != nil {
		// A plugin that connects meanwhile finds the container in Synchronize, or hears of it.
		defer m.opts.NRI.BlockSync()()
	}
	tm.Mark("lookup")
	name := fmt.Sprintf("%s_%s_%d", cfg.Metadata.Name, sb.Name, cfg.Metadata.Attempt)
	id := newID()
	m.mu.Lock()
	if other, ok := m.names[name]; ok {
		m.mu.Unlock()
		return "", fmt.Errorf("container name %q is already used by container %s; remove it first: %w", name, other, errdefs.ErrAlreadyExists)
	}
	m.names[name] = id
	m.mu.Unlock()

	raw, err := encodeConfig(cfg)
	if err != nil {
		m.releaseName(name, id)
		return "", err
	}
	c := &Container{
		Metadata: Metadata{
			ID: id, Name: name, SandboxID: sb.ID, Handler: sb.Handler,
			Kind: sb.Kind, Runtime: sb.Runtime, PodDir: sb.InfraDir(), Config: raw,
			ImageRef: cfg.Image.Image, ImageName: cfg.Image.UserSpecifiedImage, CreatedAt: time.Now().UnixNano(),
			Dir:         filepath.Join(m.opts.RunDir, id),
			CgroupsPath: cgpath.For(m.opts.CgroupDriver == config.SystemdDriver, sb.PodConfig().GetLinux().GetCgroupParent(), id),
		},
		config: cfg,
		rt:     sb.KindRuntime(),
		status: store.NewTracked(Status{State: StateCreating}),
		exited: make(chan struct{}),
	}
	if dir, p := sb.PodConfig().GetLogDirectory(), cfg.GetLogPath(); dir != "" && p != "" {
		c.LogDir = filepath.Clean(dir)
		c.LogPath = filepath.Join(c.LogDir, p)
	}
	log := logrus.WithFields(logrus.Fields{"container": id, "name": name, "sandbox": sb.ID})
	if err := m.create(ctx, c, sb, tm); err != nil {
		log.WithError(err).Warn("create container failed; cleaning up")
		if c.nriCreated {
			// Plugins that accepted it hear it is gone, also when the request's deadline
			// is what failed it (an expired context would reach no plugin).
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kind.DefaultTimeout)
			m.opts.NRI.RemoveContainer(uctx, c)
			cancel()
		}
		if cerr := m.cleanup(c); cerr != nil {
			m.keepForCleanup(c, err, cerr)
			return "", err
		}
		m.releaseName(name, id)
		return "", err
	}
	// Listed before the pod's lifecycle lock is released: a StopPodSandbox waiting for it
	// sees this container.
	m.mu.Lock()
	m.add(c)
	m.mu.Unlock()
	_ = failpoint.Fail("create-container/done") // a crash before the reply; an error is not one to give here
	log.Info("container created")
	m.publish(c, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	tm.Mark("publish")
	if m.opts.NRI != nil {
		m.opts.NRI.PostCreateContainer(ctx, c)
		tm.Mark("nri_post")
	}
	tm.Log(logrus.Fields{"container": id}, "container create timing")
	return id, nil
}

func (m *Manager) releaseName(name, id string) {
	m.mu.Lock()
	if m.names[name] == id {
		delete(m.names, name)
	}
	m.mu.Unlock()
}

func (m *Manager) create(ctx context.Context, c *Container, sb *sandbox.Sandbox, tm *phasetime.Timer) error {
	cfg := c.config
	if err := os.MkdirAll(c.Dir, 0o711); err != nil {
		return fmt.Errorf("create container dir: %w", err)
	}
	if err := m.saveMeta(c, nil); err != nil {
		return err
	}
	tm.Mark("record")
	if err := failpoint.Fail("create-container/recorded"); err != nil {
		return err
	}
	var uids, gids []specs.LinuxIDMapping
	if idm := sb.IDMappings; idm != nil {
		uids, gids = idm.UIDs, idm.GIDs
	}
	rootfs, imageID, err := m.opts.Images.CreateRootfs(c.ID, c.ImageRef, uids, gids)
	tm.Mark("rootfs")
	if errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("config.image.image %q is not pulled on this node (pull it first): %w", c.ImageRef, errdefs.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if sb.IDMappings != nil {
		if rootfs, err = bindUsernsRootfs(c.Dir, rootfs, sb.IDMappings.UIDs[0].HostID, sb.IDMappings.GIDs[0].HostID); err != nil {
			return err
		}
	}
	c.Rootfs, c.ImageID = rootfs, imageID
	c.ImageName, c.ImageRepoDigest = m.imageNames(c.ID, cfg.Image, imageID)
	if err := failpoint.Fail("create-container/rootfs"); err != nil {
		return err
	}
	imgCfg, err := m.imageConfig(imageID)
	if err != nil {
		return err
	}
	if c.StopSignal, err = stopSignal(cfg, imgCfg); err != nil {
		return fmt.Errorf("image %s: %w", c.ImageRef, err)
	}
	tm.Mark("image_config")
	opts, err := m.specOptions(c, sb, imgCfg)
	if err != nil {
		return err
	}
	if opts.ImageVolumes, err = m.mountImageVolumes(c, sb.IDMappings); err != nil {
		return err
	}
	spec, err := oci.ContainerSpec(opts)
	if err != nil {
		return err
	}
	if sb.UserNS != "" {
		if err := idmapMounts(c.Dir, sb.UserNS, cfg, spec); err != nil {
			return err
		}
	}
	// CDI edits come after the rest of the spec, so the vendor's device nodes, environment
	// and mounts win (as in containerd), and before the kind's adjustments, which apply to
	// the final spec.
	devices, err := m.opts.CDI.Inject(spec, cfg)
	if err != nil {
		return fmt.Errorf("inject CDI devices: %w", err)
	}
	if len(devices) > 0 {
		logrus.WithFields(logrus.Fields{"container": c.ID, "cdi_devices": devices}).Info("CDI devices injected")
	}
	tm.Mark("spec")
	// NRI plugins see the spec as the CRI built it, before the kind's changes, and their
	// adjustments go through the kind's like the rest.
	if m.opts.NRI != nil {
		undo, err := m.opts.NRI.CreateContainer(ctx, c, spec)
		c.nriCreated = undo
		if err != nil {
			return err
		}
		if spec.Linux != nil && spec.Linux.CgroupsPath != "" {
			c.CgroupsPath = spec.Linux.CgroupsPath // a plugin may move it
		}
		tm.Mark("nri")
	}
	c.rt.AdjustSpec(spec)
	c.TerminationLog = terminationLog(cfg)
	if spec.Process != nil {
		c.User = &spec.Process.User
	}
	if res := spec.Linux.Resources; res != nil {
		b, _ := json.Marshal(res)
		// Written with the step that ends creation.
		_ = c.status.UpdateIf(m.opts.Store, c.ID, nil, func(s *Status) bool { s.Resources = b; return false })
	}
	if err := oci.WriteBundle(c.Dir, spec); err != nil {
		return err
	}
	if c.LogPath != "" {
		// The log directory is kubelet's; below it nothing is followed (a symlink planted
		// at the log path fails the create here, before the supervisor opens it).
		if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
			return fmt.Errorf("create log directory: %w", err)
		}
		rel, err := monitor.LogRel(c.LogDir, c.LogPath)
		if err == nil {
			err = monitor.PrepareLog(c.LogDir, rel)
		}
		if err != nil {
			return fmt.Errorf("config.log_path %q: %w: %w", cfg.GetLogPath(), err, errdefs.ErrFailedPrecondition)
		}
	}
	tm.Mark("bundle")
	p, err := c.rt.Create(ctx, c.task())
	if err != nil {
		return err
	}
	tm.Mark("runtime_create")
	if err := failpoint.Fail("create-container/runtime-created"); err != nil {
		return err
	}
	// The final record, metadata included: the one written at the start only had to
	// name what cleanup needs.
	err = m.saveMeta(c, func(s *Status) {
		s.Pid, s.MonitorPid = p.Pid, p.SupervisorPid
		s.State = StateCreated
	})
	m.watch(c, false)
	tm.Mark("persist")
	return err
}

// kubeletTerminationPath is the annotation by which kubelet names a container's
// termination message path; kubelet then reads the file itself (from the status mounts)
// and appends it to the status message.
const kubeletTerminationPath = "io.kubernetes.container.terminationMessagePath"

// terminationLog is the host file whose content becomes the status message: the mount at
// /dev/termination-log (the path kubelet uses by default). Not for kubelet's own
// containers, or kubelet would show the message twice.
func terminationLog(cfg *runtimeapi.ContainerConfig) string {
	if _, ok := cfg.GetAnnotations()[kubeletTerminationPath]; ok {
		return ""
	}
	for _, m := range cfg.GetMounts() {
		if m.ContainerPath == "/dev/termination-log" {
			return m.HostPath
		}
	}
	return ""
}

// stopSignal is what StopContainer sends, as the runtime's kill takes it: the config's
// stop_signal (KEP-4960: the pod spec's lifecycle.stopSignal) over the image's STOPSIGNAL,
// else SIGTERM.
func stopSignal(cfg *runtimeapi.ContainerConfig, img ocispec.ImageConfig) (string, error) {
	if s, err := oci.CRIStopSignal(cfg.GetStopSignal()); err != nil || s != "" {
		return s, err
	}
	return oci.StopSignal(img.StopSignal)
}

// imageNames resolves the image's name and repo digest as the container's status shows
// them (Metadata.ImageName, ImageRepoDigest), once: statuses never ask the image store.
func (m *Manager) imageNames(id string, spec *runtimeapi.ImageSpec, imageID string) (name, repoDigest string) {
	img, err := m.opts.Images.Status(imageID)
	if err != nil {
		// Only the names are missing (RemoveImage may have hidden the image meanwhile):
		// the status shows what the config said and the ID.
		logrus.WithError(err).WithFields(logrus.Fields{"container": id, "image": imageID}).Warn("image names for the container's status")
		img = nil
	}
	return imageNames(spec, img)
}

// imageNames is the name status.image.image shows (user_specified_image, else the image's
// first tag, else config.image.image) and the image's repo digest in that name's
// repository (else its first; "" for none), as containerd and CRI-O show them.
func imageNames(spec *runtimeapi.ImageSpec, img *image.Image) (name, repoDigest string) {
	name = spec.GetUserSpecifiedImage()
	if name == "" && img != nil && len(img.RepoTags) > 0 {
		name = img.RepoTags[0]
	}
	if name == "" {
		name = spec.GetImage()
	}
	if img != nil {
		repoDigest = img.RepoDigest(name)
	}
	return name, repoDigest
}

func (m *Manager) imageConfig(imageID string) (ocispec.ImageConfig, error) {
	raw, err := m.opts.Images.Config(imageID)
	if err != nil {
		return ocispec.ImageConfig{}, fmt.Errorf("image config of %s: %w", imageID, err)
	}
	var img ocispec.Image
	if err := json.Unmarshal(raw, &img); err != nil {
		return ocispec.ImageConfig{}, fmt.Errorf("image config of %s: %w", imageID, err)
	}
	return img.Config, nil
}

// specOptions gathers what the spec builder needs from the pod and the container config.
func (m *Manager) specOptions(c *Container, sb *sandbox.Sandbox, imgCfg ocispec.ImageConfig) (oci.ContainerOptions, error) {
	cfg := c.config
	podCfg := sb.PodConfig()
	podNS := podCfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	o := oci.ContainerOptions{
		ID: c.ID, Config: cfg, SandboxConfig: podCfg, Image: imgCfg, Rootfs: c.Rootfs,
		SandboxID: sb.ID,
		NetNS:     sb.NetNS, IPCNS: sb.IPCNS, UTSNS: sb.UTSNS,
		HostNetwork:    podNS.GetNetwork() == runtimeapi.NamespaceMode_NODE,
		HostIPC:        podNS.GetIpc() == runtimeapi.NamespaceMode_NODE,
		HostnamePath:   sb.PodFile(sandbox.HostnameFile),
		HostsPath:      sb.PodFile(sandbox.HostsFile),
		ResolvPath:     sb.PodFile(sandbox.ResolvFile),
		ShmPath:        sb.Shm,
		CgroupsPath:    c.CgroupsPath,
		OOMScoreAdjMin: m.opts.OOMScoreAdjMin,
		Capabilities:   m.opts.Capabilities,
		LSM:            m.opts.LSM,
		UserNS:         sb.UserNS,
		IDMappings:     sb.IDMappings,
	}
	// A container is in its pod's user namespace: kubelet sends the pod's options again.
	if u := ns.GetUsernsOptions(); u != nil && (u.GetMode() == runtimeapi.NamespaceMode_POD) != (sb.UserNS != "") {
		return o, fmt.Errorf("config.linux.security_context.namespace_options.userns_options.mode %s differs from pod sandbox %s's (%s): a container shares its pod's user namespace: %w",
			u.GetMode(), sb.ID, podNS.GetUsernsOptions().GetMode(), errdefs.ErrInvalidArgument)
	}
	if o.HostIPC {
		o.ShmPath = "/dev/shm"
	}
	switch ns.GetPid() {
	case runtimeapi.NamespaceMode_NODE:
		o.HostPID = true
	case runtimeapi.NamespaceMode_POD:
		pid := sb.Status().InfraPid
		if !sb.Infra || pid == 0 {
			return o, fmt.Errorf("config.linux.security_context.namespace_options.pid POD: pod sandbox %s was created without a shared PID namespace: %w", sb.ID, errdefs.ErrFailedPrecondition)
		}
		path, err := pidNamespaceOf(pid, sb.ID)
		if err != nil {
			return o, fmt.Errorf("config.linux.security_context.namespace_options.pid POD: pod sandbox %s's infra container: %w; the pod cannot take containers that share its PID namespace: stop and remove it (kubelet makes it again)", sb.ID, err)
		}
		o.PIDNS = path
	case runtimeapi.NamespaceMode_TARGET:
		target, err := m.Get(ns.GetTargetId())
		if err != nil {
			return o, fmt.Errorf("config.linux.security_context.namespace_options.target_id %q: %w", ns.GetTargetId(), err)
		}
		if target.SandboxID != sb.ID || target.Status().State != StateRunning {
			return o, fmt.Errorf("config.linux.security_context.namespace_options.target_id %q is not a running container of pod %s: %w", ns.GetTargetId(), sb.ID, errdefs.ErrFailedPrecondition)
		}
		path, err := pidNamespaceOf(target.Status().Pid, target.ID)
		if err != nil {
			return o, fmt.Errorf("config.linux.security_context.namespace_options.target_id %q: %w; target a running container", ns.GetTargetId(), err)
		}
		o.PIDNS = path
	}
	return o, nil
}

// procRoot is /proc; tests point it at a tree of their own.
var procRoot = "/proc"

// pidNamespaceOf is the path of the PID namespace of process pid, which a record names as
// the process of owner (an infra or a container, whose ID its cgroup path carries). A
// recorded pid may have been reused by another process since (the owner died while the
// daemon was down): joining its namespace would put the container beside a stranger's
// processes. So the process must still be in owner's cgroup, before and after the
// namespace is looked at.
func pidNamespaceOf(pid int, owner string) (string, error) {
	if pid <= 0 {
		return "", fmt.Errorf("no process recorded: %w", errdefs.ErrFailedPrecondition)
	}
	path := filepath.Join(procRoot, strconv.Itoa(pid), "ns", "pid")
	check := func() error {
		b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
		if err != nil || !strings.Contains(string(b), owner) {
			return fmt.Errorf("its process (pid %d) is gone (the pid is not in its cgroup now): %w", pid, errdefs.ErrFailedPrecondition)
		}
		return nil
	}
	if err := check(); err != nil {
		return "", err
	}
	before, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("its process (pid %d) is gone: %w", pid, errdefs.ErrFailedPrecondition)
	}
	if err := check(); err != nil {
		return "", err
	}
	if after, err := os.Stat(path); err != nil || !os.SameFile(before, after) {
		return "", fmt.Errorf("its process (pid %d) changed while it was looked at: %w", pid, errdefs.ErrFailedPrecondition)
	}
	return path, nil
}

// watch follows the container through its runtime and records its exit. A recovered
// container that was created but never started, and whose supervision is gone, can never
// start: it is recorded exited.
func (m *Manager) watch(c *Container, recovered bool) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		e, ok, err := c.rt.Wait(m.ctx, c.task())
		if err != nil {
			return // daemon shutting down
		}
		m.recordExit(c, e, ok)
		if recovered && !ok && c.Status().State != StateExited {
			_ = m.update(c, func(s *Status) { s.State = StateExited; s.ExitCode = 255; s.Reason = "Unknown" })
			c.markExited()
		}
	}()
}

func (m *Manager) recordExit(c *Container, e kind.Exit, ok bool) {
	st := c.Status()
	if st.State == StateExited {
		c.markExited()
		return
	}
	lostMsg := ""
	if !ok {
		if st.State == StateCreated || st.State == StateCreating {
			c.markExited() // never started; removal ends its monitor
			return
		}
		// The supervisor died without recording an exit. Its container may still run, with
		// nobody holding its output; end it rather than report a live process as exited.
		e = c.rt.KillLost(m.ctx, c.task())
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
	c.markExited()
	m.ctrStats.Delete(c.ID) // a container that does not run has no usage to serve
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

// oomKilled reads the kernel's OOM-kill count of the container's memory cgroup, for
// either cgroup driver and version.
func (m *Manager) oomKilled(c *Container) bool {
	dir, err := cgpath.Dir(c.CgroupsPath)
	if err != nil {
		return false
	}
	return m.cgroups().OOMKills(dir) > 0
}

// update changes the container's status and writes its record before the change is
// visible (store.Tracked); every change of status goes through it or saveMeta.
func (m *Manager) update(c *Container, fn func(*Status)) error {
	return c.status.Update(m.opts.Store, c.ID, nil, fn)
}

// saveMeta is update that writes the container's metadata too (fn may be nil).
func (m *Manager) saveMeta(c *Container, fn func(*Status)) error {
	if fn == nil {
		fn = func(*Status) {}
	}
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
func (m *Manager) All() []*Container {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Container, 0, len(m.containers))
	for _, c := range m.containers {
		out = append(out, c)
	}
	return out
}

// Get finds a container by ID or unique ID prefix.
func (m *Manager) Get(id string) (*Container, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return idmap.Find(m.containers, id, "container_id", "container")
}

// Start starts a created container.
func (m *Manager) Start(ctx context.Context, id string) error {
	c, err := m.Get(id)
	if err != nil {
		return err
	}
	sb, err := m.opts.Sandboxes.Get(c.SandboxID)
	if err != nil {
		return fmt.Errorf("container %s: %w", c.ID, err)
	}
	release, err := sb.Use()
	if err != nil {
		return fmt.Errorf("start container %s: %w", c.ID, err)
	}
	defer release()
	c.op.Lock()
	defer c.op.Unlock()
	if st := c.Status().State; st != StateCreated {
		return fmt.Errorf("container %s is %s, not created: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	tm := phasetime.Start()
	// The start time is taken before the runtime is asked: a container that exits at
	// once may be reported exited before the command returns, and its finish time must
	// not precede its start.
	if m.opts.NRI != nil {
		if err := m.opts.NRI.StartContainer(ctx, c); err != nil {
			return err
		}
		tm.Mark("nri")
	}
	started := time.Now().UnixNano()
	if err := c.rt.Start(ctx, c.task()); err != nil {
		return err
	}
	tm.Mark("runtime_start")
	// The runtime runs it now: a failure from here on must not leave it running while
	// its record says created (kubelet would start it again, or a second copy). As
	// containerd, it is killed; its exit is then recorded as any other.
	killStarted := func(err error) error {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
		defer cancel()
		if kerr := c.rt.Kill(kctx, c.task(), "SIGKILL", true); kerr != nil {
			logrus.WithError(kerr).WithField("container", c.ID).Error("kill a container whose start could not be recorded")
		}
		return fmt.Errorf("start container %s: the runtime started it, then: %w (it was killed)", c.ID, err)
	}
	if err := failpoint.Fail("start-container/runtime-started"); err != nil {
		return killStarted(err)
	}
	if err := m.update(c, func(s *Status) {
		if s.State == StateCreated {
			s.State = StateRunning
		}
		s.StartedAt = started
	}); err != nil {
		return killStarted(err)
	}
	_ = failpoint.Fail("start-container/done") // a crash before the reply
	tm.Mark("persist")
	logrus.WithField("container", c.ID).Info("container started")
	m.publish(c, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	tm.Mark("publish")
	tm.Log(logrus.Fields{"container": c.ID}, "container start timing")
	if m.opts.NRI != nil {
		m.opts.NRI.PostStartContainer(ctx, c)
	}
	return nil
}

// killWait bounds the wait for a container to die after SIGKILL.
const killWait = 10 * time.Second

// Stop stops a running container: its stop signal, then SIGKILL after timeout seconds.
// A container that is not running (or gone) is not an error.
func (m *Manager) Stop(ctx context.Context, id string, timeout int64) error {
	c, err := m.Get(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	c.op.Lock()
	defer c.op.Unlock()
	if err := m.stop(ctx, c, timeout); err != nil {
		return err
	}
	if m.opts.NRI != nil && c.Status().State == StateExited {
		m.opts.NRI.StopContainer(ctx, c)
	}
	return nil
}

func (m *Manager) stop(ctx context.Context, c *Container, timeout int64) error {
	if st := c.Status().State; st != StateRunning && st != StateUnknown {
		return nil
	}
	log := logrus.WithField("container", c.ID)
	if timeout > 0 {
		if err := c.rt.Kill(ctx, c.task(), c.StopSignal, false); err != nil && !m.hasExited(c) {
			log.WithError(err).Warn("stop signal")
		}
		select {
		case <-c.exited:
			return nil
		case <-time.After(time.Duration(timeout) * time.Second):
			log.WithField("timeout", timeout).Info("container ignored its stop signal; killing it")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := c.rt.Kill(ctx, c.task(), "SIGKILL", true); err != nil && !m.hasExited(c) {
		return fmt.Errorf("kill container %s: %w", c.ID, err)
	}
	if err := failpoint.Fail("stop-container/killed"); err != nil {
		return err
	}
	select {
	case <-c.exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("container %s did not exit %v after SIGKILL", c.ID, killWait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Manager) hasExited(c *Container) bool {
	select {
	case <-c.exited:
		return true
	case <-time.After(100 * time.Millisecond):
		return false
	}
}

// Remove removes a container, killing it if it runs. A container that is gone is not an
// error.
func (m *Manager) Remove(ctx context.Context, id string) error {
	c, err := m.Get(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	c.op.Lock()
	defer c.op.Unlock()
	m.mu.RLock()
	_, present := m.containers[c.ID]
	m.mu.RUnlock()
	if !present {
		return nil
	}
	// A container kept because its create and cleanup failed never ran, and plugins were
	// told of its removal already: only its cleanup is left.
	if st := c.Status(); st.State != StateUnknown || st.Reason != reasonCleanupFailed {
		if err := m.stop(ctx, c, 0); err != nil {
			return err
		}
		if m.opts.NRI != nil {
			// From the plugins' RemoveContainer to the container's leaving the list, no
			// plugin is synchronized: one that connects now would otherwise be given the
			// container and miss its removal (the callers of Remove hold no block).
			defer m.opts.NRI.BlockSync()()
			// Before the bundle goes: plugins get the container with its spec.
			m.opts.NRI.RemoveContainer(ctx, c)
		}
	}
	if err := m.cleanup(c); err != nil {
		return err
	}
	m.mu.Lock()
	m.forget(c)
	if m.names[c.Name] == c.ID {
		delete(m.names, c.Name)
	}
	m.mu.Unlock()
	m.ctrStats.Delete(c.ID)
	logrus.WithField("container", c.ID).Info("container removed")
	m.publish(c, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	return nil
}

// reasonCleanupFailed marks a container kept because its cleanup failed.
const reasonCleanupFailed = "CleanupFailed"

// cleanupRetry is how often a container whose cleanup failed is tried again.
var cleanupRetry = 5 * time.Second

// keepForCleanup keeps a container whose create failed and whose cleanup failed too: it
// still holds what cleanup could not undo (a mount, runtime state, a layer), so it stays
// listed, UNKNOWN with the reason, its name reserved and its record kept, and cleanup is
// retried in the background until it succeeds (or kubelet's RemoveContainer does it).
// Dropping it would leak whatever it holds with nothing left to find it by.
func (m *Manager) keepForCleanup(c *Container, createErr, cleanupErr error) {
	log := logrus.WithFields(logrus.Fields{"container": c.ID, "name": c.Name})
	log.WithError(cleanupErr).Error("cleanup of failed container failed; keeping it listed as unknown and retrying")
	_ = m.update(c, func(s *Status) {
		s.State, s.Reason = StateUnknown, reasonCleanupFailed
		s.Message = fmt.Sprintf("create failed (%v) and its cleanup failed (%v); retrying", createErr, cleanupErr)
	})
	c.markExited()
	m.mu.Lock()
	m.add(c)
	m.mu.Unlock()
	m.retryCleanup(c)
}

// retryCleanup removes a container kept for cleanup in the background, every cleanupRetry,
// until it succeeds. A daemon that stops first leaves the record, and the next one's
// recovery takes it up again.
func (m *Manager) retryCleanup(c *Container) {
	log := logrus.WithFields(logrus.Fields{"container": c.ID, "name": c.Name, "step": "cleanup of a failed create"})
	retry.Every(m.ctx, &m.wg, cleanupRetry, log, func() error { return m.Remove(m.ctx, c.ID) })
}

// cleanup undoes everything a container may hold, whatever state it reached, and deletes
// its record. Safe to repeat.
func (m *Manager) cleanup(c *Container) error {
	if err := failpoint.Fail("container-cleanup"); err != nil {
		return fmt.Errorf("clean up container %s: %w", c.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kind.DefaultTimeout)
	defer cancel()
	var errs []error
	if c.rt != nil {
		if err := c.rt.Delete(ctx, c.task()); err != nil {
			errs = append(errs, fmt.Errorf("delete container: %w", err))
		}
		if err := failpoint.Fail("remove-container/runtime-deleted"); err != nil {
			return err
		}
		if len(errs) == 0 {
			if err := podcgroup.RemoveLeft(c.CgroupsPath, c.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) == 0 {
		// Never pull the filesystem from under a process the runtime failed to remove.
		if err := unmountUsernsMounts(c.Dir); err != nil {
			errs = append(errs, err)
		} else {
			if err := m.opts.Images.RemoveVolumes(c.ID); err != nil {
				errs = append(errs, err)
			}
			if err := m.opts.Images.RemoveRootfs(c.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("clean up container %s: %w", c.ID, errors.Join(errs...))
	}
	if err := failpoint.Fail("remove-container/rootfs-removed"); err != nil {
		return err
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("clean up container %s: %w", c.ID, err)
	}
	return c.status.Forget(m.opts.Store, c.ID)
}

// StopAll stops every container of a sandbox (StopPodSandbox).
func (m *Manager) StopAll(ctx context.Context, sandboxID string) error {
	m.podStats.Delete(sandboxID) // a stopped pod is not in the stats lists
	var errs []error
	for _, c := range m.ofSandbox(sandboxID) {
		if err := m.Stop(ctx, c.ID, 0); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemoveAll removes every container of a sandbox (RemovePodSandbox).
func (m *Manager) RemoveAll(ctx context.Context, sandboxID string) error {
	m.podStats.Delete(sandboxID)
	var errs []error
	for _, c := range m.ofSandbox(sandboxID) {
		if err := m.Remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) ofSandbox(sandboxID string) []*Container {
	m.mu.RLock()
	defer m.mu.RUnlock()
	of := m.bySandbox[sandboxID]
	if len(of) == 0 {
		return nil
	}
	out := make([]*Container, 0, len(of))
	for _, c := range of {
		out = append(out, c)
	}
	return out
}

// add lists c; m.mu is held.
func (m *Manager) add(c *Container) {
	m.containers[c.ID] = c
	of := m.bySandbox[c.SandboxID]
	if of == nil {
		of = map[string]*Container{}
		m.bySandbox[c.SandboxID] = of
	}
	of[c.ID] = c
}

// forget unlists c; m.mu is held.
func (m *Manager) forget(c *Container) {
	delete(m.containers, c.ID)
	if of := m.bySandbox[c.SandboxID]; of != nil {
		delete(of, c.ID)
		if len(of) == 0 {
			delete(m.bySandbox, c.SandboxID)
		}
	}
}

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
