package container

import (
	"testing"

	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
)

// Container records of the release before the kinds carry "shared" instead of a kind.
func TestDecodeRecordOfEarlierRelease(t *testing.T) {
	m := &Manager{opts: Options{Runtimes: handlers.NewRuntimes(handlers.Env{})}}
	cfg := `{"metadata":{"name":"c"},"image":{"image":"busybox"}}`
	for _, tt := range []struct{ id, meta, want string }{
		{"a", `{"id":"a","shared":true,"runtime":{"handler":"runsc","path":"/usr/bin/runsc"},"config":` + cfg + `}`, kind.OCISandbox},
		{"b", `{"id":"b","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":` + cfg + `}`, kind.OCI},
		{"c", `{"id":"c","kind":"shim-v2","pod_dir":"/run/x/p/p","runtime":{"handler":"kata","path":"/usr/bin/containerd-shim-kata-v2"},"config":` + cfg + `}`, kind.ShimV2},
	} {
		c, err := m.decodeRecord(tt.id, []byte(tt.meta), []byte(`{"state":"running"}`))
		if err != nil {
			t.Fatalf("%s: %v", tt.meta, err)
		}
		if c.Kind != tt.want || c.rt.Type() != tt.want {
			t.Errorf("%s: kind %q runtime %q, want %q", c.ID, c.Kind, c.rt.Type(), tt.want)
		}
	}
}
