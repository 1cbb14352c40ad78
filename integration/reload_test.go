//go:build integration

package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// runscRow is a row the reload tests add to the file.
func runscRow(run, path string) string {
	return fmt.Sprintf("\n[handlers.runsc]\nruntime_type = \"oci-sandbox\"\nruntime_path = %q\nruntime_root = \"%s/runsc\"\n", path, run)
}

// reloadState is Status verbose's "reload".
type reloadState struct {
	Path string         `json:"path"`
	Hash string         `json:"hash"`
	Last *reloadAttempt `json:"last"`
}

type reloadAttempt struct {
	Seq     int             `json:"seq"`
	Trigger string          `json:"trigger"`
	Result  string          `json:"result"`
	Error   string          `json:"error"`
	Change  json.RawMessage `json:"change"`
}

func reloadStatus(t *testing.T, rs internalapi.RuntimeService) reloadState {
	t.Helper()
	st, err := rs.Status(ctxT(t), true)
	if err != nil {
		t.Fatal(err)
	}
	var state reloadState
	if err := json.Unmarshal([]byte(st.Info["reload"]), &state); err != nil {
		t.Fatalf("Status info reload %q: %v", st.Info["reload"], err)
	}
	return state
}

// statusHandlers is what Status lists: the handler names, "" (the default) included.
func statusHandlers(t *testing.T, rs internalapi.RuntimeService) []string {
	t.Helper()
	st, err := rs.Status(ctxT(t), false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range st.RuntimeHandlers {
		names = append(names, h.Name)
	}
	sort.Strings(names)
	return names
}

// writeConfigFile replaces the daemon's config as a config manager does: a new file
// renamed over the old one.
func writeConfigFile(t *testing.T, d *Daemon, text string) {
	t.Helper()
	tmp := d.Config + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, d.Config); err != nil {
		t.Fatal(err)
	}
}

func readConfigFile(t *testing.T, d *Daemon) string {
	t.Helper()
	b, err := os.ReadFile(d.Config)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rtshimdReload runs `rtshimd reload` against the daemon's config.
func rtshimdReload(t *testing.T, d *Daemon) (string, error) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "rtshimd"), "reload", "--config", d.Config).CombinedOutput()
	return string(out), err
}

// The handler table changes while the daemon runs: a handler added to the file and a
// SIGHUP (through `rtshimd reload`) runs pods without a restart; a runtime installed
// after start becomes ready on a SIGHUP alone; an edit with no signal is picked up by
// itself; a broken file is refused naming its line while runc pods keep working; a
// handler removed while its pod runs leaves that pod working to its end, across a
// kill -9 of the daemon. Status lists exactly the ready handlers of the live table
// throughout, and the metrics count the reloads and show the served file's hash.
func TestReloadHandlerTable(t *testing.T) {
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	e := newContainerEnv(t, withConfig(func(d *Daemon, c *config.Config) {
		c.Handlers = map[string]*config.Handler{"runc": {RuntimePath: "/usr/sbin/runc", RuntimeRoot: d.RunRoot + "/runc"}}
		c.Metrics.Addr = metricsAddr
	}))
	d := e.d
	ctx := ctxT(t)
	base := readConfigFile(t, d)
	if got := statusHandlers(t, d.RS); !slices.Equal(got, []string{"", "runc"}) {
		t.Fatalf("Status handlers at start = %q, want exactly runc and the default", got)
	}
	if _, err := d.RS.RunPodSandbox(ctx, podConfig("early", runtimeapi.NamespaceMode_CONTAINER), "runsc"); err == nil || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("runsc pod before runsc was configured: %v", err)
	}

	// 1. runsc added to the file, then `rtshimd reload`: ready without a restart.
	pid := d.cmd.Process.Pid
	withRunsc := base + runscRow(d.RunRoot, "/usr/local/bin/runsc")
	writeConfigFile(t, d, withRunsc)
	if out, err := rtshimdReload(t, d); err != nil {
		t.Fatalf("rtshimd reload: %v\n%s", err, out)
	}
	waitFor(t, 60*time.Second, "runsc to become ready after the reload", func() (bool, string) {
		got := statusHandlers(t, d.RS)
		return slices.Equal(got, []string{"", "runc", "runsc"}), strings.Join(got, ",")
	})
	runscPod, runscCfg := e.pod("on-runsc", "runsc")
	runscCtr := e.run(runscPod, runscCfg, e.ctrConfig("sleeper", "sh", "-c", "echo from-runsc; exec sleep 1000"))
	if out, _ := e.exec(runscCtr, "echo", "in gvisor"); out != "in gvisor" {
		t.Errorf("exec in the runsc pod: %q", out)
	}
	if d.cmd.Process.Pid != pid {
		t.Fatal("the daemon restarted")
	}

	// 2. A runtime installed after start (a row that is not ready) becomes ready on a
	// SIGHUP with the file unchanged: a reload is how an operator says "installed now".
	late := filepath.Join(d.Dir, "bin", "runc-late")
	withLate := withRunsc + fmt.Sprintf("\n[handlers.late]\nruntime_path = %q\nruntime_root = \"%s/late\"\n", late, d.RunRoot)
	writeConfigFile(t, d, withLate)
	waitFor(t, 30*time.Second, "the new row to be probed", func() (bool, string) {
		rs := reloadStatus(t, d.RS)
		return rs.Last != nil && rs.Last.Trigger == "file" && rs.Last.Result == "applied" && strings.Contains(string(rs.Last.Change), `"late"`), fmt.Sprintf("%+v", rs.Last)
	})
	if got := statusHandlers(t, d.RS); slices.Contains(got, "late") {
		t.Fatalf("a row whose runtime is not installed is listed by Status: %q", got)
	}
	if err := os.MkdirAll(filepath.Dir(late), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/sbin/runc", late); err != nil {
		t.Fatal(err)
	}
	seq := reloadStatus(t, d.RS).Last.Seq
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the installed runtime to become ready on SIGHUP", func() (bool, string) {
		rs := reloadStatus(t, d.RS)
		got := statusHandlers(t, d.RS)
		return rs.Last.Seq > seq && rs.Last.Trigger == "signal" && slices.Contains(got, "late"), fmt.Sprintf("%+v %q", rs.Last, got)
	})

	// 3. An edit with no signal: the default handler becomes runsc.
	withDefault := strings.Replace(withLate, `default_handler = "runc"`, `default_handler = "runsc"`, 1)
	writeConfigFile(t, d, withDefault)
	waitFor(t, 30*time.Second, "the edited default handler", func() (bool, string) {
		st, err := d.RS.Status(ctx, true)
		if err != nil {
			return false, err.Error()
		}
		var cfg struct {
			DefaultHandler string
		}
		_ = json.Unmarshal([]byte(st.Info["config"]), &cfg)
		return cfg.DefaultHandler == "runsc", cfg.DefaultHandler
	})
	sum := sha256.Sum256([]byte(withDefault))
	if rs := reloadStatus(t, d.RS); rs.Hash != hex.EncodeToString(sum[:]) {
		t.Errorf("Status reload hash = %s, want the file's sha256", rs.Hash)
	}
	if v, ok := metricOf(scrapeMetrics(t, metricsAddr), "rtshimd_config_hash", nil); !ok || v != hashValue(sum[:]) {
		t.Errorf("rtshimd_config_hash = %v (%v), want %v", v, ok, hashValue(sum[:]))
	}

	// 4. A broken file: refused with its line, the old table keeps serving, runc pods work.
	broken := withDefault + "\n[handlers.late.features]\nhost_netwrk = true\n"
	brokenLine := strings.Count(strings.TrimSuffix(broken, "\n"), "\n") + 1
	writeConfigFile(t, d, broken)
	wantErr := fmt.Sprintf("%s:%d: unknown key", d.Config, brokenLine)
	waitFor(t, 30*time.Second, "the broken file to be refused", func() (bool, string) {
		rs := reloadStatus(t, d.RS)
		return rs.Last != nil && rs.Last.Result == "refused" && strings.Contains(rs.Last.Error, wantErr), fmt.Sprintf("%+v", rs.Last)
	})
	if !strings.Contains(d.Log(), wantErr) {
		t.Errorf("the daemon log does not name %q", wantErr)
	}
	if out, err := rtshimdReload(t, d); err == nil || !strings.Contains(out, wantErr) {
		t.Errorf("rtshimd reload of a broken file: %v\n%s", err, out)
	}
	if got := statusHandlers(t, d.RS); !slices.Equal(got, []string{"", "late", "runc", "runsc"}) {
		t.Errorf("Status handlers after a refused reload = %q", got)
	}
	if v, ok := metricOf(scrapeMetrics(t, metricsAddr), "rtshimd_config_reloads_total", map[string]string{"result": "failure"}); !ok || v < 1 {
		t.Errorf("failed reloads counter = %v (%v)", v, ok)
	}
	if v, ok := metricOf(scrapeMetrics(t, metricsAddr), "rtshimd_config_reloads_total", map[string]string{"result": "success"}); !ok || v < 3 {
		t.Errorf("successful reloads counter = %v (%v), want at least 3", v, ok)
	}
	runcPod, runcCfg := e.pod("on-runc", "runc")
	runcCtr := e.run(runcPod, runcCfg, e.ctrConfig("sleeper", "sleep", "1000"))
	if out, _ := e.exec(runcCtr, "echo", "still served"); out != "still served" {
		t.Errorf("exec in a runc pod after the refused reload: %q", out)
	}

	// 5. runsc removed while its pod runs: no new runsc pods; the running one execs, is
	// stopped and removed, also after kill -9 of the daemon.
	writeConfigFile(t, d, base)
	waitFor(t, 30*time.Second, "runsc to be removed", func() (bool, string) {
		got := statusHandlers(t, d.RS)
		return slices.Equal(got, []string{"", "runc"}), strings.Join(got, ",")
	})
	if _, err := d.RS.RunPodSandbox(ctx, podConfig("late-runsc", runtimeapi.NamespaceMode_CONTAINER), "runsc"); err == nil {
		t.Error("a new runsc pod ran after runsc was removed")
	}
	if out, _ := e.exec(runscCtr, "echo", "after removal"); out != "after removal" {
		t.Errorf("exec in the runsc pod after its handler was removed: %q", out)
	}
	d.Restart(true)
	if out, _ := e.exec(runscCtr, "echo", "after kill -9"); out != "after kill -9" {
		t.Errorf("exec in the runsc pod after its handler was removed and a kill -9: %q", out)
	}
	if st, err := d.RS.ContainerStats(ctx, runscCtr); err != nil || st.GetCpu() == nil {
		t.Errorf("stats of the runsc container after its handler was removed: %v %v", st, err)
	}
	if err := d.RS.ReopenContainerLog(ctx, runscCtr); err != nil {
		t.Errorf("reopen the runsc container's log after its handler was removed: %v", err)
	}
	if lines := readCRILog(t, filepath.Join(runscCfg.LogDirectory, "sleeper.log")); len(lines) == 0 || lines[0][2] != "from-runsc" {
		t.Errorf("the runsc container's log: %q", lines)
	}
	if err := d.RS.StopPodSandbox(ctx, runscPod); err != nil {
		t.Fatalf("stop the runsc pod: %v", err)
	}
	if err := d.RS.RemovePodSandbox(ctx, runscPod); err != nil {
		t.Fatalf("remove the runsc pod: %v", err)
	}
	if _, err := d.RS.PodSandboxStatus(ctx, runscPod, false); err == nil {
		t.Error("the runsc pod is still there after its removal")
	}
	if err := d.RS.RemovePodSandbox(ctx, runcPod); err != nil {
		t.Fatal(err)
	}
	if leftover := processesMentioning(filepath.Join(d.RunRoot, "runsc"), 0); len(leftover) > 0 {
		t.Errorf("runsc processes left: %v", leftover)
	}
}

// hashValue is rtshimd_config_hash's value for a sha256: its first 48 bits.
func hashValue(sum []byte) float64 {
	var v uint64
	for _, b := range sum[:6] {
		v = v<<8 | uint64(b)
	}
	return float64(v)
}

// Registries are reloaded too: a registry the daemon may not reach over plain HTTP
// becomes pullable once the file lists it as insecure, without a restart; a broken
// registry entry refuses the whole reload and the registries in force stay.
func TestReloadRegistries(t *testing.T) {
	reg := startRegistry(t, nil)
	reg.Push(t, "test/busybox", "1", ImageSpec{Layers: []Layer{busyboxLayer(t)}}, nil)
	d := newDaemon(t)
	ctx := ctxT(t)
	ref := reg.Ref("test/busybox", "1")
	if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err == nil {
		t.Fatal("pulled over plain HTTP from a registry not marked insecure")
	}
	d.Cfg.Image.Registries = append(d.Cfg.Image.Registries, config.Registry{Location: reg.Addr, Insecure: true})
	writeConfigFile(t, d, configTOML(t, d.Cfg))
	if out, err := rtshimdReload(t, d); err != nil {
		t.Fatalf("rtshimd reload: %v\n%s", err, out)
	}
	if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
		t.Fatalf("pull after the registry was made insecure by a reload: %v", err)
	}
	// A registries.conf that does not exist: refused, and the registries in force stay.
	d.Cfg.Image.RegistriesConf = "/nonexistent/registries.conf"
	writeConfigFile(t, d, configTOML(t, d.Cfg))
	out, err := rtshimdReload(t, d)
	if err == nil || !strings.Contains(out, "registries") {
		t.Errorf("rtshimd reload with a missing registries_conf: %v\n%s", err, out)
	}
	if err := d.IS.RemoveImage(ctx, imgSpec(ref)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
		t.Errorf("pull after a refused reload: %v", err)
	}
	// The file watcher sees the same edit and tries its own reload, which renders a
	// candidate directory before it is refused and removed: wait for it to go.
	waitFor(t, 10*time.Second, "only the registry drop-in in force", func() (bool, string) {
		leftovers, _ := filepath.Glob(filepath.Join(d.RunRoot, "registries.conf.d*"))
		return len(leftovers) == 1, fmt.Sprint(leftovers)
	})
}
