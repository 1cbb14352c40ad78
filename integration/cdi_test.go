//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// cdiSpec defines rtshimd.test/device=one: the host's /dev/null as /dev/rtshimd-cdi, an
// environment variable, and hostFile bound read-only at /etc/rtshimd-cdi.
func cdiSpec(hostFile string) string {
	return fmt.Sprintf(`cdiVersion: "0.6.0"
kind: rtshimd.test/device
devices:
- name: one
  containerEdits:
    env: ["RTSHIMD_CDI=one"]
    deviceNodes:
    - path: /dev/rtshimd-cdi
      hostPath: /dev/null
    mounts:
    - hostPath: %s
      containerPath: /etc/rtshimd-cdi
      options: ["ro", "bind"]
`, hostFile)
}

// CDI devices, asked for in config.CDI_devices or in a cdi.k8s.io/ annotation, reach the
// container: its device node, environment and mount. An unknown device is refused with
// InvalidArgument and leaves nothing behind; a spec file written after the daemon started
// is seen at the next CreateContainer.
func TestCDIDevices(t *testing.T) {
	specDir := t.TempDir()
	hostFile := filepath.Join(t.TempDir(), "cdi-file")
	if err := os.WriteFile(hostFile, []byte("from-the-cdi-mount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(specDir, "rtshimd.yaml"), []byte(cdiSpec(hostFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) { c.CDI.SpecDirs = []string{specDir} }))
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			podID, pod := e.pod("cdi-"+handler, handler)

			byField := e.ctrConfig("by-field", "sleep", "1000")
			byField.CDIDevices = []*runtimeapi.CDIDevice{{Name: "rtshimd.test/device=one"}}
			byAnnotation := e.ctrConfig("by-annotation", "sleep", "1000")
			byAnnotation.Annotations = map[string]string{"cdi.k8s.io/rtshimd-test": "rtshimd.test/device=one"}
			for _, cfg := range []*runtimeapi.ContainerConfig{byField, byAnnotation} {
				id := e.run(podID, pod, cfg)
				name := cfg.Metadata.Name
				if out, _ := e.exec(id, "sh", "-c", "test -c /dev/rtshimd-cdi && echo ok >/dev/rtshimd-cdi && echo char-device"); out != "char-device" {
					t.Errorf("%s: /dev/rtshimd-cdi: %q, want a writable character device", name, out)
				}
				if out, _ := e.exec(id, "sh", "-c", "echo $RTSHIMD_CDI"); out != "one" {
					t.Errorf("%s: RTSHIMD_CDI = %q, want one", name, out)
				}
				if out, _ := e.exec(id, "cat", "/etc/rtshimd-cdi"); out != "from-the-cdi-mount" {
					t.Errorf("%s: /etc/rtshimd-cdi reads %q", name, out)
				}
			}

			// An unknown device is refused, naming the field and the device, and leaves
			// neither a record nor a directory nor its name behind.
			nope := e.ctrConfig("nope", "sleep", "1000")
			nope.CDIDevices = []*runtimeapi.CDIDevice{{Name: "rtshimd.test/device=one"}, {Name: "rtshimd.test/device=nope"}}
			_, err := e.d.RS.CreateContainer(ctx, podID, nope, pod)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `config.CDI_devices[1] "rtshimd.test/device=nope": unresolvable CDI devices`) {
				t.Errorf("unknown CDI device: %v, want InvalidArgument naming config.CDI_devices[1]", err)
			}
			if l, err := e.d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"ctr": "nope"}}); err != nil || len(l) != 0 {
				t.Errorf("refused container listed: %v, %v", l, err)
			}
			all, err := e.d.RS.ListContainers(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, dir := range []string{filepath.Join(e.d.RunRoot, "containers")} {
				if entries, _ := os.ReadDir(dir); len(entries) != len(all) {
					t.Errorf("%s holds %d entries for %d containers", dir, len(entries), len(all))
				}
			}
			if recs := stateEntries(filepath.Join(e.d.State, "containers")); len(recs) != len(all) {
				t.Errorf("%d container records for %d containers: %v", len(recs), len(all), recs)
			}
			nope.CDIDevices = nil
			if _, err := e.d.RS.CreateContainer(ctx, podID, nope, pod); err != nil {
				t.Errorf("the refused container's name is still taken: %v", err)
			}

			// A spec file written now, after the daemon started, is read at the next create.
			late := e.ctrConfig("late", "sleep", "1000")
			late.Annotations = map[string]string{"cdi.k8s.io/late": "rtshimd.test/late=" + handler}
			if _, err := e.d.RS.CreateContainer(ctx, podID, late, pod); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("device before its spec file: %v, want InvalidArgument", err)
			}
			lateSpec := fmt.Sprintf(`{"cdiVersion":"0.6.0","kind":"rtshimd.test/late","devices":[{"name":%q,"containerEdits":{"env":["RTSHIMD_LATE=%s"]}}]}`, handler, handler)
			if err := os.WriteFile(filepath.Join(specDir, "late-"+handler+".json"), []byte(lateSpec), 0o644); err != nil {
				t.Fatal(err)
			}
			id := e.run(podID, pod, late)
			if out, _ := e.exec(id, "sh", "-c", "echo $RTSHIMD_LATE"); out != handler {
				t.Errorf("RTSHIMD_LATE = %q, want %s", out, handler)
			}

			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the pod's container dirs to go", func() (bool, string) {
				entries, _ := os.ReadDir(filepath.Join(e.d.RunRoot, "containers"))
				return len(entries) == 0, fmt.Sprint(len(entries), " left")
			})
		})
	}
}
