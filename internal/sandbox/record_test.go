package sandbox

import (
	"encoding/json"
	"testing"

	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
)

// Records written before records named their kind are still read, as the kind their
// sandbox mode meant, with the sandbox container's bundle where that release kept it.
func TestDecodeRecordOfEarlierRelease(t *testing.T) {
	m := &Manager{opts: Options{Runtimes: handlers.NewRuntimes(handlers.Env{})}}
	cfg := `{"metadata":{"name":"p","namespace":"n","uid":"u"}}`
	for _, tt := range []struct{ meta, wantKind, wantBundle string }{
		{`{"id":"a","sandbox":"shared","dir":"/run/x/a","infra":true,"runtime":{"handler":"runsc","path":"/usr/bin/runsc","root":"/run/x/runsc"},"config":` + cfg + `}`,
			kind.OCISandbox, "/run/x/a/infra"},
		{`{"id":"b","sandbox":"namespaces","dir":"/run/x/b","runtime":{"handler":"runc","path":"/usr/sbin/runc","root":"/run/x/runc"},"config":` + cfg + `}`,
			kind.OCI, "/run/x/b/infra"},
		{`{"id":"c","kind":"shim-v2","dir":"/run/x/c","bundle_dir":"/run/x/c/c","runtime":{"handler":"kata","path":"/usr/bin/containerd-shim-kata-v2","root":"/run/x/kata"},"config":` + cfg + `}`,
			kind.ShimV2, "/run/x/c/c"},
	} {
		var rec struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal([]byte(tt.meta), &rec)
		sb, err := m.decodeRecord(rec.ID, []byte(tt.meta), []byte(`{"state":"ready"}`))
		if err != nil {
			t.Fatalf("%s: %v", tt.meta, err)
		}
		if sb.Kind != tt.wantKind || sb.KindRuntime().Type() != tt.wantKind {
			t.Errorf("%s: kind %q runtime %q, want %q", sb.ID, sb.Kind, sb.KindRuntime().Type(), tt.wantKind)
		}
		if sb.ContainerDir() != tt.wantBundle {
			t.Errorf("%s: bundle %q, want %q", sb.ID, sb.ContainerDir(), tt.wantBundle)
		}
	}
	if _, err := m.decodeRecord("d", []byte(`{"id":"d","kind":"vm","runtime":{"handler":"h","path":"/x"},"config":`+cfg+`}`), nil); err == nil {
		t.Error("a record of an unknown kind was read")
	}
}
