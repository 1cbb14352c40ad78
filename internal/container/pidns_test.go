package container

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// A recorded pid is joined only while it is still the process of the pod or container
// that recorded it (its cgroup names it): a pid reused by another process is refused.
func TestPIDNamespaceOfReusedPid(t *testing.T) {
	root := t.TempDir()
	procRoot = root
	defer func() { procRoot = "/proc" }()
	proc := func(pid, cgroup string) {
		if err := os.MkdirAll(filepath.Join(root, pid, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "ns", "pid"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "cgroup"), []byte(cgroup), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc("100", "12:pids:/kubepods/podu1/sandbox1\n0::/\n")
	proc("200", "12:pids:/user.slice/session-3.scope\n0::/\n") // pid 200 reused by a login shell
	if p, err := pidNamespaceOf(100, "sandbox1"); err != nil || p != filepath.Join(root, "100", "ns", "pid") {
		t.Errorf("live infra: %q, %v", p, err)
	}
	for _, pid := range []int{200, 300, 0} {
		if p, err := pidNamespaceOf(pid, "sandbox1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("pid %d: %q, %v; want FailedPrecondition", pid, p, err)
		}
	}
}
