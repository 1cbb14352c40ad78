package podcidr

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

func TestParse(t *testing.T) {
	for _, ok := range []string{"", "10.244.1.0/24", "10.244.1.0/24,fd00:10:244:1::/64", "fd00::/64, 10.0.0.0/16"} {
		if _, err := Parse(ok); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"10.244.1.0", "10.244.1.0/33", "not-a-cidr", "10.0.0.0/8,10.1.0.0/16", "10.0.0.0/8,", "10.0.0.0/8,fd00::/64,10.1.0.0/16"} {
		_, err := Parse(bad)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), Field) || !strings.Contains(err.Error(), bad) {
			t.Errorf("Parse(%q) = %v, want InvalidArgument naming %s and the value", bad, err, Field)
		}
	}
}

func TestSetKeepsAcrossOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pod-cidr.json")
	s, err := Open(path)
	if err != nil || s.Get() != "" {
		t.Fatalf("Open of nothing: %q %v", s.Get(), err)
	}
	if prev, err := s.Set("10.244.1.0/24"); err != nil || prev != "" {
		t.Fatalf("Set: %q %v", prev, err)
	}
	// An empty value (kubelet does not know yet) keeps what there is.
	if prev, err := s.Set(""); err != nil || prev != "10.244.1.0/24" || s.Get() != "10.244.1.0/24" {
		t.Errorf("Set(\"\"): %q %v, now %q", prev, err, s.Get())
	}
	// A bad value changes nothing.
	if _, err := s.Set("10.244.1.0/99"); err == nil || s.Get() != "10.244.1.0/24" {
		t.Errorf("Set(bad): %v, now %q", err, s.Get())
	}
	again, err := Open(path)
	if err != nil || again.Get() != "10.244.1.0/24" {
		t.Errorf("reopened: %q %v", again.Get(), err)
	}
	if err := os.WriteFile(path, []byte(`{"pod_cidr":"nonsense"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path); err == nil || s == nil || s.Get() != "" {
		t.Error("a kept value that is not a CIDR was read")
	}
}
