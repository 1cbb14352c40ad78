package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// The pod's seccomp request reaches its sandbox container's spec, as containerd
// applies it to the sandbox container: RuntimeDefault the default profile, Localhost the
// file, Unconfined, unset and privileged none; the deprecated seccomp_profile_path likewise.
// A request that cannot be applied is refused by name before anything is made.
func TestSandboxContainerSeccomp(t *testing.T) {
	dir := t.TempDir()
	profile := filepath.Join(dir, "profile.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_LOG","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &Manager{}
	pod := func(sp *runtimeapi.SecurityProfile, path string, privileged bool) *runtimeapi.PodSandboxConfig {
		c := validPod()
		c.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			Seccomp: sp, SeccompProfilePath: path, Privileged: privileged}}
		return c
	}
	sandboxContainerSeccomp := func(cfg *runtimeapi.PodSandboxConfig) (*specs.LinuxSeccomp, error) {
		sec, err := m.podSecurity(cfg, "")
		if err != nil {
			return nil, err
		}
		sb := &Sandbox{Metadata: Metadata{ID: "sb1"}, config: cfg, security: sec}
		return m.sandboxContainerSpec(sb, "web-0", false, false, false).Linux.Seccomp, nil
	}
	runtimeDefault := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	localhost := func(ref string) *runtimeapi.SecurityProfile {
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}
	}

	for name, cfg := range map[string]*runtimeapi.PodSandboxConfig{
		"runtime-default":          pod(runtimeDefault, "", false),
		"seccomp_profile_path":     pod(nil, "runtime/default", false),
		"field wins over the path": pod(runtimeDefault, "unconfined", false),
	} {
		s, err := sandboxContainerSeccomp(cfg)
		if err != nil || s == nil || s.DefaultAction != specs.ActErrno {
			t.Errorf("%s: seccomp %+v, %v; want the default profile", name, s, err)
			continue
		}
		// Judged against the sandbox container's capabilities: none.
		for _, c := range s.Syscalls {
			if c.Action == specs.ActAllow && len(c.Args) == 0 && strings.Contains(" "+strings.Join(c.Names, " ")+" ", " mount ") {
				t.Errorf("%s: the default profile allows mount without CAP_SYS_ADMIN", name)
			}
		}
	}
	for name, cfg := range map[string]*runtimeapi.PodSandboxConfig{
		"localhost":      pod(localhost(profile), "", false),
		"localhost path": pod(nil, "localhost/"+profile, false),
	} {
		if s, err := sandboxContainerSeccomp(cfg); err != nil || s == nil || s.DefaultAction != specs.ActLog || len(s.Syscalls) != 1 {
			t.Errorf("%s: seccomp %+v, %v; want the file's profile", name, s, err)
		}
	}
	for name, cfg := range map[string]*runtimeapi.PodSandboxConfig{
		"unset":                validPod(),
		"unconfined":           pod(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, "", false),
		"path unconfined":      pod(nil, "unconfined", false),
		"privileged":           pod(runtimeDefault, "", true),
		"privileged, bad file": pod(localhost(filepath.Join(dir, "missing.json")), "", true),
	} {
		if s, err := sandboxContainerSeccomp(cfg); err != nil || s != nil {
			t.Errorf("%s: seccomp %+v, %v; want none", name, s, err)
		}
	}

	missing := filepath.Join(dir, "missing.json")
	for _, c := range []struct {
		cfg  *runtimeapi.PodSandboxConfig
		want string
	}{
		{pod(localhost(missing), "", false), `config.linux.security_context.seccomp.localhost_ref "` + missing + `": no such file or directory`},
		{pod(localhost("rel.json"), "", false), `config.linux.security_context.seccomp.localhost_ref "rel.json" is not an absolute path`},
		{pod(&runtimeapi.SecurityProfile{ProfileType: 8}, "", false), `config.linux.security_context.seccomp.profile_type 8 is not`},
		{pod(nil, "bogus", false), `config.linux.security_context.seccomp_profile_path "bogus" is not`},
	} {
		_, err := m.podSecurity(c.cfg, "")
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want InvalidArgument containing %q", err, c.want)
		}
	}
}
