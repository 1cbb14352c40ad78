//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtshimd/rtshimd/internal/config"
)

// An ExecSync whose timeout ends before the runtime has even started the process (a slow
// `runc exec`, as on a loaded node or the cgroup-v2 node, where critest's "execSync with
// timeout" found it) still leaves no process behind: rtshimd waits for the runtime to name
// the process and kills it, rather than killing the runtime and orphaning what it started.
func TestExecSyncTimeoutSlowStart(t *testing.T) {
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "runc")
	// Two seconds before every exec: the 1 s timeout ends before runc writes the pid file.
	script := "#!/bin/sh\ncase \" $* \" in *\" exec \"*) sleep 2 ;; esac\nexec /usr/sbin/runc \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Handlers["runc"].RuntimePath = wrapper
	}))
	ctx := ctxT(t)
	podID, pod := e.pod("exec-timeout", "runc")
	id := e.run(podID, pod, e.ctrConfig("main", "sleep", "1000"))
	const marker = "4321"
	start := time.Now()
	_, _, err := e.d.RS.ExecSync(ctx, id, []string{"sleep", marker}, time.Second)
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("ExecSync with a 1 s timeout: %v, want a timeout", err)
	}
	t.Logf("ExecSync returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
	waitFor(t, 10*time.Second, "no `sleep "+marker+"` left", func() (bool, string) {
		left := processesWithArgs("sleep", marker)
		return len(left) == 0, fmt.Sprint("pids: ", left)
	})
}

// processesWithArgs lists the pids whose command line is exactly args.
func processesWithArgs(args ...string) []string {
	want := strings.Join(args, "\x00") + "\x00"
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && string(b) == want {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
