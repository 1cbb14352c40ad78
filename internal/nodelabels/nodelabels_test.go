package nodelabels

import (
	"testing"

	"github.com/rtshimd/rtshimd/internal/handlers"
)

// A ready handler gets its label and one per feature it gives; one that is not ready
// gets none.
func TestWant(t *testing.T) {
	rows := []*handlers.Handler{
		{Name: "runc", Discovery: handlers.Discovery{Ready: true, Features: handlers.Features{HostNetwork: true, HostPID: true, UserNamespaces: true}}},
		{Name: "runsc", Discovery: handlers.Discovery{Ready: true, Features: handlers.Features{HostNetwork: true}}},
		{Name: "kata", Discovery: handlers.Discovery{Ready: false, Features: handlers.Features{HostNetwork: true}}},
	}
	got := Want(rows)
	want := map[string]string{
		"runtime.rtshimd.io/runc": "true", "runtime.rtshimd.io/runsc": "true",
		"features.runtime.rtshimd.io/runc.host-network": "true", "features.runtime.rtshimd.io/runc.host-pid": "true",
		"features.runtime.rtshimd.io/runc.user-namespaces": "true", "features.runtime.rtshimd.io/runsc.host-network": "true",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}
