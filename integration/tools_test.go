//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// toolPath finds a real client the suite drives (crictl, critest, kubelet, kube-apiserver,
// etcd): hack/tools.sh builds them at pinned versions into $RTSHIMD_TOOLS/bin
// (/var/cache/rtshimd-tools/bin), and `make test` runs it first. A missing tool fails the
// test: these suites are never skipped.
func toolPath(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("RTSHIMD_TOOLS")
	if dir == "" {
		dir = "/var/cache/rtshimd-tools"
	}
	if p := filepath.Join(dir, "bin", name); isExecutable(p) {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("%s not found in %s/bin or on PATH: run hack/tools.sh (make test does)", name, dir)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
