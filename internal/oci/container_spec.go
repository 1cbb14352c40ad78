package oci

import (
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgcontrollers"
	"github.com/rtshimd/rtshimd/internal/lsm"
)

// Annotations containerd sets on application containers, besides the sandbox ones.
const (
	AnnotationContainerName = "io.kubernetes.cri.container-name"
	AnnotationImageName     = "io.kubernetes.cri.image-name"
)

// DefaultPathEnv is the PATH a container gets when neither the image nor the config sets one.
const DefaultPathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ContainerOptions is everything ContainerSpec needs.
type ContainerOptions struct {
	ID            string
	Config        *runtimeapi.ContainerConfig
	SandboxConfig *runtimeapi.PodSandboxConfig
	Image         ocispec.ImageConfig // the image's config: Entrypoint, Cmd, Env, WorkingDir, User, StopSignal
	Rootfs        string              // the mounted root filesystem (read /etc/passwd and /etc/group from it)
	SandboxID     string
	// Namespaces. Paths are files the runtime joins; "" with Host* false means a new namespace.
	NetNS, IPCNS, UTSNS           string
	PIDNS                         string // pid namespace to join (the pod's sandbox container's, or a TARGET container's); "" = new unless HostPID
	HostNetwork, HostIPC, HostPID bool
	// LSM is what the node's AppArmor and SELinux can do.
	LSM lsm.Host
	// UserNS is the pod's user namespace to join ("" = the node's), IDMappings its mappings.
	UserNS     string
	IDMappings *IDMappings
	// Pod files bind-mounted into the container (all host paths; "" = skip).
	HostnamePath, HostsPath, ResolvPath, ShmPath string
	CgroupsPath                                  string
	OOMScoreAdjMin                               int      // lowest oom_score_adj allowed: clamp requests up to it
	Capabilities                                 []string // the caps this node can grant at all ("CAP_CHOWN", ...): privileged gets these, never more
	// ImageVolumes are the host paths that config.mounts naming an image bind, by index
	// into config.mounts: the image's read-only root filesystem or its sub path.
	ImageVolumes map[int]string
	// From the pod's handler row, as its record keeps them: PodAnnotations are the
	// patterns of pod annotations passed into the spec (AddPodAnnotations);
	// PrivilegedWithoutHostDevices gives a privileged container neither the host's
	// devices nor the device cgroup's allow-all.
	PodAnnotations               []string
	PrivilegedWithoutHostDevices bool
	// RecursiveReadOnlyMounts: the pod's row has that feature (its runtime and the kernel
	// make rro binds). Without it a mount asking for recursive_read_only is refused, not
	// left to a runtime that would leave its submounts writable; kubelet asks only where
	// Status advertises the feature, but crictl and other clients need not.
	RecursiveReadOnlyMounts bool
	// DeviceOwnershipFromSecurityContext: the config's devices are owned by the
	// container's run_as_user and run_as_group (0 where unset), not by the host node's owner.
	DeviceOwnershipFromSecurityContext bool
	// Rlimits are the process's resource limits: the row's default_ulimits.
	Rlimits []specs.POSIXRlimit
	// SeccompProfile is the row's seccomp_profile: what RuntimeDefault means ("" Docker's).
	SeccompProfile string
}

// ContainerSpec builds the runtime spec of an application container the way containerd's CRI
// plugin does. Every error wraps errdefs.ErrInvalidArgument and names the CRI field and value.
//
// Where it differs from containerd: HOSTNAME is set in the environment like containerd does;
// masked and read-only paths default to DefaultMaskedPaths/DefaultReadonlyPaths when the
// security context leaves them nil, except in a pod with a user namespace, where nil lists
// are kubelet's procMount: Unmasked and nothing is masked; a host path that is missing is an error, never created;
// an unknown mount propagation is an error; the swap limit is only set when the config sets
// it (kubelet does so when the node's swap controller exists); user annotations under
// io.kubernetes.cri. and io.kubernetes.cri-o. are dropped so a pod cannot claim another's
// sandbox, also those of the pod that the row's pod_annotations pass, and the pod's under
// org.criu. and run.oci. pass only where a pattern is the key itself; a container's own
// annotations all reach the spec (containerd passes only those its container_annotations
// match).
func ContainerSpec(o ContainerOptions) (*specs.Spec, error) {
	config := o.Config
	if config == nil {
		return nil, invalidf("config is required")
	}
	sc := config.GetLinux().GetSecurityContext()
	privileged := sc.GetPrivileged()
	if privileged && !o.SandboxConfig.GetLinux().GetSecurityContext().GetPrivileged() {
		return nil, invalidf("config.linux.security_context.privileged is true but the pod sandbox is not privileged")
	}

	args, err := processArgs(config, o.Image)
	if err != nil {
		return nil, err
	}
	env, err := processEnv(config, o.Image, o.SandboxConfig.GetHostname())
	if err != nil {
		return nil, err
	}
	cwd, err := processCwd(config, o.Image)
	if err != nil {
		return nil, err
	}
	user, err := ResolveUser(o.Rootfs, sc, o.Image.User)
	if err != nil {
		return nil, err
	}
	caps, err := containerCapabilities(sc, o.Capabilities)
	if err != nil {
		return nil, err
	}
	oomScoreAdj, err := containerOOMScoreAdj(config, o.OOMScoreAdjMin)
	if err != nil {
		return nil, err
	}

	spec := &specs.Spec{
		Version: SpecVersion,
		Root:    &specs.Root{Path: o.Rootfs, Readonly: sc.GetReadonlyRootfs()},
		Process: &specs.Process{
			Terminal:        config.GetTty(),
			User:            user,
			Args:            args,
			Env:             env,
			Cwd:             cwd,
			Capabilities:    caps,
			NoNewPrivileges: sc.GetNoNewPrivs() && !privileged,
			OOMScoreAdj:     &oomScoreAdj,
			Rlimits:         slices.Clone(o.Rlimits),
		},
		Annotations: containerAnnotations(o),
		Linux: &specs.Linux{
			CgroupsPath: o.CgroupsPath,
			Namespaces:  containerNamespaces(o, privileged),
		},
	}
	o.IDMappings.apply(spec.Linux)
	spec.Annotations = scopeIsCgroup(spec.Annotations, o.CgroupsPath)
	const scField = "config.linux.security_context"
	if spec.Process.ApparmorProfile, err = o.LSM.AppArmorProfile(scField, sc.GetApparmor(), sc.GetApparmorProfile(), privileged); err != nil {
		return nil, err
	}
	if spec.Process.SelinuxLabel, spec.Linux.MountLabel, err = o.LSM.SELinuxLabels(scField, sc.GetSelinuxOptions(), privileged); err != nil {
		return nil, err
	}
	if !o.HostNetwork {
		spec.Hostname = o.SandboxConfig.GetHostname()
	}

	// Mounts.
	cri, err := criMounts(config, o.ImageVolumes, o.LSM, spec.Linux.MountLabel, o.RecursiveReadOnlyMounts)
	if err != nil {
		return nil, err
	}
	if err := checkMountMappings(config, o.IDMappings); err != nil {
		return nil, err
	}
	spec.Mounts, spec.Linux.RootfsPropagation = buildMounts(
		defaultMounts(privileged, o.ShmPath == "", o.HostNetwork && o.UserNS != ""),
		podFileMounts(o, sc.GetReadonlyRootfs()),
		cri)

	resources, err := Resources(config.GetLinux().GetResources())
	if err != nil {
		return nil, err
	}
	spec.Linux.Resources = trimmed(resources, o.CgroupsPath)

	// Devices.
	devs, rules, err := configDevices(config)
	if err != nil {
		return nil, err
	}
	if o.DeviceOwnershipFromSecurityContext {
		// As containerd: the run_as values as sent (0 where unset); a user named by
		// run_as_username is not resolved for this.
		uid, gid := uint32(sc.GetRunAsUser().GetValue()), uint32(sc.GetRunAsGroup().GetValue())
		for i := range devs {
			devs[i].UID, devs[i].GID = &uid, &gid
		}
	}
	if privileged && !o.PrivilegedWithoutHostDevices {
		host, err := devicesUnder("/dev", "/dev")
		if err != nil {
			return nil, invalidf("list the host's devices for a privileged container: %v", err)
		}
		for _, d := range host {
			if !slices.ContainsFunc(devs, func(c specs.LinuxDevice) bool { return c.Path == d.Path }) {
				devs = append(devs, d)
			}
		}
		resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	} else {
		// Also a privileged container on a row with privileged_without_host_devices: only
		// its config's devices, under the default rules, as containerd (whose
		// privileged_without_host_devices_all_devices_allowed would allow all; not offered).
		resources.Devices = append(defaultDeviceRules(), rules...)
	}
	spec.Linux.Devices = devs

	// Masked and read-only paths: as sent. kubelet always sends both lists, except for
	// procMount: Unmasked, which it sends as two empty lists, and protobuf delivers empty
	// as nil. Unmasked is allowed only in a user namespace (hostUsers: false), so nil
	// lists in a pod with a user namespace are Unmasked: nothing masked. Elsewhere nil
	// lists (crictl, a client that sends none) get the defaults.
	unmasked := sc.GetMaskedPaths() == nil && sc.GetReadonlyPaths() == nil && o.IDMappings != nil && len(o.IDMappings.UIDs) > 0
	if !privileged && !unmasked {
		spec.Linux.MaskedPaths = slices.Clone(DefaultMaskedPaths)
		if p := sc.GetMaskedPaths(); p != nil {
			spec.Linux.MaskedPaths = slices.Clone(p)
		}
		spec.Linux.ReadonlyPaths = slices.Clone(DefaultReadonlyPaths)
		if p := sc.GetReadonlyPaths(); p != nil {
			spec.Linux.ReadonlyPaths = slices.Clone(p)
		}
	}

	// Sysctls are the pod's, applied to each of its containers.
	if s := o.SandboxConfig.GetLinux().GetSysctls(); len(s) > 0 {
		spec.Linux.Sysctl = maps.Clone(s)
	}

	// Seccomp last: the default profile looks at the capabilities.
	if spec.Linux.Seccomp, err = containerSeccomp(sc, spec, o.SeccompProfile); err != nil {
		return nil, err
	}
	return spec, nil
}

// processArgs follows kubelet's rules: command replaces the image's ENTRYPOINT and args its
// CMD; a command alone runs without the CMD; args alone run after the ENTRYPOINT.
func processArgs(config *runtimeapi.ContainerConfig, image ocispec.ImageConfig) ([]string, error) {
	command, args := config.GetCommand(), config.GetArgs()
	if len(command) == 0 {
		// ENTRYPOINT [""] is Docker's way of clearing an inherited entrypoint.
		if !(len(image.Entrypoint) == 1 && image.Entrypoint[0] == "") {
			command = image.Entrypoint
		}
		if len(args) == 0 {
			args = image.Cmd
		}
	}
	out := append(slices.Clone(command), args...)
	if len(out) == 0 {
		return nil, invalidf("config.command is empty and the image has no ENTRYPOINT or CMD")
	}
	if out[0] == "" {
		return nil, invalidf("config.command: the program to run is an empty string")
	}
	return out, nil
}

// processEnv is PATH (a default) and HOSTNAME, then the image's Env, then config.envs; a
// later value of a name replaces the earlier one in place.
func processEnv(config *runtimeapi.ContainerConfig, image ocispec.ImageConfig, hostname string) ([]string, error) {
	if hostname == "" {
		hostname, _ = os.Hostname()
	}
	var env []string
	index := make(map[string]int)
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			env[i] = kv
			return
		}
		index[k] = len(env)
		env = append(env, kv)
	}
	set(DefaultPathEnv)
	set("HOSTNAME=" + hostname)
	for _, kv := range image.Env {
		if kv != "" {
			set(kv)
		}
	}
	for i, e := range config.GetEnvs() {
		k := e.GetKey()
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, invalidf("config.envs[%d].key %q is not an environment variable name", i, k)
		}
		if strings.ContainsRune(string(e.GetValue()), 0) {
			return nil, invalidf("config.envs[%d].value of %q contains a NUL byte", i, k)
		}
		set(k + "=" + string(e.GetValue()))
	}
	return env, nil
}

// processCwd is config.working_dir, else the image's WORKDIR, else "/".
func processCwd(config *runtimeapi.ContainerConfig, image ocispec.ImageConfig) (string, error) {
	if wd := config.GetWorkingDir(); wd != "" {
		if !path.IsAbs(wd) {
			return "", invalidf("config.working_dir %q is not an absolute path", wd)
		}
		return path.Clean(wd), nil
	}
	if image.WorkingDir != "" {
		// Docker resolves a relative WORKDIR against /.
		return path.Join("/", image.WorkingDir), nil
	}
	return "/", nil
}

// containerOOMScoreAdj is the config's oom_score_adj raised to what the daemon may set.
func containerOOMScoreAdj(config *runtimeapi.ContainerConfig, lowest int) (int, error) {
	adj := config.GetLinux().GetResources().GetOomScoreAdj()
	if adj < -1000 || adj > 1000 {
		return 0, invalidf("config.linux.resources.oom_score_adj %d is not between -1000 and 1000", adj)
	}
	return max(int(adj), lowest), nil
}

// containerAnnotations are the config's annotations plus those containerd and CRI-O set,
// which sandboxing runtimes read to place the container in its pod.
func containerAnnotations(o ContainerOptions) map[string]string {
	out := make(map[string]string)
	for k, v := range o.Config.GetAnnotations() {
		if reservedAnnotation(k) {
			continue
		}
		out[k] = v
	}
	md := o.SandboxConfig.GetMetadata()
	out[AnnotationContainerType] = ContainerTypeContainer
	out[AnnotationSandboxID] = o.SandboxID
	out[AnnotationSandboxName] = md.GetName()
	out[AnnotationSandboxNS] = md.GetNamespace()
	out[AnnotationSandboxUID] = md.GetUid()
	out[AnnotationContainerName] = o.Config.GetMetadata().GetName()
	// kubelet sends the image's ID in image.image and the pod spec's name in
	// user_specified_image (containerd annotates the latter); older kubelets only the first.
	out[AnnotationImageName] = o.Config.GetImage().GetImage()
	if name := o.Config.GetImage().GetUserSpecifiedImage(); name != "" {
		out[AnnotationImageName] = name
	}
	out[AnnotationCRIOType] = ContainerTypeContainer
	out[AnnotationCRIOSandboxID] = o.SandboxID
	AddSandboxSizing(out, o.SandboxConfig)
	AddPodAnnotations(out, o.SandboxConfig, o.PodAnnotations)
	return out
}

// cgroup2 tells whether /sys/fs/cgroup is the unified hierarchy (then an unprivileged
// container gets its own cgroup namespace, as with containerd).
func cgroup2() bool { return cgcontrollers.Default().V2() }

// containerNamespaces: network, IPC, UTS and PID joined by path or new (none when the host's),
// a new mount namespace, and a cgroup namespace on cgroup v2 unless privileged: the shape
// runc runs. A kind whose containers join a sandbox of its own changes it (kind.AdjustSpec).
func containerNamespaces(o ContainerOptions, privileged bool) []specs.LinuxNamespace {
	ipc, uts, pid := o.IPCNS, o.UTSNS, o.PIDNS
	var ns []specs.LinuxNamespace
	if !o.HostPID {
		ns = append(ns, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: pid})
	}
	if !o.HostNetwork {
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: o.NetNS})
	}
	if !o.HostIPC {
		ns = append(ns, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: ipc})
	}
	if !o.HostNetwork {
		ns = append(ns, specs.LinuxNamespace{Type: specs.UTSNamespace, Path: uts})
	}
	ns = append(ns, specs.LinuxNamespace{Type: specs.MountNamespace})
	if o.UserNS != "" {
		ns = append(ns, specs.LinuxNamespace{Type: specs.UserNamespace, Path: o.UserNS})
	}
	if !privileged && cgroup2() {
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	return ns
}

// checkMountMappings: a mount may ask for ID mappings (an idmapped mount) only in a pod
// user namespace, and only for the pod's own mappings, which is what kubelet sends; the
// container manager makes those mounts through the pod's namespace.
func checkMountMappings(config *runtimeapi.ContainerConfig, pod *IDMappings) error {
	for i, m := range config.GetMounts() {
		for _, f := range []struct {
			name string
			got  []*runtimeapi.IDMapping
			pod  func() []specs.LinuxIDMapping
		}{
			{"uidMappings", m.GetUidMappings(), func() []specs.LinuxIDMapping { return pod.UIDs }},
			{"gidMappings", m.GetGidMappings(), func() []specs.LinuxIDMapping { return pod.GIDs }},
		} {
			if len(f.got) == 0 {
				continue
			}
			if pod == nil {
				return invalidf("config.mounts[%d].%s: an idmapped mount needs a pod user namespace (userns_options mode POD)", i, f.name)
			}
			want := f.pod()
			same := len(f.got) == len(want)
			for j := 0; same && j < len(want); j++ {
				g := f.got[j]
				same = g.GetContainerId() == want[j].ContainerID && g.GetHostId() == want[j].HostID && g.GetLength() == want[j].Size
			}
			if !same {
				return invalidf("config.mounts[%d].%s %v differ from the pod user namespace's %v: volumes are idmapped through the pod's namespace only", i, f.name, f.got, want)
			}
		}
		if (len(m.GetUidMappings()) == 0) != (len(m.GetGidMappings()) == 0) {
			return invalidf("config.mounts[%d]: uidMappings and gidMappings go together", i)
		}
	}
	return nil
}

var pageSizeRE = regexp.MustCompile(`^[1-9][0-9]*[KMGTP]?B$`)

// Resources is linux.resources from config.linux.resources (CreateContainer or
// UpdateContainerResources); zero values are left unset, as containerd does.
func Resources(r *runtimeapi.LinuxContainerResources) (*specs.LinuxResources, error) {
	const f = "config.linux.resources."
	out := &specs.LinuxResources{}
	if r == nil {
		return out, nil
	}
	cpu := &specs.LinuxCPU{}
	if v := r.GetCpuShares(); v != 0 {
		if v < 0 {
			return nil, invalidf(f+"cpu_shares %d is negative", v)
		}
		s := uint64(v)
		cpu.Shares = &s
	}
	if v := r.GetCpuPeriod(); v != 0 {
		if v < 0 {
			return nil, invalidf(f+"cpu_period %d is negative", v)
		}
		p := uint64(v)
		cpu.Period = &p
	}
	if v := r.GetCpuQuota(); v != 0 {
		if v < -1 {
			return nil, invalidf(f+"cpu_quota %d is neither -1 (no limit) nor positive", v)
		}
		cpu.Quota = &v
	}
	cpu.Cpus, cpu.Mems = r.GetCpusetCpus(), r.GetCpusetMems()
	if *cpu != (specs.LinuxCPU{}) {
		out.CPU = cpu
	}

	mem := &specs.LinuxMemory{}
	if v := r.GetMemoryLimitInBytes(); v != 0 {
		if v < 0 {
			return nil, invalidf(f+"memory_limit_in_bytes %d is negative", v)
		}
		mem.Limit = &v
	}
	if v := r.GetMemorySwapLimitInBytes(); v != 0 {
		if v < -1 {
			return nil, invalidf(f+"memory_swap_limit_in_bytes %d is neither -1 (no limit) nor positive", v)
		}
		mem.Swap = &v
	}
	if mem.Limit != nil || mem.Swap != nil {
		out.Memory = mem
	}

	for i, h := range r.GetHugepageLimits() {
		if !pageSizeRE.MatchString(h.GetPageSize()) {
			return nil, invalidf(f+"hugepage_limits[%d].page_size %q is not a size like 2MB or 1GB", i, h.GetPageSize())
		}
		out.HugepageLimits = append(out.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	for k := range r.GetUnified() {
		if k == "" || strings.Contains(k, "/") {
			return nil, invalidf(f+"unified key %q is not a cgroup file name", k)
		}
	}
	if len(r.GetUnified()) > 0 {
		out.Unified = maps.Clone(r.GetUnified())
	}
	return out, nil
}

// trimmed is res without the limits of cgroup controllers the node lacks (see cgcontrollers).
func trimmed(res *specs.LinuxResources, cgroupsPath string) *specs.LinuxResources {
	cgcontrollers.Default().Trim(res, cgroupsPath)
	return res
}
