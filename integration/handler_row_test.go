//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// readBundleSpec reads the config.json rtshimd wrote in a bundle.
func readBundleSpec(t *testing.T, dir string) *specs.Spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s/config.json: %v", dir, err)
	}
	return &s
}

// The runc row's pod_annotations reach the bundles the runtime is given: the pod
// annotations they match on the sandbox container's spec and on each container's, the
// others on none, rtshimd's own names kept. The pod's record keeps the row's settings: a
// container created after the row changed and the daemon restarted gets the same.
func TestHandlerRowSettings(t *testing.T) {
	const settings = "pod_annotations = [\"io.katacontainers.*\", \"rtshimd.test/pass-*\", \"io.kubernetes.cri.sandbox-*\"]\n"
	table := func(run string) string {
		return strings.Replace(handlerTable(run), "[handlers.runc]\n", "[handlers.runc]\n"+settings, 1)
	}
	e := newContainerEnvTable(t, table, "")
	ctx := ctxT(t)
	// A shared PID namespace: runc's pod gets a sandbox container, and so a bundle.
	pod := podConfig("row-settings", runtimeapi.NamespaceMode_POD)
	pod.LogDirectory = filepath.Join(e.logs, "row-settings")
	pod.Annotations["io.katacontainers.config.hypervisor.default_vcpus"] = "2"
	pod.Annotations["rtshimd.test/pass-me"] = "passed"
	pod.Annotations["io.kubernetes.cri.sandbox-name"] = "another-pod"
	podID, err := e.d.RS.RunPodSandbox(ctx, pod, "runc")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.d.RS.PodSandboxStatus(ctx, podID, true)
	if err != nil {
		t.Fatal(err)
	}
	info := decodeInfo(t, resp.Info).Metadata
	if !info.Infra || info.BundleDir == "" {
		t.Fatalf("runc pod with a shared PID namespace has no sandbox container bundle: %+v", info)
	}
	check := func(what string, s *specs.Spec) {
		t.Helper()
		a := s.Annotations
		for k, want := range map[string]string{
			"io.katacontainers.config.hypervisor.default_vcpus": "2",
			"rtshimd.test/pass-me":                              "passed",
			"io.kubernetes.cri.sandbox-name":                    "row-settings",
		} {
			if a[k] != want {
				t.Errorf("%s: annotation %s = %q, want %q", what, k, a[k], want)
			}
		}
		if v, ok := a["rtshimd.test/annotation"]; ok {
			t.Errorf("%s: unmatched pod annotation rtshimd.test/annotation = %q reached the spec", what, v)
		}
	}
	check("sandbox container", readBundleSpec(t, info.BundleDir))
	if log := e.d.Log(); !strings.Contains(log, "rtshimd's own names") || !strings.Contains(log, "io.kubernetes.cri.sandbox-name") {
		t.Error("no warning names the pod annotation that was matched but is rtshimd's own")
	}

	ctr := func(name string) string {
		t.Helper()
		id := e.run(podID, pod, e.ctrConfig(name, "sleep", "1000"))
		check(name, readBundleSpec(t, filepath.Join(e.d.RunRoot, "containers", id)))
		return id
	}
	ctr("before")

	// The row loses its settings; the pod keeps those it started with.
	cfg, err := os.ReadFile(e.d.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.d.Config, []byte(strings.Replace(string(cfg), settings, "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.d.Restart(false)
	ctr("after-restart")

	if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
}
