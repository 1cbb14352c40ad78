package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/failpoint"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/monitor"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/phasetime"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/store"
)

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
	raw, err := store.MarshalConfig(cfg, "container config")
	if err != nil {
		return "", err
	}
	tm := phasetime.Start(ctx, "CreateContainer")
	sb, err := m.opts.Sandboxes.Get(sandboxID)
	if err != nil {
		return "", err
	}
	if err := checkPropagation(cfg, sb.KindRuntime(), sb.Handler); err != nil {
		return "", err
	}
	restore := checkpointArchive(cfg.GetImage().GetImage())
	if restore {
		if err := m.archiveChecks(cfg, sb); err != nil {
			return "", err
		}
	}
	release, err := sb.Use()
	if err != nil {
		return "", err
	}
	defer release()
	tm.Mark("lookup")
	name := fmt.Sprintf("%s_%s_%d", cfg.Metadata.Name, sb.Name, cfg.Metadata.Attempt)
	id, release, err := m.index.Reserve(name)
	if err != nil {
		return "", err
	}
	defer release() // frees the name unless the create listed its object

	c := &Container{
		Metadata: Metadata{
			ID: id, Name: name, SandboxID: sb.ID, Handler: sb.Handler,
			Kind: sb.Kind, Runtime: sb.Runtime, PodDir: sb.ContainerDir(), Config: raw,
			ImageRef: cfg.Image.Image, ImageName: cfg.Image.UserSpecifiedImage, CreatedAt: time.Now().UnixNano(),
			Dir:         filepath.Join(m.opts.RunDir, id),
			CgroupsPath: cgpath.For(m.opts.CgroupDriver == config.SystemdDriver, sb.PodConfig().GetLinux().GetCgroupParent(), id),
		},
		config: cfg,
		rt:     sb.KindRuntime(),
		status: store.NewTracked(Status{State: StateCreating}),
		exited: registry.NewExit(),
	}
	// Plugins' synchronization is held off from the container's NRI CreateContainer on
	// (create takes it there), not during what comes before: a restore's copy, pull and
	// decode would otherwise hold every plugin's (re)connection, and with it every create
	// on the node (security re-read N6). A plugin that connects before finds no container
	// and then hears of it; one that connects after finds it in Synchronize.
	defer func() {
		if c.unblockNRI != nil {
			c.unblockNRI()
		}
	}()
	if restore {
		c.Restore = filepath.Join(m.opts.RestoreDir, id)
	}
	if dir, p := sb.PodConfig().GetLogDirectory(), cfg.GetLogPath(); dir != "" && p != "" {
		c.LogDir = filepath.Clean(dir)
		c.LogPath = filepath.Join(c.LogDir, p)
	}
	log := logrus.WithFields(logrus.Fields{"container": id, "name": name, "sandbox": sb.ID})
	err = m.create(ctx, c, sb, tm)
	if err == nil {
		// The last step: the container is made and recorded created, not yet listed or
		// answered. A failure here undoes it as any other would.
		err = failpoint.Fail("create-container/done")
	}
	if err != nil {
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
		return "", err
	}
	// Listed before the pod's lifecycle lock is released: a StopPodSandbox waiting for it
	// sees this container.
	m.index.Add(c)
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
	imgSpec := cfg.Image
	var restore *restoreSource
	if c.Restore != "" {
		var err error
		if restore, err = unpackCheckpoint(cfg.Image.Image, c.Restore, m.opts.MaxCheckpointSize, m.verifySignature); err != nil {
			return fmt.Errorf("config.image.image %q: checkpoint archive: %w: %w", cfg.Image.Image, err, errdefs.ErrInvalidArgument)
		}
		imgSpec = restore.imageSpec()
		c.ImageRef = imgSpec.Image
		tm.Mark("unpack")
	}
	rootfs, imageID, err := m.opts.Images.CreateRootfs(sb.Handler, c.ID, c.ImageRef, uids, gids)
	tm.Mark("rootfs")
	if errors.Is(err, errdefs.ErrNotFound) {
		if restore != nil {
			return fmt.Errorf("config.image.image %q: the checkpoint's image %s (%s) is not pulled on this node (pull it first): %w", cfg.Image.Image, c.ImageRef, restore.config.RootfsImage, err)
		}
		return fmt.Errorf("config.image.image %q is not pulled on this node (pull it first): %w", c.ImageRef, err)
	}
	if err != nil {
		return err
	}
	if restore == nil {
		// Told by the reference the pod named (kubelet sends it as user_specified_image,
		// the ID as image): the manifest pulled for that name, not the ID's last pull.
		ref := cfg.GetImage().GetUserSpecifiedImage()
		if ref == "" {
			ref = cfg.GetImage().GetImage()
		}
		name, err := m.opts.Images.CheckpointName(sb.Handler, imageID, ref)
		if err != nil {
			return err
		}
		if name != "" {
			if restore, rootfs, imageID, err = m.restoreFromImage(ctx, c, sb, rootfs, uids, gids); err != nil {
				return err
			}
			imgSpec = restore.imageSpec()
			tm.Mark("checkpoint_image")
		}
	}
	if restore != nil {
		if err := restore.applyRootfs(rootfs); err != nil {
			return fmt.Errorf("config.image.image %q: checkpoint archive: %w", cfg.Image.Image, err)
		}
	}
	if sb.IDMappings != nil {
		if rootfs, err = bindUsernsRootfs(c.Dir, rootfs, sb.IDMappings.UIDs[0].HostID, sb.IDMappings.GIDs[0].HostID); err != nil {
			return err
		}
	}
	c.Rootfs, c.ImageID = rootfs, imageID
	c.ImageName, c.ImageRepoDigest, c.ImageHandler = m.imageNames(sb.Handler, c.ID, imgSpec, imageID)
	if err := failpoint.Fail("create-container/rootfs"); err != nil {
		return err
	}
	imgCfg, err := m.imageConfig(sb.Handler, imageID)
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
	if opts.ImageVolumes, err = m.mountImageVolumes(c, sb.Handler, sb.IDMappings); err != nil {
		return err
	}
	spec, err := oci.ContainerSpec(opts)
	if err != nil {
		return err
	}
	if restore != nil {
		restore.applyProcess(spec)
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
		c.unblockNRI = m.opts.NRI.BlockSync()
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
	if restore != nil {
		// Against the final spec: what the processes are given is what CRIU restores.
		if err := restore.checkProcesses(spec); err != nil {
			return fmt.Errorf("config.image.image %q: %w", cfg.Image.Image, err)
		}
		c.RestoreLSM = restoreLSM(spec)
		c.RestoreNoNewPrivs = spec.Process != nil && spec.Process.NoNewPrivileges
	}
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
	// Detached: the container's own mount namespace holds its rootfs and pod files once
	// the runtime's create returns; hooks that run on the node after create may read them
	// by their paths.
	// A container restored at start is made by its restore: its rootfs and the pod's
	// tmpfs are lent then (Start), not now.
	detach := c.rt.Plan().DetachRootfs && !hostHooksAfterCreate(spec) && c.Restore == ""
	giveBack := func(bool) {}
	if c.Restore == "" {
		if giveBack, err = m.opts.Sandboxes.LendTmpfs(sb); err != nil {
			return err
		}
	}
	p, err := c.rt.Create(ctx, c.Task())
	giveBack(err == nil && !detach)
	if err != nil {
		return err
	}
	if detach {
		m.opts.Images.DetachRootfs(c.ID)
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

// hostHooksAfterCreate reports whether spec has hooks that run on the node after the
// create (poststart, poststop: an NRI plugin or a CDI spec may add them), which may read
// the rootfs by its path there; its mount then stays.
func hostHooksAfterCreate(spec *specs.Spec) bool {
	return spec.Hooks != nil && (len(spec.Hooks.Poststart) > 0 || len(spec.Hooks.Poststop) > 0)
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

// imageNames resolves the image's name, repo digest and store as the container's status
// shows them (ImageName, ImageRepoDigest, ImageHandler), once: statuses never ask the
// image store.
func (m *Manager) imageNames(handler, id string, spec *runtimeapi.ImageSpec, imageID string) (name, repoDigest, store string) {
	img, err := m.opts.Images.Status(handler, imageID)
	if err != nil {
		// Only the names are missing (RemoveImage may have hidden the image meanwhile):
		// the status shows what the config said and the ID.
		logrus.WithError(err).WithFields(logrus.Fields{"container": id, "image": imageID}).Warn("image names for the container's status")
		img = nil
	}
	name, repoDigest = imageNames(spec, img)
	if img != nil {
		store = img.Handler
	}
	return name, repoDigest, store
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

func (m *Manager) imageConfig(handler, imageID string) (ocispec.ImageConfig, error) {
	raw, err := m.opts.Images.Config(handler, imageID)
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
		// The pod's record, not the live table: a reload does not change its pods.
		PodAnnotations:                     sb.PodAnnotations,
		PrivilegedWithoutHostDevices:       sb.PrivilegedWithoutHostDevices,
		DeviceOwnershipFromSecurityContext: sb.DeviceOwnershipFromSecurityContext,
		SeccompProfile:                     sb.SeccompProfile,
		RecursiveReadOnlyMounts:            sb.RecursiveReadOnly(),
	}
	for _, u := range sb.DefaultUlimits {
		// Checked when the config was loaded; a record of an earlier release may hold
		// what this one refuses: said, not dropped.
		l, err := config.ParseUlimit(u)
		if err != nil {
			return o, fmt.Errorf("the pod's default_ulimits %q: %w", u, err)
		}
		o.Rlimits = append(o.Rlimits, specs.POSIXRlimit{Type: l.Type, Soft: l.Soft, Hard: l.Hard})
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
		pid := sb.Status().ContainerPid
		if !sb.SandboxContainer || pid == 0 {
			return o, fmt.Errorf("config.linux.security_context.namespace_options.pid POD: pod sandbox %s was created without a shared PID namespace: %w", sb.ID, errdefs.ErrFailedPrecondition)
		}
		path, err := pidNamespaceOf(pid, sb.ID)
		if err != nil {
			return o, fmt.Errorf("config.linux.security_context.namespace_options.pid POD: pod sandbox %s's sandbox container: %w; the pod cannot take containers that share its PID namespace: stop and remove it (kubelet makes it again)", sb.ID, err)
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
// the process of owner (a sandbox container or a container, whose ID its cgroup path carries). A
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
