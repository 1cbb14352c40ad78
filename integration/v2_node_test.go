//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestV2NodeKernelBoots boots the cgroup-v2 node's User-Mode Linux kernel (issue 39; built
// by `hack/tools.sh uml-kernel` from Debian's linux-source and hack/v2-node/uml.config)
// through hack/v2-node/smoke.sh, and asserts what the node will stand on: a cgroup2
// hierarchy offering cpuset, cpu, io, memory and pids, PSI, and Debian's runc applying a
// memory limit and a CPU set that the container reads back from memory.max and
// cpuset.cpus. What the pinned runsc does there is
// logged, not asserted (it has not run under UML so far: docs/v2-node.md). Afterwards no
// process of the kernel is left.
//
// The kernel is not in hack/tools.sh's default set yet (11 minutes to build here), so
// the test runs only with RTSHIMD_V2_NODE=1 (make v2-node-smoke).
func TestV2NodeKernelBoots(t *testing.T) {
	if os.Getenv("RTSHIMD_V2_NODE") != "1" {
		t.Skip("the cgroup-v2 node's kernel is opt-in: make v2-node-smoke (RTSHIMD_V2_NODE=1)")
	}
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Dir(filepath.Dir(file))
	kernel := toolPath(t, "linux-uml")
	kernelReal, err := filepath.EvalSymlinks(kernel)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "console.log")
	cmd := exec.Command(filepath.Join(repo, "hack/v2-node/smoke.sh"))
	cmd.Env = append(os.Environ(), "UML_KERNEL="+kernel, "SMOKE_LOG="+log, "SMOKE_TIMEOUT=300")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("smoke.sh (%s, %v):\n%s", time.Since(start).Round(time.Second), err, out)
	if err != nil {
		if b, rerr := os.ReadFile(log); rerr == nil {
			t.Logf("console:\n%s", b)
		}
	}

	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "SMOKE "), "=")
		if ok && strings.HasPrefix(line, "SMOKE ") {
			got[k] = v
		}
	}
	if !strings.Contains(string(out), "\nSMOKE done") {
		t.Errorf("the node's init did not run to its end")
	}
	controllers := strings.Fields(got["controllers"])
	// cpuset: by hack/v2-node/patches/cpuset-up.patch (UML 6.12 has no SMP, which
	// CONFIG_CPUSETS depends on).
	for _, c := range []string{"cpuset", "cpu", "io", "memory", "pids"} {
		if !slices.Contains(controllers, c) {
			t.Errorf("cgroup.controllers %q lacks %s", got["controllers"], c)
		}
	}
	if !strings.HasPrefix(got["psi"], "yes") {
		t.Errorf("no PSI: /proc/pressure/cpu missing (psi=%q)", got["psi"])
	}
	if got["runc_memory_max"] != "67108864" {
		t.Errorf("runc's container read memory.max %q, want 67108864 (64 MiB)", got["runc_memory_max"])
	}
	if got["runc_cpuset_cpus"] != "0" {
		t.Errorf("runc's container read cpuset.cpus %q, want 0", got["runc_cpuset_cpus"])
	}
	for _, p := range []string{"systrap", "ptrace"} {
		rc, msg := got["runsc_"+p+"_rc"], got["runsc_"+p+"_error"]
		if rc == "0" {
			t.Logf("runsc do true on %s: ran (%s)", p, got["runsc_version"])
		} else {
			t.Logf("runsc do true on %s: exit %s: %s", p, rc, msg)
		}
	}

	// Nothing of the kernel is left running.
	if left := processesOf(kernelReal); len(left) > 0 {
		t.Errorf("UML processes left after the smoke: %v", left)
	}
}

// processesOf lists the PIDs whose executable is exe.
func processesOf(exe string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if p, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && p == exe {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
