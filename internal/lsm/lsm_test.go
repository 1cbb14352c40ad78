package lsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/selinux/go-selinux/label"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

const f = "config.linux.security_context"

// On a node without AppArmor (the zero Host), a Localhost profile is refused by name in
// either field, RuntimeDefault and Unconfined run unconfined, and nonsense is refused.
func TestAppArmorWithoutAppArmor(t *testing.T) {
	var h Host
	for _, c := range []struct {
		name       string
		sp         *runtimeapi.SecurityProfile
		deprecated string
		privileged bool
		wantErr    string
	}{
		{"nothing", nil, "", false, ""},
		{"runtime-default", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, "", false, ""},
		{"deprecated-default", nil, "runtime/default", false, ""},
		{"unconfined", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, "", false, ""},
		{"localhost", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "my-prof"}, "", false, `config.linux.security_context.apparmor.localhost_ref "my-prof": AppArmor is not enabled`},
		{"localhost-prefixed", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/my-prof"}, "", false, `localhost_ref "my-prof"`},
		{"deprecated-localhost", nil, "localhost/my-prof", false, `config.linux.security_context.apparmor_profile "my-prof": AppArmor is not enabled`},
		{"field-wins", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, "localhost/my-prof", false, ""},
		{"privileged-localhost", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "p"}, "", true, ""},
		{"empty-ref", &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost}, "", false, "localhost_ref is empty"},
		{"bad-string", nil, "enforce", false, `apparmor_profile "enforce" is not runtime/default`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := h.AppArmorProfile(f, c.sp, c.deprecated, c.privileged)
			if c.wantErr == "" {
				if err != nil || p != "" {
					t.Errorf("= %q, %v; want no profile", p, err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("err = %v, want InvalidArgument containing %q", err, c.wantErr)
			}
		})
	}
}

// Without SELinux there are no labels: a label asked for is left out (warned about), or
// with StrictSELinux refused naming the field and the label; none is fine either way.
func TestSELinuxWithoutSELinux(t *testing.T) {
	for _, h := range []Host{{}, {StrictSELinux: true}} {
		if p, m, err := h.SELinuxLabels(f, nil, false); p != "" || m != "" || err != nil {
			t.Errorf("strict %v, no options: %q %q %v", h.StrictSELinux, p, m, err)
		}
		if p, m, err := h.SELinuxLabels(f, &runtimeapi.SELinuxOption{}, false); p != "" || m != "" || err != nil {
			t.Errorf("strict %v, empty options: %q %q %v", h.StrictSELinux, p, m, err)
		}
	}
	asked := &runtimeapi.SELinuxOption{Type: "spc_t", Level: "s0:c1,c2"}
	if p, m, err := (Host{}).SELinuxLabels(f, asked, false); p != "" || m != "" || err != nil {
		t.Errorf("a label, not strict: %q %q %v, want no labels and no error", p, m, err)
	}
	_, _, err := Host{StrictSELinux: true}.SELinuxLabels(f, asked, false)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `config.linux.security_context.selinux_options "type:spc_t,level:s0:c1,c2": SELinux is not enabled`) {
		t.Errorf("err = %v", err)
	}
}

// selinux_relabel: without SELinux left out (nothing relabeled) or, strict, refused by
// name; with it, the host path gets the container's mount label, private (not shared), and
// a file system without label support is left as it is.
func TestRelabel(t *testing.T) {
	var calls []string
	relabel = func(path, fileLabel string, shared bool) error {
		calls = append(calls, fmt.Sprintf("%s %s %v", path, fileLabel, shared))
		if path == "/nolabels" {
			return fmt.Errorf("lsetxattr %s: %w", path, syscall.ENOTSUP)
		}
		return nil
	}
	defer func() { relabel = label.Relabel }()
	const field = "config.mounts[2].selinux_relabel"
	const mountLabel = "system_u:object_r:container_file_t:s0:c1,c2"

	var off Host
	if ok, err := off.CheckRelabel(field, `config.mounts[2].host_path "/data"`); ok || err != nil {
		t.Errorf("CheckRelabel without SELinux = %v, %v; want false, nil", ok, err)
	}
	if err := off.Relabel(field, "/data", ""); err != nil {
		t.Errorf("Relabel without SELinux: %v", err)
	}
	strict := Host{StrictSELinux: true}
	if ok, err := strict.CheckRelabel(field, `config.mounts[2].host_path "/data"`); ok || !errors.Is(err, errdefs.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), `config.mounts[2].selinux_relabel is set for config.mounts[2].host_path "/data": SELinux is not enabled on this node`) {
		t.Errorf("CheckRelabel without SELinux, strict: %v, %v", ok, err)
	}
	if err := strict.Relabel(field, "/data", ""); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `host path "/data": SELinux is not enabled`) {
		t.Errorf("Relabel without SELinux, strict: %v", err)
	}
	if len(calls) != 0 {
		t.Fatalf("relabeled without SELinux: %q", calls)
	}

	on := Host{SELinux: true}
	if ok, err := on.CheckRelabel(field, "x"); !ok || err != nil {
		t.Errorf("CheckRelabel with SELinux: %v", err)
	}
	if err := on.Relabel(field, "/data", mountLabel); err != nil {
		t.Errorf("Relabel: %v", err)
	}
	if err := on.Relabel(field, "/nolabels", mountLabel); err != nil {
		t.Errorf("Relabel of a file system without labels: %v", err)
	}
	want := []string{"/data " + mountLabel + " false", "/nolabels " + mountLabel + " false"}
	if !slices.Equal(calls, want) {
		t.Errorf("relabel calls %q, want %q", calls, want)
	}
	relabel = func(string, string, bool) error { return errors.New("SELinux relabeling of / is not allowed") }
	if err := on.Relabel(field, "/", mountLabel); err == nil || !strings.Contains(err.Error(), `config.mounts[2].selinux_relabel: relabel host path "/" with "`+mountLabel+`": SELinux relabeling of / is not allowed`) {
		t.Errorf("Relabel of /: %v", err)
	}
}
