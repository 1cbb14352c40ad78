package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/cgroups/podcgroup"
	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/failpoint"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/network"
	"github.com/rtshimd/rtshimd/internal/nsfile"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/pause"
	"github.com/rtshimd/rtshimd/internal/phasetime"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Run creates and starts a pod sandbox through the handler and returns its ID and the
// handler that runs it. The handler is resolved here, once: the pod keeps a copy of its
// row, so a reload that changes or removes the row does not touch it. On any error
// everything it made is undone.
func (m *Manager) Run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handlerName string) (string, string, error) {
	if err := validate(cfg); err != nil {
		return "", "", err
	}
	if err := validateCgroupParent(cfg.GetLinux().GetCgroupParent(), m.opts.CgroupDriver); err != nil {
		return "", "", err
	}
	h, err := m.opts.Handlers.Lookup(handlerName)
	if err != nil {
		return "", "", err
	}
	id, err := m.run(ctx, cfg, handlerName, h)
	return id, h.Name, err
}

func (m *Manager) run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handlerName string, h *handlers.Handler) (string, error) {
	if err := h.CheckPod(cfg); err != nil {
		return "", err
	}
	raw, err := store.MarshalConfig(cfg, "sandbox config")
	if err != nil {
		return "", err
	}
	if _, err := resolvConf(cfg.GetDnsConfig()); err != nil {
		return "", invalid("config.%v", err)
	}
	security, err := m.podSecurity(cfg, h.Config.SeccompProfile)
	if err != nil {
		return "", err
	}

	if m.opts.NRI != nil {
		// A plugin that connects meanwhile finds the pod in Synchronize, or hears of it.
		defer m.opts.NRI.BlockSync()()
	}
	name := MakeName(cfg.Metadata)
	id, release, err := m.index.Reserve(name)
	if err != nil {
		return "", err
	}
	defer release() // frees the name unless the create listed its object

	idm, _ := userNS(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()) // checked by validate
	sb := &Sandbox{
		Metadata: Metadata{
			IDMappings: idm,
			ID:         id, Name: name, Handler: h.Name, RuntimeHandler: handlerName, Kind: h.Type(),
			CreatedAt: time.Now().UnixNano(), Runtime: h.Runtime, Overhead: h.Config.Overhead, PodAnnotations: h.Config.PodAnnotations,
			PrivilegedWithoutHostDevices: h.Config.PrivilegedWithoutHostDevices, Config: raw, Dir: filepath.Join(m.opts.RunDir, id),
			DeviceOwnershipFromSecurityContext: h.Config.DeviceOwnershipFromSecurityContext,
			DefaultUlimits:                     h.Config.DefaultUlimits,
			SeccompProfile:                     h.Config.SeccompProfile,
			RecursiveReadOnlyMounts:            new(h.Features.RecursiveReadOnlyMounts),
			BundleDir:                          filepath.Join(m.opts.RunDir, id, id),
		},
		config:   cfg,
		security: security,
		rt:       h.Kind,
		status:   store.NewTracked(Status{State: StateCreating}),
		exited:   registry.NewExit(),
	}
	log := logrus.WithFields(logrus.Fields{"sandbox": id, "pod": name, "handler": h.Name})
	if _, reserved := oci.PassedPodAnnotations(cfg, sb.PodAnnotations); len(reserved) > 0 {
		log.WithField("annotations", reserved).Warn("pod annotations matched by the handler's pod_annotations are reserved (rtshimd's own, or CRIU's and the runtime's matched by a glob): not passed to the runtime")
	}
	tm := phasetime.Start(ctx, "RunPodSandbox")
	err = m.create(ctx, sb, h.Config.CNIConfDir, h.Config.CNINetwork, tm)
	if err == nil && m.opts.NRI != nil {
		// Plugins hear of the pod once it exists; one that fails it fails the call, and
		// those before it hear of its removal, also when the request's deadline is what
		// failed it (an expired context would reach no plugin).
		if err = m.opts.NRI.RunPodSandbox(ctx, sb); err != nil {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kind.DefaultTimeout)
			m.opts.NRI.RemovePodSandbox(uctx, sb)
			cancel()
		}
		tm.Mark("nri")
	}
	if err == nil {
		// The last step: the pod is made, recorded ready and known to plugins, not yet
		// listed or answered. A failure here undoes it all as any other would.
		if err = failpoint.Fail("run-sandbox/ready"); err != nil && m.opts.NRI != nil {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kind.DefaultTimeout)
			m.opts.NRI.RemovePodSandbox(uctx, sb)
			cancel()
		}
	}
	if err != nil {
		log.WithError(err).Warn("run pod sandbox failed; cleaning up")
		if cerr := m.cleanup(sb); cerr != nil {
			m.keepForCleanup(sb, cerr)
			return "", err
		}
		return "", err
	}
	m.index.Add(sb)
	log.Info("pod sandbox ready")
	m.publish(sb, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	m.publish(sb, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	tm.Mark("publish")
	tm.Log(logrus.Fields{"sandbox": id}, "pod sandbox run timing")
	return id, nil
}

// create makes every part of the sandbox; the record is on disk (as "creating") before
// the first resource exists, so a crash half-way is found and undone at start-up.
func (m *Manager) create(ctx context.Context, sb *Sandbox, cniDir, cniName string, tm *phasetime.Timer) error {
	cfg := sb.config
	nsOpts := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	hostNet := nsOpts.GetNetwork() == runtimeapi.NamespaceMode_NODE
	hostIPC := nsOpts.GetIpc() == runtimeapi.NamespaceMode_NODE
	hostPID := nsOpts.GetPid() == runtimeapi.NamespaceMode_NODE
	plan := sb.rt.Plan()
	sb.SandboxContainer = plan.SandboxContainer || nsOpts.GetPid() == runtimeapi.NamespaceMode_POD
	if sb.SandboxContainer {
		sb.CgroupsPath = cgpath.For(m.opts.CgroupDriver == config.SystemdDriver, cfg.GetLinux().GetCgroupParent(), sb.ID)
	}

	hostname := cfg.Hostname
	if hostNet {
		// A host-network pod shares the node's UTS namespace, so it has the node's name.
		hostname, _ = os.Hostname()
	}
	if hostname == "" {
		// As containerd: a pod that names no hostname gets the node's.
		hostname, _ = os.Hostname()
	}

	var kinds []nsfile.Kind
	if !hostNet {
		kinds = append(kinds, nsfile.Net)
	}
	if plan.PinIPCUTS {
		// Sandboxing runtimes keep IPC and UTS inside their own kernel; for the runc
		// family the daemon holds them so that containers can join without a sandbox container.
		if !hostIPC {
			kinds = append(kinds, nsfile.IPC)
		}
		if !hostNet {
			kinds = append(kinds, nsfile.UTS)
		}
	}
	if err := os.MkdirAll(sb.Dir, 0o711); err != nil {
		return fmt.Errorf("create sandbox dir: %w", err)
	}
	sb.Tmpfs = filepath.Join(sb.Dir, TmpfsDir)
	if !hostIPC {
		sb.Shm = filepath.Join(sb.Tmpfs, ShmSub)
	}
	sb.Files = filepath.Join(sb.Tmpfs, FilesSub)
	// In the pin home, the pod's tmpfs leaves no line in the node's mount table, which
	// every runc reads several times per container: lent to the node only while a
	// container is created. Runtimes that read the pod's files later (runsc's gofer, a
	// shim, a sandbox container), and pods in a user namespace (whose holder pins on
	// the node), keep it on the node.
	sb.TmpfsHome = plan.DetachRootfs && !sb.SandboxContainer && sb.IDMappings == nil && m.host().TmpfsInHome()
	var cniNet *network.Network
	if !hostNet && m.opts.Network != nil {
		dir, name := cniDir, cniName
		n, err := m.opts.Network.Lookup(dir, name)
		switch {
		case err == nil:
			cniNet = n
			sb.Network, sb.NetworkDir = n.List.Name, dir
		case dir != "" || name != "":
			return fmt.Errorf("handler %q (cni_conf_dir %q, cni_network %q): %v: %w", sb.Handler, dir, name, err, errdefs.ErrFailedPrecondition)
		default:
			// No CNI config on the node (Status says NetworkReady false): the pod gets
			// loopback only, which is all kubelet-less users of crictl may want.
			logrus.WithField("sandbox", sb.ID).Warnf("no pod network: %v", err)
		}
	}
	// Decide every path before the first write so the record names all there is to undo.
	sb.OverheadApplied = podOverhead(cfg, sb.Handler, sb.Overhead)
	m.planPodCgroup(sb)
	nsDir := filepath.Join(sb.Dir, "ns")
	for _, k := range kinds {
		p := filepath.Join(nsDir, string(k))
		switch k {
		case nsfile.Net:
			sb.NetNS = p
		case nsfile.IPC:
			sb.IPCNS = p
		case nsfile.UTS:
			sb.UTSNS = p
		}
	}
	if sb.IDMappings != nil {
		sb.UserNS = filepath.Join(nsDir, string(nsfile.User))
	}
	tm.Mark("prepare")
	if err := m.saveMeta(sb, nil); err != nil {
		return err
	}
	tm.Mark("record")
	if err := failpoint.Fail("run-sandbox/recorded"); err != nil {
		return err
	}

	var userns *nsfile.UserNS
	if sb.IDMappings != nil {
		userns = &nsfile.UserNS{
			UIDs: sb.IDMappings.UIDs, GIDs: sb.IDMappings.GIDs,
			Holder: filepath.Join(m.opts.PauseRootfs, pause.Binary),
		}
	}
	if err := m.host().PinNamespaces(sb.ID, nsDir, kinds, hostname, userns); err != nil {
		return err
	}
	tm.Mark("namespaces")
	if err := failpoint.Fail("run-sandbox/namespaces"); err != nil {
		return err
	}
	if o := &sb.OverheadApplied; o.PodCgroup != "" {
		set, effective, _, err := podcgroup.Apply(o.PodCgroup, o.Limits)
		if err != nil {
			src := o.Source
			if src == "" {
				src = "no"
			}
			return fmt.Errorf("config.linux.cgroup_parent %q: setting the pod's limits plus %s overhead: %w", sb.config.GetLinux().GetCgroupParent(), src, err)
		}
		// The sandbox container carries what the pod cgroup bounds, no more.
		o.PodCgroupSet, o.Limits = set, effective
		tm.Mark("pod_cgroup")
	}
	if cniNet != nil {
		ips, err := m.opts.Network.Setup(ctx, cniNet, m.cniPod(sb))
		if err != nil {
			return err // cleanup runs DEL again, in case Setup's own DEL failed
		}
		// Written with the step that ends creation.
		_ = m.updateIf(sb, func(st *Status) bool { st.IPs = ips; return false })
		tm.Mark("network")
		if err := failpoint.Fail("run-sandbox/network"); err != nil {
			return err
		}
	}
	files := sb.Files
	if sb.TmpfsHome {
		root, err := m.host().MountPodTmpfsInHome(sb.ID, sb.IDMappings)
		if err != nil {
			return err
		}
		// Where the tmpfs is lent: the sandbox directory is the node's.
		if err := os.Mkdir(sb.Tmpfs, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create pod tmpfs dir: %w", err)
		}
		files = filepath.Join(root, FilesSub)
	} else if err := m.host().MountPodTmpfs(sb.Tmpfs, sb.IDMappings); err != nil {
		return err
	}
	if err := writePodFiles(files, hostname, cfg, hostNet); err != nil {
		return err
	}
	tm.Mark("files")
	if sb.SandboxContainer {
		if err := m.startSandboxContainer(ctx, sb, hostname, hostNet, hostIPC, hostPID, tm); err != nil {
			return err
		}
	}
	// The final record, metadata included: the pod cgroup's limits were settled after the
	// first write.
	err := m.saveMeta(sb, func(st *Status) {
		if st.State == StateCreating { // the sandbox container may already have died
			st.State = StateReady
		}
	})
	tm.Mark("persist")
	return err
}

// containerSecurity is the confinement of a pod's sandbox container: the security modules'
// labels and the seccomp filter.
type containerSecurity struct {
	apparmor, process, mount string
	seccomp                  *specs.LinuxSeccomp
}

// podSecurity checks the pod's AppArmor, SELinux and seccomp requests against the node
// before anything is made, and returns the sandbox container's confinement.
func (m *Manager) podSecurity(cfg *runtimeapi.PodSandboxConfig, seccompProfile string) (containerSecurity, error) {
	const f = "config.linux.security_context"
	sc := cfg.GetLinux().GetSecurityContext()
	var l containerSecurity
	var err error
	if l.apparmor, err = m.opts.LSM.AppArmorProfile(f, sc.GetApparmor(), "", sc.GetPrivileged()); err != nil {
		return l, err
	}
	if l.process, l.mount, err = m.opts.LSM.SELinuxLabels(f, sc.GetSelinuxOptions(), sc.GetPrivileged()); err != nil {
		return l, err
	}
	// Checked for every pod, also those whose kind makes no sandbox container: a profile
	// that cannot be read is the pod's error, whoever would have used it.
	l.seccomp, err = oci.SandboxSeccomp(sc, seccompProfile)
	return l, err
}

// sandboxContainerSpec is the runtime spec of the pod's sandbox container.
func (m *Manager) sandboxContainerSpec(sb *Sandbox, hostname string, hostNet, hostIPC, hostPID bool) *specs.Spec {
	cfg := sb.config
	var ns []specs.LinuxNamespace
	add := func(t specs.LinuxNamespaceType, path string, host bool) {
		if !host {
			ns = append(ns, specs.LinuxNamespace{Type: t, Path: path})
		}
	}
	add(specs.NetworkNamespace, sb.NetNS, hostNet)
	add(specs.IPCNamespace, sb.IPCNS, hostIPC)
	add(specs.UTSNamespace, sb.UTSNS, hostNet)
	add(specs.PIDNamespace, "", hostPID)
	add(specs.MountNamespace, "", false)
	add(specs.UserNamespace, sb.UserNS, sb.UserNS == "")

	sc := cfg.GetLinux().GetSecurityContext()
	user := specs.User{}
	if u := sc.GetRunAsUser(); u != nil {
		user.UID = uint32(u.Value)
	}
	if g := sc.GetRunAsGroup(); g != nil {
		user.GID = uint32(g.Value)
	}
	// kubelet asks for -998 for sandbox containers; a node may not let us go below our own.
	oom := max(-998, m.opts.OOMScoreAdjMin)
	md := cfg.Metadata
	if hostNet {
		hostname = "" // the node's UTS namespace: runtimes refuse to set a hostname there
	}
	annotations := map[string]string{
		oci.AnnotationContainerType: oci.ContainerTypeSandbox,
		oci.AnnotationSandboxID:     sb.ID,
		oci.AnnotationSandboxName:   md.Name,
		oci.AnnotationSandboxNS:     md.Namespace,
		oci.AnnotationSandboxUID:    md.Uid,
		oci.AnnotationCRIOType:      oci.ContainerTypeSandbox,
		oci.AnnotationCRIOSandboxID: sb.ID,
	}
	oci.AddSandboxSizing(annotations, cfg)
	oci.AddPodAnnotations(annotations, cfg, sb.PodAnnotations)
	return oci.SandboxContainerSpec(oci.SandboxContainerOptions{
		ID:              sb.ID,
		Rootfs:          m.opts.PauseRootfs,
		Args:            []string{pause.Binary},
		Hostname:        hostname,
		Namespaces:      ns,
		CgroupsPath:     sb.CgroupsPath,
		OOMScoreAdj:     &oom,
		Sysctls:         cfg.GetLinux().GetSysctls(),
		User:            user,
		ShmPath:         sb.Shm,
		Resources:       sandboxLimits(sb),
		IDMappings:      sb.IDMappings,
		ApparmorProfile: sb.security.apparmor, SelinuxLabel: sb.security.process, MountLabel: sb.security.mount,
		Seccomp:     sb.security.seccomp,
		Annotations: annotations,
	})
}

func (m *Manager) startSandboxContainer(ctx context.Context, sb *Sandbox, hostname string, hostNet, hostIPC, hostPID bool, tm *phasetime.Timer) error {
	if err := oci.WriteBundle(sb.ContainerDir(), m.sandboxContainerSpec(sb, hostname, hostNet, hostIPC, hostPID)); err != nil {
		return err
	}
	tm.Mark("infra_bundle")
	p, err := sb.rt.Create(ctx, sb.Task())
	if err != nil {
		return fmt.Errorf("create sandbox container: %w", err)
	}
	tm.Mark("infra_create")
	// Written with the step that ends creation.
	_ = m.updateIf(sb, func(st *Status) bool { st.ContainerPid, st.MonitorPid = p.Pid, p.SupervisorPid; return false })
	m.watch(sb)
	if err := failpoint.Fail("run-sandbox/container-created"); err != nil {
		return err
	}
	if err := sb.rt.Start(ctx, sb.Task()); err != nil {
		return fmt.Errorf("start sandbox container: %w", err)
	}
	tm.Mark("infra_start")
	return failpoint.Fail("run-sandbox/container-started")
}

// planPodCgroup decides where the pod's limits go, before anything is made (the record
// then names a cgroup rtshimd is to remove).
func (m *Manager) planPodCgroup(sb *Sandbox) {
	o := &sb.OverheadApplied
	parent := sb.config.GetLinux().GetCgroupParent()
	switch {
	case o.Limits == nil:
		return
	case m.opts.CgroupDriver != config.CgroupfsDriver:
		o.PodCgroupNote = "cgroup_driver " + m.opts.CgroupDriver + ": the pod's slice is systemd's and kubelet's to limit"
	case parent == "":
		o.PodCgroupNote = "no cgroup_parent: the pod has no cgroup of its own"
	default:
		o.PodCgroup = "/" + strings.TrimPrefix(parent, "/")
		o.PodCgroupCreated = !podcgroup.Exists(o.PodCgroup)
	}
	o.SandboxContainer = sb.rt.Plan().PodLimits
}

// sandboxLimits are the sandbox container's limits: the pod's plus overhead where the
// kind's sandbox container holds the whole pod (the kind's PodLimits), else none.
func sandboxLimits(sb *Sandbox) *specs.LinuxResources {
	if !sb.OverheadApplied.SandboxContainer {
		return nil
	}
	return sb.OverheadApplied.Limits
}
