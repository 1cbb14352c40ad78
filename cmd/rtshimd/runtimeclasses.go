package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/rtshimd/rtshimd/internal/handlers"
)

// NodeLabelPrefix names the node label that advertises a ready handler; each RuntimeClass
// selects the nodes that carry its handler's.
const NodeLabelPrefix = "runtime.rtshimd.io/"

// RestrictedLabelPrefix names the label that --restricted-label has each RuntimeClass
// select too: under node-restriction.kubernetes.io/, which the NodeRestriction admission
// plugin keeps a node from setting on itself. NodeLabelPrefix's labels are the node's own
// (the daemon writes them with kubelet's credentials), so any node, a compromised one
// included, can claim a handler and attract the pods that chose its isolation; this one
// only an administrator sets.
const RestrictedLabelPrefix = "node-restriction.kubernetes.io/rtshimd-"

// runtimeclassesCmd discovers every handler as the daemon would and prints a
// node.k8s.io/v1 RuntimeClass for each ready one; the others, with their reasons, and the
// command that labels this node go in comments. With --admission it adds the
// ValidatingAdmissionPolicy that refuses, at admission, pods asking a RuntimeClass for
// what its handler cannot give (admission.go). With --restricted-label each class also
// selects RestrictedLabelPrefix<handler>=true, which an administrator sets.
func runtimeclassesCmd(args []string) error {
	var admission, restricted bool
	_, table, done, err := discoverForCommand(args, func(fs *flag.FlagSet) {
		fs.BoolVar(&admission, "admission", false, "also write a ValidatingAdmissionPolicy refusing pods that ask a RuntimeClass for what its handler cannot give")
		fs.BoolVar(&restricted, "restricted-label", false, "each RuntimeClass also selects "+RestrictedLabelPrefix+"<handler>=true, a label nodes cannot set on themselves (NodeRestriction): an administrator sets it on the nodes trusted to run the handler")
	})
	if err != nil {
		return err
	}
	defer done()
	if err := writeRuntimeClasses(os.Stdout, table.List(), restricted); err != nil {
		return err
	}
	if admission {
		return writeAdmission(os.Stdout, table.List())
	}
	return nil
}

// writeRuntimeClasses writes a RuntimeClass per ready row, each selecting restricted
// labels too where restricted is set, after comments naming the rows not ready and the
// labels to set on this node.
func writeRuntimeClasses(w io.Writer, rows []*handlers.Handler, restricted bool) error {
	host, _ := os.Hostname()
	var labels, adminLabels []string
	fmt.Fprintf(w, "# RuntimeClasses for the ready runtime handlers of node %s (rtshimd runtimeclasses).\n", host)
	for _, h := range rows {
		if !h.Ready {
			fmt.Fprintf(w, "# not ready, no RuntimeClass: %s (%s): %s\n", h.Name, h.Type(), h.Reason)
			continue
		}
		labels = append(labels, NodeLabelPrefix+h.Name+"=true")
		adminLabels = append(adminLabels, RestrictedLabelPrefix+h.Name+"=true")
	}
	if len(labels) > 0 {
		fmt.Fprintf(w, "# Advertise them on this node:\n#   kubectl label node %s %s\n", host, strings.Join(labels, " "))
	}
	if restricted && len(adminLabels) > 0 {
		fmt.Fprintf(w, "# and, with an administrator's credentials (NodeRestriction keeps a node from setting these):\n#   kubectl label node %s %s\n",
			host, strings.Join(adminLabels, " "))
	}
	for _, h := range rows {
		if !h.Ready {
			continue
		}
		rc, err := runtimeClass(h, restricted)
		if err != nil {
			return err
		}
		b, err := yaml.Marshal(rc)
		if err != nil {
			return fmt.Errorf("handler %q: %w", h.Name, err)
		}
		fmt.Fprintf(w, "---\n# %s: %s %s\n%s", h.Name, h.Type(), h.Version, b)
	}
	return nil
}

// runtimeClass is the RuntimeClass of a ready handler: named and handled as the row, its
// overhead as podFixed, scheduled onto nodes labelled for it, with restricted also by an
// administrator (RestrictedLabelPrefix).
func runtimeClass(h *handlers.Handler, restricted bool) (*nodev1.RuntimeClass, error) {
	rc := &nodev1.RuntimeClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "node.k8s.io/v1", Kind: "RuntimeClass"},
		ObjectMeta: metav1.ObjectMeta{Name: h.Name},
		Handler:    h.Name,
		Scheduling: &nodev1.Scheduling{NodeSelector: map[string]string{NodeLabelPrefix + h.Name: "true"}},
	}
	if restricted {
		key := RestrictedLabelPrefix + h.Name
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return nil, fmt.Errorf("handler %q: --restricted-label: label %s: %s", h.Name, key, strings.Join(errs, "; "))
		}
		rc.Scheduling.NodeSelector[key] = "true"
	}
	fixed := corev1.ResourceList{}
	for _, q := range []struct {
		name  corev1.ResourceName
		value string
	}{{corev1.ResourceMemory, h.Config.Overhead.Memory}, {corev1.ResourceCPU, h.Config.Overhead.CPU}} {
		if q.value == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.value)
		if err != nil {
			return nil, fmt.Errorf("handler %q: overhead.%s %q: %w", h.Name, q.name, q.value, err)
		}
		fixed[q.name] = v
	}
	if len(fixed) > 0 {
		rc.Overhead = &nodev1.Overhead{PodFixed: fixed}
	}
	return rc, nil
}
