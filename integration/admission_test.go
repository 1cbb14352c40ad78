//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// `rtshimd runtimeclasses --admission` writes, besides the RuntimeClasses, a
// ValidatingAdmissionPolicy and its binding that a real API server enforces: a pod that
// asks a RuntimeClass for what its handler cannot give (gVisor and a host PID namespace;
// the runc shim here and user namespaces; gVisor and recursive read-only mounts) is refused
// when it is created, with a message naming the field, the class and the handler, instead
// of sitting in ContainerCreating after scheduling; what the handler gives passes.
func TestAdmissionPolicy(t *testing.T) {
	d := newDaemon(t)
	out, err := exec.Command(filepath.Join(binDir, "rtshimd"), "runtimeclasses", "--admission", "--config", d.Config).CombinedOutput()
	if err != nil {
		t.Fatalf("rtshimd runtimeclasses --admission: %v\n%s", err, out)
	}
	api := startAPIServer(t)
	paths := map[string]string{
		"RuntimeClass":                     "/apis/node.k8s.io/v1/runtimeclasses",
		"ValidatingAdmissionPolicy":        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
		"ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
	}
	kinds := map[string]int{}
	for _, doc := range strings.Split(string(out), "\n---\n")[1:] {
		var obj struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		path, ok := paths[obj.Kind]
		if !ok {
			t.Fatalf("unexpected kind %q:\n%s", obj.Kind, doc)
		}
		kinds[obj.Kind]++
		api.Create(path, doc)
	}
	if kinds["ValidatingAdmissionPolicy"] != 1 || kinds["ValidatingAdmissionPolicyBinding"] != 1 {
		t.Fatalf("wrote %v, want one policy and one binding:\n%s", kinds, out)
	}

	n := 0
	create := func(class, spec, mount string) error {
		n++
		classLine := ""
		if class != "" {
			classLine = "  runtimeClassName: " + class + "\n"
		}
		pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: p%d, namespace: default}
spec:
%s  automountServiceAccountToken: false
%s  containers:
  - name: main
    image: busybox
    volumeMounts: [{name: v, mountPath: /v, readOnly: true%s}]
  volumes: [{name: v, emptyDir: {}}]
`, n, classLine, spec, mount)
		_, err := api.Do(http.MethodPost, "/api/v1/namespaces/default/pods", pod)
		return err
	}
	// The API server compiles a new policy in the background: wait until it refuses.
	waitFor(t, 60*time.Second, "the policy to be enforced", func() (bool, string) {
		err := create("runsc", "  hostPID: true\n", "")
		return err != nil, "a runsc pod with hostPID was admitted"
	})
	rro := ", recursiveReadOnly: Enabled"
	for _, tc := range []struct {
		name, class, spec, mount string
		refused                  []string // what the refusal names; nil: admitted
	}{
		{"runsc hostPID", "runsc", "  hostPID: true\n", "", []string{"runtimeClassName runsc", "handler runsc", "spec.hostPID", "host_pid"}},
		{"runsc hostIPC", "runsc", "  hostIPC: true\n", "", []string{"spec.hostIPC"}},
		{"runsc hostNetwork", "runsc", "  hostNetwork: true\n", "", nil}, // runsc gives it
		{"runsc recursive read-only", "runsc", "", rro, []string{"recursiveReadOnly", "recursive_read_only_mounts"}},
		{"runsc recursive read-only if possible", "runsc", "", ", recursiveReadOnly: IfPossible", nil},
		{"runc hostPID", "runc", "  hostPID: true\n", "", nil},
		{"runc recursive read-only", "runc", "", rro, nil},
		{"runc-shim user namespace", "runc-shim", "  hostUsers: false\n", "", []string{"runtimeClassName runc-shim", "spec.hostUsers: false", "user_namespaces"}},
		{"runc user namespace", "runc", "  hostUsers: false\n", "", nil},
		{"no RuntimeClass, hostPID", "", "  hostPID: true\n", "", nil},
	} {
		err := create(tc.class, tc.spec, tc.mount)
		switch {
		case tc.refused == nil && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != nil && err == nil:
			t.Errorf("%s: admitted", tc.name)
		case tc.refused != nil:
			for _, w := range append(tc.refused, "403", AdmissionPolicyNameForTest) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: the refusal does not name %q: %v", tc.name, w, err)
				}
			}
		}
	}
}

// AdmissionPolicyNameForTest is the policy's name as the daemon's command writes it.
const AdmissionPolicyNameForTest = "rtshimd-runtimeclass-features"
