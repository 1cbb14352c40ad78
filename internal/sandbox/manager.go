package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/cgroups/podcgroup"
	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/events"
	"github.com/rtshimd/rtshimd/internal/failpoint"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/idmap"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/lsm"
	"github.com/rtshimd/rtshimd/internal/network"
	"github.com/rtshimd/rtshimd/internal/nsfile"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/pause"
	"github.com/rtshimd/rtshimd/internal/phasetime"
	"github.com/rtshimd/rtshimd/internal/retry"
	"github.com/rtshimd/rtshimd/internal/store"
)

// StopTimeout bounds how long Stop waits for an infra container to die after SIGKILL.
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
}

// Containers is what a sandbox needs of the container manager: its containers go
// before it does, and its events carry their statuses.
type Containers interface {
	StopAll(ctx context.Context, sandboxID string) error
	RemoveAll(ctx context.Context, sandboxID string) error
	PodStatuses(sandboxID string) []*runtimeapi.ContainerStatus
}

// Manager runs pod sandboxes.
type Manager struct {
	opts       Options
	containers Containers

	mu        sync.RWMutex
	sandboxes map[string]*Sandbox
	names     map[string]string // sandbox name -> id
	// quarantined: pods whose records recovery set aside, stopped by StopQuarantined.
	quarantined []string

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
	return &Manager{opts: opts, sandboxes: map[string]*Sandbox{}, names: map[string]string{}, ctx: ctx, cancel: cancel}, nil
}

// SetContainers connects the container manager (built after this one, which it uses).
func (m *Manager) SetContainers(c Containers) { m.containers = c }

// Close stops the watchers; sandboxes keep running.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// hostnameRE: DNS labels joined by dots, and an optional final dot: kubelet sends a pod
// with setHostnameAsFQDN the absolute FQDN "<host>.<subdomain>.<ns>.svc.<cluster domain>",
// which ends with the dot when the cluster domain is empty.
var hostnameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\.?$`)

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

func validate(cfg *runtimeapi.PodSandboxConfig) error {
	if cfg == nil {
		return invalid("config is required")
	}
	md := cfg.GetMetadata()
	if md == nil {
		return invalid("config.metadata is required")
	}
	for _, f := range []struct{ name, val string }{{"name", md.Name}, {"namespace", md.Namespace}, {"uid", md.Uid}} {
		if f.val == "" {
			return invalid("config.metadata.%s is empty", f.name)
		}
		if strings.ContainsAny(f.val, "_/\x00") {
			return invalid("config.metadata.%s %q must not contain '_', '/' or NUL", f.name, f.val)
		}
	}
	if h := cfg.Hostname; h != "" && (len(h) > 64 || !hostnameRE.MatchString(h)) {
		return invalid("config.hostname %q is not a valid hostname (DNS labels of lower-case letters, digits and '-', joined and optionally ended by '.', at most 64 characters)", h)
	}
	// Containers' log files are opened below it, by root: a relative one would depend on
	// the daemon's working directory.
	if d := cfg.LogDirectory; d != "" && !filepath.IsAbs(d) {
		return invalid("config.log_directory %q must be an absolute path", d)
	}
	if err := validatePorts(cfg.PortMappings); err != nil {
		return err
	}
	if err := validateSysctls(cfg.GetLinux().GetSysctls()); err != nil {
		return err
	}
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() == runtimeapi.NamespaceMode_TARGET {
		return invalid("config.linux.security_context.namespace_options.pid TARGET is only valid for containers, not sandboxes")
	}
	_, err := userNS(ns)
	return err
}

// validatePorts checks what reaches the portmap plugin: a bad value there fails late,
// inside CNI ADD, with the plugin's words instead of the field's name.
func validatePorts(pms []*runtimeapi.PortMapping) error {
	for i, pm := range pms {
		f := fmt.Sprintf("config.port_mappings[%d]", i)
		switch {
		case pm == nil:
			return invalid("%s is empty", f)
		case pm.ContainerPort < 1 || pm.ContainerPort > 65535:
			return invalid("%s.container_port %d is not a port (1-65535)", f, pm.ContainerPort)
		case pm.HostPort < 0 || pm.HostPort > 65535:
			return invalid("%s.host_port %d is not a port (0-65535; 0: none)", f, pm.HostPort)
		case pm.HostIp != "" && net.ParseIP(pm.HostIp) == nil:
			return invalid("%s.host_ip %q is not an IP address", f, pm.HostIp)
		}
		if _, ok := runtimeapi.Protocol_name[int32(pm.Protocol)]; !ok {
			return invalid("%s.protocol %d is not TCP, UDP or SCTP", f, pm.Protocol)
		}
	}
	return nil
}

// sysctlRE is Kubernetes' sysctl name format (dots or slashes between segments). Which
// sysctls are safe is kubelet's to decide (it filters unsafe ones by its allow list).
var sysctlRE = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`)

func validateSysctls(sysctls map[string]string) error {
	for name, val := range sysctls {
		if len(name) > 253 || !sysctlRE.MatchString(name) {
			return invalid("config.linux.sysctls: %q is not a sysctl name", name)
		}
		if strings.ContainsAny(val, "\x00\n") {
			return invalid("config.linux.sysctls[%q]: value %q contains a NUL or a newline", name, val)
		}
	}
	return nil
}

// validateCgroupParent checks config.linux.cgroup_parent for the cgroup driver: the
// pod's containers' cgroups are made below it, so it must not climb out of where it
// points; cgroupfs paths are absolute (a relative one would depend on the runtime's).
func validateCgroupParent(parent, driver string) error {
	if parent == "" {
		return nil
	}
	for _, c := range strings.Split(parent, "/") {
		if c == ".." {
			return invalid("config.linux.cgroup_parent %q must not contain '..'", parent)
		}
	}
	if driver == config.CgroupfsDriver && !strings.HasPrefix(parent, "/") {
		return invalid("config.linux.cgroup_parent %q must be an absolute path with cgroup_driver %q", parent, driver)
	}
	return nil
}

// userNS checks namespace_options.userns_options and returns the pod's mappings (nil for
// the node's user namespace). As containerd and CRI-O: one mapping for UIDs and one for
// GIDs, each mapping container ID 0, and no node namespace beside a pod user namespace
// (kubelet allows hostUsers: false only without hostNetwork, hostPID and hostIPC).
func userNS(ns *runtimeapi.NamespaceOption) (*oci.IDMappings, error) {
	const f = "config.linux.security_context.namespace_options.userns_options"
	u := ns.GetUsernsOptions()
	switch u.GetMode() {
	case runtimeapi.NamespaceMode_NODE:
		if len(u.GetUids()) > 0 || len(u.GetGids()) > 0 {
			return nil, invalid("%s: mode NODE takes no uids or gids (the node's user namespace has its own)", f)
		}
		return nil, nil
	case runtimeapi.NamespaceMode_POD:
		if u == nil { // absent: the node's user namespace
			return nil, nil
		}
	default:
		return nil, invalid("%s.mode %s is not supported: a pod's user namespace is NODE or POD", f, u.GetMode())
	}
	for _, o := range []struct {
		name string
		mode runtimeapi.NamespaceMode
	}{{"network", ns.GetNetwork()}, {"pid", ns.GetPid()}, {"ipc", ns.GetIpc()}} {
		if o.mode == runtimeapi.NamespaceMode_NODE {
			return nil, invalid("%s.mode POD with namespace_options.%s NODE: a pod in a user namespace cannot share the node's %s namespace", f, o.name, o.name)
		}
	}
	conv := func(field string, ms []*runtimeapi.IDMapping) ([]specs.LinuxIDMapping, error) {
		if len(ms) != 1 {
			return nil, invalid("%s.%s has %d mappings: a pod user namespace takes exactly one", f, field, len(ms))
		}
		m := ms[0]
		switch {
		case m.GetContainerId() != 0:
			return nil, invalid("%s.%s[0] maps container ID %d: it must map container ID 0 (root)", f, field, m.GetContainerId())
		case m.GetLength() == 0:
			return nil, invalid("%s.%s[0].length is 0", f, field)
		case uint64(m.GetHostId())+uint64(m.GetLength()) > 1<<32-1:
			return nil, invalid("%s.%s[0] host IDs %d+%d run past 4294967294", f, field, m.GetHostId(), m.GetLength())
		}
		return []specs.LinuxIDMapping{{ContainerID: 0, HostID: m.GetHostId(), Size: m.GetLength()}}, nil
	}
	uids, err := conv("uids", u.GetUids())
	if err != nil {
		return nil, err
	}
	gids, err := conv("gids", u.GetGids())
	if err != nil {
		return nil, err
	}
	return &oci.IDMappings{UIDs: uids, GIDs: gids}, nil
}

func newID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

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
	if _, err := resolvConf(cfg.GetDnsConfig()); err != nil {
		return "", invalid("config.%v", err)
	}
	security, err := m.podSecurity(cfg)
	if err != nil {
		return "", err
	}

	if m.opts.NRI != nil {
		// A plugin that connects meanwhile finds the pod in Synchronize, or hears of it.
		defer m.opts.NRI.BlockSync()()
	}
	name := MakeName(cfg.Metadata)
	id := newID()
	m.mu.Lock()
	if other, ok := m.names[name]; ok {
		m.mu.Unlock()
		return "", fmt.Errorf("pod sandbox name %q is already used by sandbox %s; remove it first: %w", name, other, errdefs.ErrAlreadyExists)
	}
	m.names[name] = id
	m.mu.Unlock()

	raw, err := encodeConfig(cfg)
	if err != nil {
		m.releaseName(name, id)
		return "", err
	}
	idm, _ := userNS(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()) // checked by validate
	sb := &Sandbox{
		Metadata: Metadata{
			IDMappings: idm,
			ID:         id, Name: name, Handler: h.Name, RuntimeHandler: handlerName, Kind: h.Type(),
			CreatedAt: time.Now().UnixNano(), Runtime: h.Runtime, Overhead: h.Config.Overhead,
			Config: raw, Dir: filepath.Join(m.opts.RunDir, id),
			BundleDir: filepath.Join(m.opts.RunDir, id, id),
		},
		config:   cfg,
		security: security,
		rt:       h.Kind,
		status:   store.NewTracked(Status{State: StateCreating}),
		exited:   make(chan struct{}),
	}
	log := logrus.WithFields(logrus.Fields{"sandbox": id, "pod": name, "handler": h.Name})
	tm := phasetime.Start()
	err = m.create(ctx, sb, h.Config.CNIConfDir, h.Config.CNINetwork, tm)
	if err == nil && m.opts.NRI != nil {
		// Plugins hear of the pod once it exists; one that fails it fails the call, and
		// those before it hear of its removal.
		if err = m.opts.NRI.RunPodSandbox(ctx, sb); err != nil {
			m.opts.NRI.RemovePodSandbox(ctx, sb)
		}
		tm.Mark("nri")
	}
	if err != nil {
		log.WithError(err).Warn("run pod sandbox failed; cleaning up")
		if cerr := m.cleanup(sb); cerr != nil {
			m.keepForCleanup(sb, cerr)
			return "", err
		}
		m.releaseName(name, id)
		return "", err
	}
	m.mu.Lock()
	m.sandboxes[id] = sb
	m.mu.Unlock()
	_ = failpoint.Fail("run-sandbox/ready") // a crash before the reply; an error is not one to give here
	log.Info("pod sandbox ready")
	m.publish(sb, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT)
	m.publish(sb, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT)
	tm.Mark("publish")
	tm.Log(logrus.Fields{"sandbox": id}, "pod sandbox run timing")
	return id, nil
}

func (m *Manager) releaseName(name, id string) {
	m.mu.Lock()
	if m.names[name] == id {
		delete(m.names, name)
	}
	m.mu.Unlock()
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
	sb.Infra = plan.SandboxContainer || nsOpts.GetPid() == runtimeapi.NamespaceMode_POD
	if sb.Infra {
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
		// family the daemon holds them so that containers can join without an infra process.
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
	if !hostIPC {
		sb.Shm = filepath.Join(sb.Dir, ShmDir, ShmMount)
	}
	sb.Files = filepath.Join(sb.Dir, FilesDir)
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
	if err := m.host().PinNamespaces(nsDir, kinds, hostname, userns); err != nil {
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
	if err := m.host().MountFiles(sb.Files); err != nil {
		return err
	}
	if err := writePodFiles(sb.Files, hostname, cfg, hostNet); err != nil {
		return err
	}
	if sb.Shm != "" {
		if err := m.host().MountShm(sb.Shm, sb.IDMappings); err != nil {
			return err
		}
	}
	tm.Mark("files")
	if sb.Infra {
		if err := m.startInfra(ctx, sb, hostname, hostNet, hostIPC, hostPID, tm); err != nil {
			return err
		}
	}
	// The final record, metadata included: the pod cgroup's limits were settled after the
	// first write.
	err := m.saveMeta(sb, func(st *Status) {
		if st.State == StateCreating { // the infra may already have died
			st.State = StateReady
		}
	})
	tm.Mark("persist")
	return err
}

// infraSecurity is the confinement of a pod's sandbox container: the security modules'
// labels and the seccomp filter.
type infraSecurity struct {
	apparmor, process, mount string
	seccomp                  *specs.LinuxSeccomp
}

// podSecurity checks the pod's AppArmor, SELinux and seccomp requests against the node
// before anything is made, and returns the sandbox container's confinement.
func (m *Manager) podSecurity(cfg *runtimeapi.PodSandboxConfig) (infraSecurity, error) {
	const f = "config.linux.security_context"
	sc := cfg.GetLinux().GetSecurityContext()
	var l infraSecurity
	var err error
	if l.apparmor, err = m.opts.LSM.AppArmorProfile(f, sc.GetApparmor(), "", sc.GetPrivileged()); err != nil {
		return l, err
	}
	if l.process, l.mount, err = m.opts.LSM.SELinuxLabels(f, sc.GetSelinuxOptions(), sc.GetPrivileged()); err != nil {
		return l, err
	}
	// Checked for every pod, also those whose kind makes no sandbox container: a profile
	// that cannot be read is the pod's error, whoever would have used it.
	l.seccomp, err = oci.SandboxSeccomp(sc)
	return l, err
}

// infraSpec is the runtime spec of the pod's sandbox container.
func (m *Manager) infraSpec(sb *Sandbox, hostname string, hostNet, hostIPC, hostPID bool) *specs.Spec {
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
	// kubelet asks for -998 for infra containers; a node may not let us go below our own.
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
	return oci.InfraSpec(oci.InfraOptions{
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

func (m *Manager) startInfra(ctx context.Context, sb *Sandbox, hostname string, hostNet, hostIPC, hostPID bool, tm *phasetime.Timer) error {
	if err := oci.WriteBundle(sb.InfraDir(), m.infraSpec(sb, hostname, hostNet, hostIPC, hostPID)); err != nil {
		return err
	}
	tm.Mark("infra_bundle")
	p, err := sb.rt.Create(ctx, sb.Task())
	if err != nil {
		return fmt.Errorf("create infra container: %w", err)
	}
	tm.Mark("infra_create")
	// Written with the step that ends creation.
	_ = m.updateIf(sb, func(st *Status) bool { st.InfraPid, st.MonitorPid = p.Pid, p.SupervisorPid; return false })
	m.watch(sb)
	if err := failpoint.Fail("run-sandbox/infra-created"); err != nil {
		return err
	}
	if err := sb.rt.Start(ctx, sb.Task()); err != nil {
		return fmt.Errorf("start infra container: %w", err)
	}
	tm.Mark("infra_start")
	return failpoint.Fail("run-sandbox/infra-started")
}

// cniPod describes the sandbox to CNI: its netns, identity and hostPorts.
func (m *Manager) cniPod(sb *Sandbox) network.Pod {
	md := sb.config.GetMetadata()
	p := network.Pod{SandboxID: sb.ID, NetNS: sb.NetNS, Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()}
	for _, pm := range sb.config.GetPortMappings() {
		if pm.HostPort <= 0 {
			continue
		}
		p.PortMappings = append(p.PortMappings, network.PortMapping{
			HostPort: pm.HostPort, ContainerPort: pm.ContainerPort,
			Protocol: strings.ToLower(pm.Protocol.String()), HostIP: pm.HostIp,
		})
	}
	return p
}

// teardownNetwork runs CNI DEL once for a pod that was attached; it is retried by the
// next Stop or Remove if it fails.
func (m *Manager) teardownNetwork(ctx context.Context, sb *Sandbox) error {
	if sb.Network == "" || sb.Status().NetworkDown || m.opts.Network == nil {
		return nil
	}
	if err := m.opts.Network.Teardown(ctx, sb.NetworkDir, sb.Network, m.cniPod(sb)); err != nil {
		return fmt.Errorf("pod sandbox %s: %w", sb.ID, err)
	}
	// A pod without its network is not ready, in the same write: a crash between the two
	// must not leave it listed ready with no address.
	return m.update(sb, func(st *Status) {
		st.NetworkDown, st.IPs = true, nil
		if st.State == StateReady {
			st.State = StateNotReady
		}
	})
}

// Overhead is the overhead a pod was given and where its limits went: kept in its record
// and shown by PodSandboxStatus verbose.
type Overhead struct {
	// Source is "kubelet" (linux.overhead, from the RuntimeClass), "handler" (the row's
	// overhead) or "" (none).
	Source      string `json:"source,omitempty"`
	MemoryBytes int64  `json:"memory_bytes"`
	CPUQuota    int64  `json:"cpu_quota"` // per cpu_period of the pod's limits
	CPUShares   uint64 `json:"cpu_shares"`
	// Limits are the pod's limits plus the overhead (nil: the pod has none), less those
	// kubelet's pod cgroup does not have (see internal/cgroups/podcgroup): what bounds the pod.
	Limits *specs.LinuxResources `json:"limits,omitempty"`
	// PodCgroup is the pod's cgroup (cgroup_parent) given Limits; PodCgroupCreated says
	// rtshimd made it (and removes it with the pod). PodCgroupNote says why it was not.
	PodCgroup        string `json:"pod_cgroup,omitempty"`
	PodCgroupCreated bool   `json:"pod_cgroup_created,omitempty"`
	PodCgroupNote    string `json:"pod_cgroup_note,omitempty"`
	// PodCgroupSet is what was written there: on a cgroup that existed (kubelet's), only
	// the limits that raise its own.
	PodCgroupSet *specs.LinuxResources `json:"pod_cgroup_set,omitempty"`
	// SandboxContainer says the sandbox container got Limits too: its cgroup holds the
	// whole pod (gVisor's sandbox, a VM).
	SandboxContainer bool `json:"sandbox_container,omitempty"`
}

// defaultCPUPeriod is the CFS period kubelet uses.
const defaultCPUPeriod = 100000

// podOverhead works out a pod's overhead and its limits: the pod's own limits
// (linux.resources, the sum of its containers') plus the overhead kubelet passed from
// the RuntimeClass (linux.overhead) where it passed one, else the handler row's. Each
// limit the pod has grows by the overhead: memory and CPU quota where the pod is
// limited, CPU shares (its requests) where it has them. A pod with none gets none.
func podOverhead(cfg *runtimeapi.PodSandboxConfig, handler string, row config.Overhead) Overhead {
	res := cfg.GetLinux().GetResources()
	kube := cfg.GetLinux().GetOverhead()
	period := res.GetCpuPeriod()
	if period <= 0 {
		period = defaultCPUPeriod
	}
	var o Overhead
	rowQuota := row.MilliCPU * period / 1000
	rowShares := uint64(row.MilliCPU * 1024 / 1000)
	switch {
	case kube != nil:
		o = Overhead{Source: "kubelet", MemoryBytes: kube.GetMemoryLimitInBytes(), CPUQuota: kube.GetCpuQuota(), CPUShares: uint64(kube.GetCpuShares())}
		if (row.MemoryBytes != 0 || row.MilliCPU != 0) && (o.MemoryBytes != row.MemoryBytes || o.CPUQuota != rowQuota) {
			logrus.WithFields(logrus.Fields{
				"pod": cfg.GetMetadata().GetName(), "handler": handler,
				"kubelet_memory": o.MemoryBytes, "kubelet_cpu_quota": o.CPUQuota,
				"handler_memory": row.MemoryBytes, "handler_cpu_quota": rowQuota,
			}).Warn("the RuntimeClass overhead differs from the handler's; using the RuntimeClass's (update one of them: `rtshimd runtimeclasses` prints the handler's)")
		}
	case row.MemoryBytes != 0 || row.MilliCPU != 0:
		o = Overhead{Source: "handler", MemoryBytes: row.MemoryBytes, CPUQuota: rowQuota, CPUShares: rowShares}
	}
	if res == nil {
		return o
	}
	out := &specs.LinuxResources{}
	if mem := res.GetMemoryLimitInBytes(); mem > 0 {
		limit := mem + o.MemoryBytes
		out.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	cpu := &specs.LinuxCPU{}
	if quota := res.GetCpuQuota(); quota > 0 {
		q, p := quota+o.CPUQuota, uint64(period)
		cpu.Quota, cpu.Period = &q, &p
	}
	if shares := res.GetCpuShares(); shares > 0 {
		sh := uint64(shares) + o.CPUShares
		cpu.Shares = &sh
	}
	if cpu.Quota != nil || cpu.Shares != nil {
		out.CPU = cpu
	}
	if out.Memory != nil || out.CPU != nil {
		o.Limits = out
	}
	return o
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

// watch follows the infra container through its runtime and marks the sandbox not ready
// when the infra exits.
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
			st.InfraExit, st.ExitedAt, st.State = &code, e.ExitedAt, StateNotReady
			return was != StateCreating // a half-made record stays half-made
		})
		sb.markExited()
		if was == StateReady && !expected {
			logrus.WithFields(logrus.Fields{"sandbox": sb.ID, "status": e.Status}).Warn("infra container exited; sandbox not ready")
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
	if fn == nil {
		fn = func(*Status) {}
	}
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
	if m.containers != nil {
		ev.ContainersStatuses = m.containers.PodStatuses(sb.ID)
	}
	m.opts.Events.Publish(ev)
}

// All returns every sandbox, whatever its state.
func (m *Manager) All() []*Sandbox {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		out = append(out, sb)
	}
	return out
}

// Get finds a sandbox by ID or unique ID prefix.
func (m *Manager) Get(id string) (*Sandbox, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return idmap.Find(m.sandboxes, id, "pod_sandbox_id", "pod sandbox")
}

// Stop stops the sandbox's infra container, if any; the sandbox becomes NOTREADY. A
// sandbox that is gone is not an error.
func (m *Manager) Stop(ctx context.Context, id string) error {
	sb, err := m.Get(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	return m.stop(ctx, sb)
}

func (m *Manager) stop(ctx context.Context, sb *Sandbox) error {
	if m.containers != nil {
		if err := m.containers.StopAll(ctx, sb.ID); err != nil {
			return fmt.Errorf("stop containers of pod sandbox %s: %w", sb.ID, err)
		}
	}
	if err := failpoint.Fail("stop-sandbox/containers-stopped"); err != nil {
		return err
	}
	if sb.Infra {
		if err := m.stopInfra(ctx, sb); err != nil {
			return err
		}
	}
	if err := failpoint.Fail("stop-sandbox/infra-stopped"); err != nil {
		return err
	}
	if m.opts.NRI != nil && !sb.kept { // plugins heard of a kept pod's removal when its run failed
		m.opts.NRI.StopPodSandbox(ctx, sb) // before CNI DEL, as containerd
	}
	wasReady := sb.Status().State != StateNotReady
	if err := m.teardownNetwork(ctx, sb); err != nil {
		return err
	}
	if err := failpoint.Fail("stop-sandbox/network-down"); err != nil {
		return err
	}
	err := m.updateIf(sb, func(st *Status) bool {
		changed := st.State != StateNotReady
		st.State = StateNotReady
		return changed
	})
	if wasReady {
		logrus.WithField("sandbox", sb.ID).Info("pod sandbox stopped")
		m.publish(sb, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
	}
	return err
}

func (m *Manager) stopInfra(ctx context.Context, sb *Sandbox) error {
	select {
	case <-sb.exited:
	default:
		sb.mu.Lock()
		sb.stopping = true
		sb.mu.Unlock()
		if err := sb.rt.Kill(ctx, sb.Task(), "KILL", false); err != nil {
			return fmt.Errorf("stop infra container: %w", err)
		}
		select {
		case <-sb.exited:
		case <-time.After(StopTimeout):
			return fmt.Errorf("stop pod sandbox %s: infra container did not exit %v after SIGKILL", sb.ID, StopTimeout)
		case <-ctx.Done():
			return fmt.Errorf("stop pod sandbox %s: %w", sb.ID, ctx.Err())
		}
	}
	if sb.rt.Plan().DeleteSandboxAtStop {
		if err := sb.rt.Delete(ctx, sb.Task()); err != nil {
			return fmt.Errorf("delete infra container: %w", err)
		}
	}
	// Else it is deleted when the sandbox is removed, after its containers: a supervisor
	// that serves the whole pod (a shim) keeps serving them until then.
	return nil
}

// Remove stops the sandbox if needed and releases all it holds. A sandbox that is gone is
// not an error.
func (m *Manager) Remove(ctx context.Context, id string) error {
	sb, err := m.Get(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	m.mu.RLock()
	_, present := m.sandboxes[sb.ID]
	m.mu.RUnlock()
	if !present {
		return nil // removed by a concurrent call
	}
	if err := m.stop(ctx, sb); err != nil {
		return err
	}
	if m.containers != nil {
		if err := m.containers.RemoveAll(ctx, sb.ID); err != nil {
			return fmt.Errorf("remove containers of pod sandbox %s: %w", sb.ID, err)
		}
	}
	if err := failpoint.Fail("remove-sandbox/containers-removed"); err != nil {
		return err
	}
	if err := m.cleanup(sb); err != nil {
		return err
	}
	if m.opts.NRI != nil {
		// From the plugins' RemovePodSandbox to the pod's leaving the list, no plugin is
		// synchronized: one that connects now would otherwise be given the pod and miss
		// its removal. Only here: the containers' removal above takes the block itself.
		unblock := m.opts.NRI.BlockSync()
		defer unblock()
		if !sb.kept {
			m.opts.NRI.RemovePodSandbox(ctx, sb)
		}
	}
	m.mu.Lock()
	delete(m.sandboxes, sb.ID)
	if m.names[sb.Name] == sb.ID {
		delete(m.names, sb.Name)
	}
	m.mu.Unlock()
	logrus.WithField("sandbox", sb.ID).Info("pod sandbox removed")
	m.publish(sb, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	return nil
}

// cleanupRetry is how often a sandbox whose cleanup failed is tried again.
var cleanupRetry = 5 * time.Second

// keepForCleanup keeps a sandbox whose RunPodSandbox failed and whose cleanup failed too:
// it still holds what cleanup could not undo (namespaces, mounts, a CNI attachment), so it
// stays listed NOTREADY with its name and record, and its removal is retried in the
// background until it succeeds (or kubelet's RemovePodSandbox does it).
func (m *Manager) keepForCleanup(sb *Sandbox, cleanupErr error) {
	log := logrus.WithFields(logrus.Fields{"sandbox": sb.ID, "pod": sb.Name})
	log.WithError(cleanupErr).Error("cleanup of failed sandbox failed; keeping it listed as not ready and retrying")
	_ = m.update(sb, func(st *Status) { st.State = StateNotReady })
	if sb.Status().InfraPid == 0 {
		// No infra container ran, so none is watched: there is no exit to wait for.
		sb.markExited()
	}
	sb.kept = true
	m.mu.Lock()
	m.sandboxes[sb.ID] = sb
	m.mu.Unlock()
	// A later daemon lists what the record says; kubelet's removal finishes it.
	retry.Every(m.ctx, &m.wg, cleanupRetry, log.WithField("step", "cleanup of a failed run"), func() error { return m.Remove(m.ctx, sb.ID) })
}

// cleanup undoes everything a sandbox may hold, whatever state it got to, and deletes
// its record. It is safe to repeat.
func (m *Manager) cleanup(sb *Sandbox) error {
	if err := failpoint.Fail("sandbox-cleanup"); err != nil {
		return fmt.Errorf("clean up sandbox %s: %w", sb.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kind.DefaultTimeout)
	defer cancel()
	var errs []error
	if sb.Infra && sb.rt != nil {
		if err := sb.rt.Delete(ctx, sb.Task()); err != nil {
			errs = append(errs, fmt.Errorf("delete infra container: %w", err))
		}
		if mp := sb.Status().MonitorPid; mp > 0 {
			// The monitor exits once the infra is gone; wait so its files are final.
			select {
			case <-sb.exited:
			case <-time.After(StopTimeout):
			}
		}
		if err := failpoint.Fail("remove-sandbox/infra-deleted"); err != nil {
			return err
		}
		if len(errs) == 0 {
			if err := podcgroup.RemoveLeft(sb.CgroupsPath, sb.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := m.teardownNetwork(ctx, sb); err != nil {
		errs = append(errs, err)
	}
	for _, p := range []string{sb.NetNS, sb.IPCNS, sb.UTSNS, sb.UserNS} {
		if p != "" {
			if err := m.host().Unpin(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := failpoint.Fail("remove-sandbox/namespaces-unpinned"); err != nil {
		return err
	}
	if sb.Shm != "" {
		if err := m.host().Unmount(sb.Shm); err != nil {
			errs = append(errs, err)
		}
	}
	if sb.Files != "" {
		if err := m.host().Unmount(sb.Files); err != nil {
			errs = append(errs, err)
		}
	}
	if o := sb.OverheadApplied; o.PodCgroupCreated {
		if err := podcgroup.Remove(o.PodCgroup); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("clean up sandbox %s: %w", sb.ID, errors.Join(errs...))
	}
	if sb.Dir != "" {
		if err := os.RemoveAll(sb.Dir); err != nil {
			return fmt.Errorf("clean up sandbox %s: %w", sb.ID, err)
		}
	}
	if err := failpoint.Fail("remove-sandbox/dir-removed"); err != nil {
		return err
	}
	return sb.status.Forget(m.opts.Store, sb.ID)
}

// MatchLabels reports whether labels has every key and value of the selector sel.
func MatchLabels(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (s *Sandbox) criState() runtimeapi.PodSandboxState {
	if s.Status().State == StateReady {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

// CRIStatus is the sandbox as PodSandboxStatus reports it; verbose adds the record.
func (m *Manager) CRIStatus(id string, verbose bool) (*runtimeapi.PodSandboxStatus, map[string]string, error) {
	sb, err := m.Get(id)
	if err != nil {
		return nil, nil, err
	}
	st := criStatusOf(sb)
	if !verbose {
		return st, nil, nil
	}
	info, err := json.Marshal(struct {
		Metadata *Metadata `json:"metadata"`
		Status   Status    `json:"status"`
	}{&sb.Metadata, sb.Status()})
	if err != nil {
		return nil, nil, err
	}
	return st, map[string]string{"info": string(info)}, nil
}

func networkStatus(ips []string) *runtimeapi.PodSandboxNetworkStatus {
	st := &runtimeapi.PodSandboxNetworkStatus{}
	if len(ips) > 0 {
		st.Ip = ips[0]
		for _, ip := range ips[1:] {
			st.AdditionalIps = append(st.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	return st
}

// criStatusOf is the sandbox's PodSandboxStatus, from memory.
func criStatusOf(sb *Sandbox) *runtimeapi.PodSandboxStatus {
	cfg := sb.config
	return &runtimeapi.PodSandboxStatus{
		Id:          sb.ID,
		Metadata:    cfg.Metadata,
		State:       sb.criState(),
		CreatedAt:   sb.CreatedAt,
		Network:     networkStatus(sb.Status().IPs),
		Labels:      cfg.Labels,
		Annotations: cfg.Annotations,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
		RuntimeHandler: sb.RuntimeHandler,
	}
}

// Count returns the number of sandboxes (for logs and tests).
func (m *Manager) Count() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.sandboxes)
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

// ReadyByHandler counts ready sandboxes by handler, and the infra containers among them
// (each has a monitor).
func (m *Manager) ReadyByHandler() (byHandler map[string]int, infra int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	byHandler = map[string]int{}
	for _, sb := range m.sandboxes {
		if sb.Status().State == StateReady {
			byHandler[sb.Handler]++
			if sb.Infra {
				infra++
			}
		}
	}
	return byHandler, infra
}
