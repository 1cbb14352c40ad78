package nodelabels

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

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

// While the kubeconfig is not written (a node being joined), Run tries every period and
// warns once, not once a try; the repeats are debug lines.
func TestRunWarnsOnceWhileWaiting(t *testing.T) {
	logger := logrus.StandardLogger()
	hook := logtest.NewLocal(logger)
	defer hook.Reset()
	level := logger.GetLevel()
	logger.SetLevel(logrus.DebugLevel)
	defer logger.SetLevel(level)
	s, err := New(filepath.Join(t.TempDir(), "kubelet.conf"), "node-a", func() []*handlers.Handler { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	s.Run(ctx, 10*time.Millisecond, time.Hour)
	warns, debugs := 0, 0
	for _, e := range hook.AllEntries() {
		switch {
		case e.Level == logrus.WarnLevel && strings.HasPrefix(e.Message, "node labels not written"):
			warns++
		case e.Level == logrus.DebugLevel && strings.HasPrefix(e.Message, "node labels not written"):
			debugs++
		}
	}
	if warns != 1 || debugs == 0 {
		t.Errorf("%d warnings and %d debug lines while the kubeconfig is missing; want 1 warning, then debug lines", warns, debugs)
	}
	if st := s.Status(); !strings.Contains(st.Error, "waiting for it") {
		t.Errorf("Status().Error = %q; want the wait named", st.Error)
	}
}
