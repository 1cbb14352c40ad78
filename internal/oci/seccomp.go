package oci

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/fsafe/regfile"
)

const fieldSeccomp = "config.linux.security_context.seccomp"

// containerSeccomp is the seccomp filter of a container: nil when privileged, unconfined or
// unset (kubelet sends RuntimeDefault when the pod asks for it); Docker's default profile
// for RuntimeDefault, judged against spec's capabilities (some syscalls follow a capability);
// a Docker-format JSON profile from the host for Localhost. The deprecated
// seccomp_profile_path ("runtime/default", "docker/default", "unconfined",
// "localhost/<path>") is read when seccomp is unset.
func containerSeccomp(sc *runtimeapi.LinuxContainerSecurityContext, spec *specs.Spec, runtimeDefault string) (*specs.LinuxSeccomp, error) {
	if sc.GetPrivileged() {
		return nil, nil
	}
	return seccompProfile(sc.GetSeccomp(), sc.GetSeccompProfilePath(), spec, runtimeDefault)
}

// SandboxSeccomp is the seccomp filter of a pod's sandbox container, from the pod's
// security_context.seccomp (or seccomp_profile_path), by the containers' rules, as
// containerd applies it to its sandbox container. RuntimeDefault is judged against the sandbox container
// container's capabilities (none, as SandboxContainerSpec gives it). runtimeDefault, when
// set, is the row's seccomp_profile, which RuntimeDefault then means.
func SandboxSeccomp(sc *runtimeapi.LinuxSandboxSecurityContext, runtimeDefault string) (*specs.LinuxSeccomp, error) {
	if sc.GetPrivileged() {
		return nil, nil
	}
	spec := &specs.Spec{Process: &specs.Process{Capabilities: sandboxContainerCapabilities()}}
	return seccompProfile(sc.GetSeccomp(), sc.GetSeccompProfilePath(), spec, runtimeDefault)
}

// LoadSeccompProfile reads a Docker-format JSON profile from the host, judged against
// spec's capabilities.
func LoadSeccompProfile(path string, spec *specs.Spec) (*specs.LinuxSeccomp, error) {
	data, err := regfile.Read(path, 16<<20)
	if err != nil {
		return nil, errors.New(errText(err))
	}
	return seccomp.LoadProfile(string(data), spec)
}

// seccompProfile reads a security context's seccomp field, or its deprecated path when
// the field is unset; errors name config.linux.security_context's field, which is the same
// for a pod and a container.
func seccompProfile(p *runtimeapi.SecurityProfile, path string, spec *specs.Spec, runtimeDefault string) (*specs.LinuxSeccomp, error) {
	field := fieldSeccomp
	typ, ref := runtimeapi.SecurityProfile_Unconfined, ""
	if p != nil {
		typ, ref = p.GetProfileType(), p.GetLocalhostRef()
	} else if path != "" {
		field = "config.linux.security_context.seccomp_profile_path"
		switch {
		case path == "runtime/default" || path == "docker/default":
			typ = runtimeapi.SecurityProfile_RuntimeDefault
		case path == "unconfined":
		case strings.HasPrefix(path, "localhost/"):
			typ, ref = runtimeapi.SecurityProfile_Localhost, strings.TrimPrefix(path, "localhost/")
		default:
			return nil, invalidf("%s %q is not runtime/default, unconfined or localhost/<path>", field, path)
		}
	}
	switch typ {
	case runtimeapi.SecurityProfile_Unconfined:
		return nil, nil
	case runtimeapi.SecurityProfile_RuntimeDefault:
		if runtimeDefault != "" {
			// The row's seccomp_profile (checked when the config was loaded; read now).
			p, err := LoadSeccompProfile(runtimeDefault, spec)
			if err != nil {
				return nil, invalidf("%s: RuntimeDefault is the handler's seccomp_profile %q: %v", field, runtimeDefault, err)
			}
			return p, nil
		}
		p, err := seccomp.GetDefaultProfile(spec)
		if err != nil {
			return nil, invalidf("%s: the runtime default profile: %v", field, err)
		}
		return p, nil
	case runtimeapi.SecurityProfile_Localhost:
		if field == fieldSeccomp {
			field += ".localhost_ref"
		}
		if !filepath.IsAbs(ref) {
			return nil, invalidf("%s %q is not an absolute path", field, ref)
		}
		data, err := regfile.Read(ref, 16<<20)
		if err != nil {
			return nil, invalidf("%s %q: %s", field, ref, errText(err))
		}
		p, err := seccomp.LoadProfile(string(data), spec)
		if err != nil {
			return nil, invalidf("%s %q: %v", field, ref, err)
		}
		return p, nil
	default:
		return nil, invalidf("%s.profile_type %d is not RuntimeDefault, Unconfined or Localhost", fieldSeccomp, typ)
	}
}
