//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// toolPath finds a real client the suite drives (crictl, critest, kubelet, kube-apiserver,
// etcd): hack/tools.sh builds them at pinned versions into $RTSHIMD_TOOLS/bin
// (/var/cache/rtshimd-tools/bin), and `make test` runs it first. A missing tool fails the
// test: these suites are never skipped.
func toolPath(t testing.TB, name string) string {
	t.Helper()
	dir := toolsDir()
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

// toolsDir is hack/tools.sh's cache: $RTSHIMD_TOOLS, or /var/cache/rtshimd-tools.
func toolsDir() string {
	if dir := os.Getenv("RTSHIMD_TOOLS"); dir != "" {
		return dir
	}
	return "/var/cache/rtshimd-tools"
}

// toolFile is a file hack/tools.sh makes that is not a program (the systemd node's root).
func toolFile(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(toolsDir(), "bin", name)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("%s not in %s/bin: run hack/tools.sh (make test does)", name, toolsDir())
	}
	return p
}

// ensureTools runs hack/tools.sh for names: it builds what is missing, or waits for the
// build `make test` runs in the background (its locks), so a test that needs a tool only it
// uses (the cgroup-v2 node's kernel and root) does not hold up the rest of the run.
func ensureTools(t testing.TB, names ...string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Dir(filepath.Dir(file))
	cmd := exec.Command(filepath.Join(repo, "hack/tools.sh"), names...)
	cmd.Dir = repo
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/tools.sh %v: %v\n%s", names, err, lastLines(string(out), 40))
	}
	t.Logf("hack/tools.sh %v: ready after %s", names, time.Since(start).Round(time.Second))
}
