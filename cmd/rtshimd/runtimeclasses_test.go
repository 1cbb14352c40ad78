package main

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	"sigs.k8s.io/yaml"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/handlers"
)

// runtimeClassesOf writes the RuntimeClasses of rows and reads them back as the API
// server would, with the comments before them.
func runtimeClassesOf(t *testing.T, rows []*handlers.Handler, restricted bool) (comments string, rcs []nodev1.RuntimeClass) {
	t.Helper()
	var buf bytes.Buffer
	if err := writeRuntimeClasses(&buf, rows, restricted); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(buf.String(), "---\n")
	for _, doc := range docs[1:] {
		var rc nodev1.RuntimeClass
		if err := yaml.UnmarshalStrict([]byte(doc), &rc); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		rcs = append(rcs, rc)
	}
	return docs[0], rcs
}

// By default a RuntimeClass selects the label the node sets on itself; with
// --restricted-label also node-restriction.kubernetes.io/rtshimd-<handler>=true, which
// NodeRestriction keeps nodes from setting, so a node that labels itself for a handler
// does not attract its pods unless an administrator labelled it too; the comments say so.
func TestRuntimeClassesRestrictedLabel(t *testing.T) {
	rows := []*handlers.Handler{
		{Name: "runc", Config: config.Handler{RuntimeType: "oci"}, Discovery: handlers.Discovery{Ready: true}},
		{Name: "kata", Config: config.Handler{RuntimeType: "shim-v2"}, Discovery: handlers.Discovery{Ready: true}},
		{Name: "gone", Config: config.Handler{RuntimeType: "oci"}, Discovery: handlers.Discovery{Reason: "no binary"}},
	}
	comments, rcs := runtimeClassesOf(t, rows, false)
	if len(rcs) != 2 {
		t.Fatalf("%d RuntimeClasses, want the 2 ready handlers'", len(rcs))
	}
	for _, rc := range rcs {
		want := map[string]string{"runtime.rtshimd.io/" + rc.Handler: "true"}
		if rc.Scheduling == nil || !maps.Equal(rc.Scheduling.NodeSelector, want) {
			t.Errorf("%s: nodeSelector %v, want %v", rc.Name, rc.Scheduling, want)
		}
	}
	if strings.Contains(comments, "node-restriction.kubernetes.io/") {
		t.Errorf("restricted labels named without --restricted-label:\n%s", comments)
	}

	comments, rcs = runtimeClassesOf(t, rows, true)
	if len(rcs) != 2 {
		t.Fatalf("%d RuntimeClasses, want the 2 ready handlers'", len(rcs))
	}
	for _, rc := range rcs {
		want := map[string]string{"runtime.rtshimd.io/" + rc.Handler: "true", "node-restriction.kubernetes.io/rtshimd-" + rc.Handler: "true"}
		if rc.Scheduling == nil || !maps.Equal(rc.Scheduling.NodeSelector, want) {
			t.Errorf("%s: nodeSelector %v, want %v", rc.Name, rc.Scheduling, want)
		}
	}
	if !strings.Contains(comments, "node-restriction.kubernetes.io/rtshimd-runc=true node-restriction.kubernetes.io/rtshimd-kata=true") ||
		!strings.Contains(comments, "administrator") || strings.Contains(comments, "rtshimd-gone") {
		t.Errorf("comments do not give the administrator's label command for the ready handlers:\n%s", comments)
	}

	// A handler name that leaves no room for the label's name is refused, naming it.
	long := strings.Repeat("a", 60)
	_, err := runtimeClass(&handlers.Handler{Name: long, Discovery: handlers.Discovery{Ready: true}}, true)
	if err == nil || !strings.Contains(err.Error(), "node-restriction.kubernetes.io/rtshimd-"+long) {
		t.Errorf("handler of 60 characters with --restricted-label: %v, want the label refused", err)
	}
	if _, err := runtimeClass(&handlers.Handler{Name: long, Discovery: handlers.Discovery{Ready: true}}, false); err != nil {
		t.Errorf("handler of 60 characters without --restricted-label: %v", err)
	}
}
