package idmap

import (
	"errors"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

func TestFind(t *testing.T) {
	m := map[string]int{"abc123": 1, "abd456": 2}
	if v, err := Find(m, "abc123", "container_id", "container"); err != nil || v != 1 {
		t.Errorf("full id: %v %v", v, err)
	}
	if v, err := Find(m, "abd", "container_id", "container"); err != nil || v != 2 {
		t.Errorf("unique prefix: %v %v", v, err)
	}
	if _, err := Find(m, "ab", "container_id", "container"); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `container_id "ab" is ambiguous`) {
		t.Errorf("ambiguous: %v", err)
	}
	if _, err := Find(m, "zz", "container_id", "container"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `container "zz"`) {
		t.Errorf("missing: %v", err)
	}
	if _, err := Find(m, "", "pod_sandbox_id", "pod sandbox"); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "pod_sandbox_id is empty") {
		t.Errorf("empty: %v", err)
	}
}
