package sandbox

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/kind/kindtest"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/sandbox/sandboxtest"
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

// The pod's record keeps whether its row had the feature recursive_read_only_mounts when
// the pod was made (what its recorded runtime can do), across a restart; a record of an
// earlier release, which has no such field, keeps allowing such mounts as it did.
func TestRecursiveReadOnlyFromRecord(t *testing.T) {
	for _, feature := range []bool{false, true} {
		e := newEnv(t, sandboxtest.Plans["namespaces"])
		h := sandboxtest.NewHandlers(e.rt, filepath.Join(e.dir, "runtime"))
		h.H.Features.RecursiveReadOnlyMounts = feature
		m, err := NewManager(Options{
			Handlers: h, Runtimes: kindtest.Maker{Runtime: e.rt}, Store: e.store,
			RunDir: filepath.Join(e.dir, "run"), PauseRootfs: filepath.Join(e.dir, "pause"),
			CgroupDriver: config.CgroupfsDriver, Node: e.node,
		})
		if err != nil {
			t.Fatal(err)
		}
		id, _, err := m.Run(context.Background(), sandboxtest.PodConfig("web"), "")
		if err != nil {
			t.Fatal(err)
		}
		sb, err := m.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := sb.RecursiveReadOnly(); got != feature {
			t.Errorf("row's recursive_read_only_mounts %v: pod allows recursive read-only mounts = %v", feature, got)
		}
		m.Close()
		// After a restart, from the record, whatever the table says now (e.manager's row
		// lacks the feature).
		if sb, err = e.manager().Get(id); err != nil {
			t.Fatal(err)
		}
		if got := sb.RecursiveReadOnly(); got != feature {
			t.Errorf("row's recursive_read_only_mounts %v, recovered record: pod allows recursive read-only mounts = %v", feature, got)
		}
	}

	m := &Manager{opts: Options{Runtimes: handlers.NewRuntimes(handlers.Env{})}}
	old, err := m.decodeRecord("p1", []byte(`{"id":"p1","kind":"oci","dir":"/run/x/p1","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":{"metadata":{"name":"p","namespace":"n","uid":"u"}}}`), []byte(`{"state":"ready"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !old.RecursiveReadOnly() {
		t.Error("a record of an earlier release refuses recursive read-only mounts, which it allowed")
	}
}
