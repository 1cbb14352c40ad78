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
	"sigs.k8s.io/yaml"

	"github.com/rtshimd/rtshimd/internal/handlers"
)

// NodeLabelPrefix names the node label that advertises a ready handler; each RuntimeClass
// selects the nodes that carry its handler's.
const NodeLabelPrefix = "runtime.rtshimd.io/"

// runtimeclassesCmd discovers every handler as the daemon would and prints a
// node.k8s.io/v1 RuntimeClass for each ready one; the others, with their reasons, and the
// command that labels this node go in comments. With --admission it adds the
// ValidatingAdmissionPolicy that refuses, at admission, pods asking a RuntimeClass for
// what its handler cannot give (admission.go).
func runtimeclassesCmd(args []string) error {
	var admission bool
	_, table, done, err := discoverForCommand(args, func(fs *flag.FlagSet) {
		fs.BoolVar(&admission, "admission", false, "also write a ValidatingAdmissionPolicy refusing pods that ask a RuntimeClass for what its handler cannot give")
	})
	if err != nil {
		return err
	}
	defer done()
	if err := writeRuntimeClasses(os.Stdout, table.List()); err != nil {
		return err
	}
	if admission {
		return writeAdmission(os.Stdout, table.List())
	}
	return nil
}

func writeRuntimeClasses(w io.Writer, rows []*handlers.Handler) error {
	host, _ := os.Hostname()
	var labels []string
	fmt.Fprintf(w, "# RuntimeClasses for the ready runtime handlers of node %s (rtshimd runtimeclasses).\n", host)
	for _, h := range rows {
		if !h.Ready {
			fmt.Fprintf(w, "# not ready, no RuntimeClass: %s (%s): %s\n", h.Name, h.Type(), h.Reason)
			continue
		}
		labels = append(labels, NodeLabelPrefix+h.Name+"=true")
	}
	if len(labels) > 0 {
		fmt.Fprintf(w, "# Advertise them on this node:\n#   kubectl label node %s %s\n", host, strings.Join(labels, " "))
	}
	for _, h := range rows {
		if !h.Ready {
			continue
		}
		rc, err := runtimeClass(h)
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
// overhead as podFixed, scheduled onto nodes labelled for it.
func runtimeClass(h *handlers.Handler) (*nodev1.RuntimeClass, error) {
	rc := &nodev1.RuntimeClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "node.k8s.io/v1", Kind: "RuntimeClass"},
		ObjectMeta: metav1.ObjectMeta{Name: h.Name},
		Handler:    h.Name,
		Scheduling: &nodev1.Scheduling{NodeSelector: map[string]string{NodeLabelPrefix + h.Name: "true"}},
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
