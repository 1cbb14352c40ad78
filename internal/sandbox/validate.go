package sandbox

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/oci"
)

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
	// The CRI: run_as_group "should only be specified when run_as_user is specified;
	// otherwise, the runtime MUST error" (as for containers, internal/oci).
	if sc := cfg.GetLinux().GetSecurityContext(); sc.GetRunAsGroup() != nil && sc.GetRunAsUser() == nil {
		return invalid("config.linux.security_context.run_as_group %d is set without run_as_user", sc.GetRunAsGroup().GetValue())
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
// GIDs, each mapping container ID 0, and no node PID or IPC namespace beside a pod user
// namespace (kubelet refuses hostUsers: false with hostPID or hostIPC). The node's network
// namespace is allowed, as containerd 2.3 and CRI-O 1.35 allow it (KEP-5607, kubelet's
// UserNamespacesHostNetworkSupport): its containers get the node's /sys (oci.SysMount).
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
	}{{"pid", ns.GetPid()}, {"ipc", ns.GetIpc()}} {
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
