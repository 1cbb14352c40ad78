package main

import (
	"fmt"
	"io"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/rtshimd/rtshimd/internal/handlers"
)

// AdmissionPolicyName names the ValidatingAdmissionPolicy and its binding that
// `rtshimd runtimeclasses --admission` writes.
const AdmissionPolicyName = "rtshimd-runtimeclass-features"

// podFeature is a pod field a handler may not be able to give, as a CEL condition on the
// pod that is true when the pod asks for it.
type podFeature struct {
	field   string // what the pod sets, as the message names it
	feature string // the handler feature (`rtshimd handlers`)
	has     func(handlers.Features) bool
	asks    string
}

// anyContainer is a CEL condition true when one of the pod's containers (init and
// ephemeral ones too) satisfies cond, a condition on c.
func anyContainer(cond string) string {
	var parts []string
	for _, list := range []string{"containers", "initContainers", "ephemeralContainers"} {
		parts = append(parts, fmt.Sprintf("(has(object.spec.%[1]s) && object.spec.%[1]s.exists(c, %[2]s))", list, cond))
	}
	return strings.Join(parts, " || ")
}

// podFeatures are what CheckPod refuses at RunPodSandbox (and recursive read-only mounts,
// which CreateContainer refuses), written for the API server to refuse at admission. The
// policy only fails a pod early, as pods it does not match get by (ephemeral containers,
// no runtimeClassName, other nodes' tables): the node must refuse each row itself
// (TestAdmissionFeaturesRefusedByNode).
var podFeatures = []podFeature{
	{"spec.hostNetwork", "host_network", func(f handlers.Features) bool { return f.HostNetwork }, "has(object.spec.hostNetwork) && object.spec.hostNetwork"},
	{"spec.hostPID", "host_pid", func(f handlers.Features) bool { return f.HostPID }, "has(object.spec.hostPID) && object.spec.hostPID"},
	{"spec.hostIPC", "host_ipc", func(f handlers.Features) bool { return f.HostIPC }, "has(object.spec.hostIPC) && object.spec.hostIPC"},
	{"spec.hostUsers: false", "user_namespaces", func(f handlers.Features) bool { return f.UserNamespaces }, "has(object.spec.hostUsers) && !object.spec.hostUsers"},
	// Such a pod gets the node's /sys, recursively read-only; a handler without user
	// namespaces is refused by the line above.
	{"spec.hostUsers: false with spec.hostNetwork", "recursive_read_only_mounts",
		func(f handlers.Features) bool { return f.RecursiveReadOnlyMounts || !f.UserNamespaces },
		"has(object.spec.hostUsers) && !object.spec.hostUsers && has(object.spec.hostNetwork) && object.spec.hostNetwork"},
	{"volumeMounts[].recursiveReadOnly: Enabled", "recursive_read_only_mounts", func(f handlers.Features) bool { return f.RecursiveReadOnlyMounts },
		anyContainer("has(c.volumeMounts) && c.volumeMounts.exists(m, has(m.recursiveReadOnly) && m.recursiveReadOnly == 'Enabled')")},
}

// admissionPolicy is a ValidatingAdmissionPolicy that refuses, when a pod is created, a
// pod whose RuntimeClass (named as runtimeClass names it: after its handler) cannot give
// what the pod asks for, and its binding; nil when every ready handler gives everything.
// A pod without runtimeClassName is not matched: it may be scheduled onto any node, of any
// runtime and default, and the policy is cluster-wide; this node refuses it itself.
func admissionPolicy(rows []*handlers.Handler) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	var validations []admissionv1.Validation
	for _, h := range rows {
		if !h.Ready {
			continue // no RuntimeClass is written for it: the API server refuses its pods
		}
		for _, f := range podFeatures {
			if f.has(h.Features) {
				continue
			}
			validations = append(validations, admissionv1.Validation{
				Expression: fmt.Sprintf("!(has(object.spec.runtimeClassName) && object.spec.runtimeClassName == %q && (%s))", h.Name, f.asks),
				Message: fmt.Sprintf("runtimeClassName %s: its handler %s (%s) does not support %s (feature %s): choose another RuntimeClass or drop %s from the pod",
					h.Name, h.Name, h.Type(), f.field, f.feature, f.field),
				Reason: reasonPtr(metav1.StatusReasonForbidden),
			})
		}
	}
	if len(validations) == 0 {
		return nil, nil
	}
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: validations,
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        AdmissionPolicyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return policy, binding
}

func reasonPtr(r metav1.StatusReason) *metav1.StatusReason { return &r }

// writeAdmission writes the policy and its binding after the RuntimeClasses.
func writeAdmission(w io.Writer, rows []*handlers.Handler) error {
	policy, binding := admissionPolicy(rows)
	if policy == nil {
		fmt.Fprintln(w, "# Every ready handler gives every pod feature: no admission policy is needed.")
		return nil
	}
	for _, o := range []any{policy, binding} {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "---\n%s", b)
	}
	return nil
}
