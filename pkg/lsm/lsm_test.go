package lsm

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/pkg/errdefs"
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

// Without SELinux, any label part is refused naming the field and the label; none is fine.
func TestSELinuxWithoutSELinux(t *testing.T) {
	var h Host
	if p, m, err := h.SELinuxLabels(f, nil, false); p != "" || m != "" || err != nil {
		t.Errorf("no options: %q %q %v", p, m, err)
	}
	if p, m, err := h.SELinuxLabels(f, &runtimeapi.SELinuxOption{}, false); p != "" || m != "" || err != nil {
		t.Errorf("empty options: %q %q %v", p, m, err)
	}
	_, _, err := h.SELinuxLabels(f, &runtimeapi.SELinuxOption{Type: "spc_t", Level: "s0:c1,c2"}, false)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `config.linux.security_context.selinux_options "type:spc_t,level:s0:c1,c2": SELinux is not enabled`) {
		t.Errorf("err = %v", err)
	}
}
