package sandbox

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/store"
)

// The row's pod_annotations reach the sandbox container's spec from the pod's record, and
// the record keeps them and privileged_without_host_devices across a restart (its
// decoding), so that containers made later get the same; rtshimd's own annotations win
// over the pod's.
func TestRowSettingsFromRecord(t *testing.T) {
	cfg := validPod()
	cfg.Annotations = map[string]string{
		"io.katacontainers.config.hypervisor.default_vcpus": "2",
		"example.com/other":     "no",
		oci.AnnotationSandboxID: "another",
	}
	m := &Manager{opts: Options{Runtimes: handlers.NewRuntimes(handlers.Env{})}}
	sb := &Sandbox{Metadata: Metadata{ID: "sb1", Dir: "/run/x/sb1", Runtime: &kind.Row{Handler: "kata", Path: "/usr/bin/containerd-shim-kata-v2"}, Kind: "shim-v2",
		PodAnnotations: []string{"io.katacontainers.*", "io.kubernetes.cri.*"}, PrivilegedWithoutHostDevices: true}, config: cfg}
	got := m.sandboxContainerSpec(sb, "web-0", false, false, false).Annotations
	if got["io.katacontainers.config.hypervisor.default_vcpus"] != "2" || got[oci.AnnotationSandboxID] != "sb1" {
		t.Errorf("sandbox container's annotations = %v, want the kata key passed and its own sandbox id", got)
	}
	if v, ok := got["example.com/other"]; ok {
		t.Errorf("unmatched pod annotation passed: %q", v)
	}

	raw, err := store.MarshalConfig(cfg, "sandbox config")
	if err != nil {
		t.Fatal(err)
	}
	sb.Config = raw
	meta, err := json.Marshal(sb.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	back, err := m.decodeRecord("sb1", meta, []byte(`{"state":"ready"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.PodAnnotations, sb.PodAnnotations) || !back.PrivilegedWithoutHostDevices {
		t.Errorf("record's pod_annotations = %q, privileged_without_host_devices = %v after decoding, want %q and true",
			back.PodAnnotations, back.PrivilegedWithoutHostDevices, sb.PodAnnotations)
	}
}
