//go:build integration

package integration

import (
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// `rtshimd runtimeclasses` prints a RuntimeClass per ready handler that the k8s.io/api
// types read back field by field, and says in comments which handlers are not ready and
// how to label the node.
func TestRuntimeClassesCommand(t *testing.T) {
	d := newDaemon(t)
	out, err := exec.Command(filepath.Join(binDir, "rtshimd"), "runtimeclasses", "--config", d.Config).CombinedOutput()
	if err != nil {
		t.Fatalf("rtshimd runtimeclasses: %v\n%s", err, out)
	}
	docs := strings.Split(string(out), "\n---\n")
	header := docs[0]
	if !strings.Contains(header, "not ready, no RuntimeClass: ghost (oci): runtime_path /opt/rtshimd-test/no-such-runtime: not installed") {
		t.Errorf("the not-ready handler and its reason are not said:\n%s", header)
	}
	if !strings.Contains(header, "runtime.rtshimd.io/runc=true runtime.rtshimd.io/runc-shim=true runtime.rtshimd.io/runsc=true") {
		t.Errorf("no kubectl label line for the ready handlers:\n%s", header)
	}
	var names []string
	for _, doc := range docs[1:] {
		var rc nodev1.RuntimeClass
		if err := yaml.UnmarshalStrict([]byte(doc), &rc); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		names = append(names, rc.Name)
		if rc.APIVersion != "node.k8s.io/v1" || rc.Kind != "RuntimeClass" || rc.Handler != rc.Name {
			t.Errorf("%s: apiVersion %q kind %q handler %q", rc.Name, rc.APIVersion, rc.Kind, rc.Handler)
		}
		if rc.Scheduling == nil {
			t.Fatalf("%s: no scheduling", rc.Name)
		}
		if sel := rc.Scheduling.NodeSelector; len(sel) != 1 || sel["runtime.rtshimd.io/"+rc.Name] != "true" {
			t.Errorf("%s: nodeSelector %v", rc.Name, sel)
		}
		switch rc.Name {
		case "runsc": // the row's overhead
			if rc.Overhead == nil {
				t.Fatal("runsc: no overhead")
			}
			mem, cpu := rc.Overhead.PodFixed.Memory(), rc.Overhead.PodFixed.Cpu()
			if mem.Cmp(resource.MustParse("64Mi")) != 0 || cpu.Cmp(resource.MustParse("100m")) != 0 {
				t.Errorf("runsc overhead = %v", rc.Overhead.PodFixed)
			}
		default:
			if rc.Overhead != nil {
				t.Errorf("%s: overhead %v, the row has none", rc.Name, rc.Overhead)
			}
		}
	}
	sort.Strings(names)
	if got := strings.Join(names, ","); got != "runc,runc-shim,runsc,runsc-debian" && got != "runc,runc-shim,runsc,runsc-debian,runsc-shim" {
		t.Errorf("RuntimeClasses for %v, want the ready handlers runc,runc-shim,runsc,runsc-debian", names)
	}
}
