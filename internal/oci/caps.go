package oci

import (
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// AllCapabilities are the Linux capabilities in kernel order (CAP_CHOWN is 0).
var AllCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// DefaultCapabilities is the set containerd (and Docker) give an unprivileged container.
var DefaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

const fieldCaps = "config.linux.security_context.capabilities"

// capName turns "chown", "CAP_CHOWN", "Cap_Chown" into "CAP_CHOWN".
func capName(s string) string {
	s = strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(s, "CAP_") {
		s = "CAP_" + s
	}
	return s
}

// containerCapabilities works out the capability sets of a container. grantable is what the
// node can grant at all (empty: every capability in AllCapabilities); nothing outside it is
// ever given, and asking for more is not an error. Unknown names are.
//
// Unprivileged: DefaultCapabilities; "ALL" in add gives every grantable one, "ALL" in drop
// removes all, then the named adds and drops apply (a name in both is dropped). The sets
// bounding, effective and permitted get the result; add_ambient_capabilities are added to
// every set, inheritable and ambient included. Privileged: every grantable capability, with
// add and drop ignored (only checked).
func containerCapabilities(sc *runtimeapi.LinuxContainerSecurityContext, grantable []string) (*specs.LinuxCapabilities, error) {
	can := make(map[string]bool)
	for _, c := range grantable {
		can[capName(c)] = true
	}
	if len(can) == 0 {
		for _, c := range AllCapabilities {
			can[c] = true
		}
	}
	known := func(c string) bool { return can[c] || slices.Contains(AllCapabilities, c) }

	caps := sc.GetCapabilities()
	check := func(list string, names []string) ([]string, bool, error) {
		var out []string
		all := false
		for i, n := range names {
			if strings.EqualFold(strings.TrimSpace(n), "ALL") {
				all = true
				continue
			}
			c := capName(n)
			if !known(c) {
				return nil, false, invalidf("%s.%s[%d] %q is not a capability", fieldCaps, list, i, n)
			}
			out = append(out, c)
		}
		return out, all, nil
	}
	add, addAll, err := check("add_capabilities", caps.GetAddCapabilities())
	if err != nil {
		return nil, err
	}
	drop, dropAll, err := check("drop_capabilities", caps.GetDropCapabilities())
	if err != nil {
		return nil, err
	}
	ambient, _, err := check("add_ambient_capabilities", caps.GetAddAmbientCapabilities())
	if err != nil {
		return nil, err
	}

	set := make(map[string]bool)
	amb := make(map[string]bool)
	if sc.GetPrivileged() {
		for c := range can {
			set[c] = true
		}
	} else {
		if !dropAll {
			for _, c := range DefaultCapabilities {
				set[c] = true
			}
		}
		if addAll {
			for c := range can {
				set[c] = true
			}
		}
		for _, c := range add {
			set[c] = true
		}
		for _, c := range ambient {
			set[c], amb[c] = true, true
		}
		for _, c := range drop {
			delete(set, c)
			delete(amb, c)
		}
	}
	list := orderedCaps(set, can)
	out := &specs.LinuxCapabilities{
		Bounding:  list,
		Effective: slices.Clone(list),
		Permitted: slices.Clone(list),
	}
	if a := orderedCaps(amb, can); len(a) > 0 {
		out.Inheritable, out.Ambient = a, slices.Clone(a)
	}
	return out, nil
}

// orderedCaps lists the members of set the node can grant: kernel order first, then any
// capability this table does not know (a newer kernel's) by name. Never nil.
func orderedCaps(set, can map[string]bool) []string {
	out := []string{}
	for _, c := range AllCapabilities {
		if set[c] && can[c] {
			out = append(out, c)
		}
	}
	var extra []string
	for c := range set {
		if can[c] && !slices.Contains(AllCapabilities, c) {
			extra = append(extra, c)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}
