//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtshimd/rtshimd/internal/config"
)

// Drop-ins in config.d beside the config file change the served handler table with no
// edit of the main file and no restart, as an installer adds its runtime: the directory
// made after start is watched once it appears; a drop-in adds a row that runs pods; a
// broken one is refused naming its own file and line, the table in force staying; removing
// the drop-ins takes their rows away. `rtshimd config check` names the files read and
// `rtshimd config dump` shows the merged table.
func TestReloadDropIns(t *testing.T) {
	e := newContainerEnv(t, withConfig(func(d *Daemon, c *config.Config) {
		c.Handlers = map[string]*config.Handler{"runc": {RuntimePath: "/usr/sbin/runc", RuntimeRoot: d.RunRoot + "/runc"}}
	}))
	d := e.d
	dir := config.DropInDir(d.Config)
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists before the test made it", dir)
	}
	write := func(name, text string) {
		t.Helper()
		tmp := filepath.Join(dir, "."+name+".new")
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}

	// 1. The directory appears, then a drop-in with a runsc row: ready with no signal.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the watch on the new directory is added
	write("50-runsc.toml", runscRow(d.RunRoot, "/usr/local/bin/runsc"))
	waitFor(t, 60*time.Second, "the drop-in's runsc row to be ready", func() (bool, string) {
		got := statusHandlers(t, d.RS)
		return slices.Equal(got, []string{"", "runc", "runsc"}), strings.Join(got, ",")
	})
	if rs := reloadStatus(t, d.RS); rs.Last == nil || rs.Last.Trigger != "file" || rs.Last.Result != "applied" {
		t.Errorf("last reload %+v, want applied on a file change", rs.Last)
	}
	pod, cfg := e.pod("dropin-runsc", "runsc")
	ctr := e.run(pod, cfg, e.ctrConfig("c", "sleep", "1000"))
	var boxes []string
	for _, p := range processesMentioning(pod, 0) {
		if strings.Contains(p, "runsc-sandbox") {
			boxes = append(boxes, p)
		}
	}
	if len(boxes) != 1 {
		t.Errorf("the drop-in's row runs %d gVisor sandboxes for the pod, want 1: %v", len(boxes), boxes)
	}
	if out, _ := e.exec(ctr, "echo", "in gvisor"); out != "in gvisor" {
		t.Errorf("exec in the drop-in's runsc pod: %q", out)
	}

	// 2. check and dump see both files.
	bin := filepath.Join(binDir, "rtshimd")
	out, err := exec.Command(bin, "config", "check", "--config", d.Config).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "with "+filepath.Join(dir, "50-runsc.toml")+": ok") {
		t.Errorf("config check: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "config", "dump", "--config", d.Config).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "[handlers.runsc]") || !strings.Contains(string(out), "+ "+filepath.Join(dir, "50-runsc.toml")) {
		t.Errorf("config dump: %v\n%s", err, out)
	}

	// 3. A broken drop-in is refused with its own name and line; the table stays.
	write("60-bad.toml", "\n[handlers.runsc]\nruntime_argz = [\"--debug\"]\n")
	wantErr := filepath.Join(dir, "60-bad.toml") + ":3: unknown key"
	waitFor(t, 30*time.Second, "the broken drop-in to be refused", func() (bool, string) {
		rs := reloadStatus(t, d.RS)
		return rs.Last != nil && rs.Last.Result == "refused" && strings.Contains(rs.Last.Error, wantErr), rs.Last.Error
	})
	if got := statusHandlers(t, d.RS); !slices.Equal(got, []string{"", "runc", "runsc"}) {
		t.Errorf("handlers after a refused drop-in: %q", got)
	}

	// 4. Both removed: runsc goes; its running pod keeps working to its end.
	for _, n := range []string{"60-bad.toml", "50-runsc.toml"} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "the removed drop-in's row to go", func() (bool, string) {
		got := statusHandlers(t, d.RS)
		return slices.Equal(got, []string{"", "runc"}), strings.Join(got, ",")
	})
	if out, _ := e.exec(ctr, "echo", "still here"); out != "still here" {
		t.Errorf("exec in the runsc pod after its row went: %q", out)
	}
	if err := d.RS.StopPodSandbox(ctxT(t), pod); err != nil {
		t.Fatal(err)
	}
	if err := d.RS.RemovePodSandbox(ctxT(t), pod); err != nil {
		t.Fatal(err)
	}
}
