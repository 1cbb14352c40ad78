package main

import (
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/handlers"
)

// The policy has one validation per ready handler and feature it lacks, each naming the
// class, the field and the feature; a handler that is not ready, or one that gives
// everything, adds none, and no lacking feature anywhere means no policy.
func TestAdmissionPolicyValidations(t *testing.T) {
	row := func(name string, ready bool, f handlers.Features) *handlers.Handler {
		return &handlers.Handler{Name: name, Config: config.Handler{RuntimeType: "oci"}, Discovery: handlers.Discovery{Ready: ready, Features: f}}
	}
	all := handlers.Features{HostNetwork: true, HostPID: true, HostIPC: true, UserNamespaces: true, RecursiveReadOnlyMounts: true}
	if p, b := admissionPolicy([]*handlers.Handler{row("runc", true, all)}); p != nil || b != nil {
		t.Fatalf("a policy for a handler that gives everything: %+v", p)
	}
	gvisor := handlers.Features{HostNetwork: true}
	p, b := admissionPolicy([]*handlers.Handler{row("runc", true, all), row("runsc", true, gvisor), row("ghost", false, handlers.Features{})})
	if p == nil || b == nil || b.Spec.PolicyName != p.Name {
		t.Fatalf("policy %+v, binding %+v", p, b)
	}
	if n := len(p.Spec.Validations); n != 4 {
		t.Fatalf("%d validations, want runsc's 4 lacking features", n)
	}
	for i, want := range []string{"spec.hostPID", "spec.hostIPC", "spec.hostUsers: false", "recursiveReadOnly"} {
		v := p.Spec.Validations[i]
		if !strings.Contains(v.Expression, `object.spec.runtimeClassName == "runsc"`) || !strings.Contains(v.Message, want) || !strings.Contains(v.Message, "runtimeClassName runsc") {
			t.Errorf("validation %d: %q / %q, want runsc and %s", i, v.Expression, v.Message, want)
		}
	}

	// User namespaces without recursive read-only mounts: no hostNetwork with them.
	noRRO := all
	noRRO.RecursiveReadOnlyMounts = false
	p, _ = admissionPolicy([]*handlers.Handler{row("old-runc", true, noRRO)})
	if p == nil || len(p.Spec.Validations) != 2 {
		t.Fatalf("policy %+v, want old-runc's 2 validations", p)
	}
	v := p.Spec.Validations[0]
	if !strings.Contains(v.Message, "spec.hostUsers: false with spec.hostNetwork (feature recursive_read_only_mounts)") ||
		!strings.Contains(v.Expression, "!object.spec.hostUsers && has(object.spec.hostNetwork) && object.spec.hostNetwork") {
		t.Errorf("validation: %q / %q, want hostUsers: false with hostNetwork refused", v.Expression, v.Message)
	}
}
