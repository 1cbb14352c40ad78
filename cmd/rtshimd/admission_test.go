package main

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/oci"
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

// The admission policy only fails a pod early: ephemeral containers, pods without
// runtimeClassName, classes named otherwise and nodes whose tables differ all pass it
// (security review 2026-12-06, R11). So every pod feature it refuses must also be refused
// by the node itself, with no policy: CheckPod at RunPodSandbox for the pod's fields,
// ContainerSpec at CreateContainer for a container's. Each row is asked for as kubelet
// sends it, to a handler lacking that one feature (refused) and to one with all (accepted,
// so that the refusal is the feature's). A row added to podFeatures must be added here.
func TestAdmissionFeaturesRefusedByNode(t *testing.T) {
	all := handlers.Features{HostNetwork: true, HostPID: true, HostIPC: true, UserNamespaces: true, RecursiveReadOnlyMounts: true}
	lacking := func(feature string) handlers.Features {
		f := all
		switch feature {
		case "host_network":
			f.HostNetwork = false
		case "host_pid":
			f.HostPID = false
		case "host_ipc":
			f.HostIPC = false
		case "user_namespaces":
			f.UserNamespaces = false
		case "recursive_read_only_mounts":
			f.RecursiveReadOnlyMounts = false
		default:
			t.Fatalf("feature %q: add it to this test", feature)
		}
		return f
	}
	userns := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
		Uids: []*runtimeapi.IDMapping{{HostId: 200000, Length: 65536}}, Gids: []*runtimeapi.IDMapping{{HostId: 200000, Length: 65536}}}
	pods := map[string]*runtimeapi.NamespaceOption{
		"spec.hostNetwork":      {Network: runtimeapi.NamespaceMode_NODE},
		"spec.hostPID":          {Pid: runtimeapi.NamespaceMode_NODE},
		"spec.hostIPC":          {Ipc: runtimeapi.NamespaceMode_NODE},
		"spec.hostUsers: false": {UsernsOptions: userns},
		"spec.hostUsers: false with spec.hostNetwork": {Network: runtimeapi.NamespaceMode_NODE, UsernsOptions: userns},
	}
	vol := t.TempDir()
	containers := map[string][]*runtimeapi.Mount{
		"volumeMounts[].recursiveReadOnly: Enabled": {{ContainerPath: "/data", HostPath: vol, Readonly: true, RecursiveReadOnly: true}},
	}
	for _, f := range podFeatures {
		t.Run(f.field, func(t *testing.T) {
			without := lacking(f.feature)
			if f.has(without) || !f.has(all) {
				t.Fatalf("the policy's row: has(without %s) = %v, has(all) = %v", f.feature, f.has(without), f.has(all))
			}
			ns, mounts := pods[f.field], containers[f.field]
			switch {
			case ns != nil:
				pod := &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{
					SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}}}
				err := (&handlers.Handler{Name: "h", Discovery: handlers.Discovery{Ready: true, Features: without}}).CheckPod(pod)
				if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), f.feature) {
					t.Errorf("CheckPod without %s: %v, want FailedPrecondition naming it", f.feature, err)
				}
				if err := (&handlers.Handler{Name: "h", Discovery: handlers.Discovery{Ready: true, Features: all}}).CheckPod(pod); err != nil {
					t.Errorf("CheckPod with every feature: %v", err)
				}
			case mounts != nil:
				spec := func(rro bool) error {
					_, err := oci.ContainerSpec(oci.ContainerOptions{
						ID: "c1", SandboxID: "sb1", Rootfs: t.TempDir(), RecursiveReadOnlyMounts: rro,
						Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
							Image: &runtimeapi.ImageSpec{Image: "busybox"}, Command: []string{"true"},
							Linux: &runtimeapi.LinuxContainerConfig{}, Mounts: mounts},
						SandboxConfig: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p"}, Linux: &runtimeapi.LinuxPodSandboxConfig{}},
					})
					return err
				}
				if err := spec(without.RecursiveReadOnlyMounts); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), f.feature) {
					t.Errorf("ContainerSpec without %s: %v, want InvalidArgument naming it", f.feature, err)
				}
				if err := spec(all.RecursiveReadOnlyMounts); err != nil {
					t.Errorf("ContainerSpec with every feature: %v", err)
				}
			default:
				t.Fatalf("podFeatures row %q: add how kubelet asks for it to this test", f.field)
			}
		})
	}
}
