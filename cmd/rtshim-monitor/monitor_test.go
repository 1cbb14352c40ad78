package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtshimd/rtshimd/pkg/monitor"
)

// fakeRuntime is an OCI runtime's command line as far as the monitor uses it: create
// writes the pid of an init that waits for start, prints on both streams and exits 7;
// FAKE_FAIL makes create fail with words on stderr.
const fakeRuntime = `#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in create|start) cmd=$1; shift; break;; *) shift;; esac; done
case $cmd in
create)
	while [ $# -gt 1 ]; do case "$1" in --pid-file) pidf=$2; shift 2;; *) shift;; esac; done
	echo creating
	if [ -n "$FAKE_FAIL" ]; then echo "boom: no such thing" >&2; exit 3; fi
	sh -c 'while [ ! -e "$FAKE_DIR/started" ]; do sleep 0.02; done; echo out-line; printf "err-line\n" >&2; exit 7' &
	echo $! > "$pidf"
	;;
start) touch "$FAKE_DIR/started" ;;
esac
`

// startMonitor runs a monitor (the test binary, or RTSHIMD_TEST_MONITOR) on cfg as the
// daemon does and returns its report line.
func startMonitor(t *testing.T, cfg monitor.Config, env ...string) (*exec.Cmd, string) {
	t.Helper()
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(cfg.Dir, monitor.ConfigFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := os.Args[0]
	if b := os.Getenv(monitorBinaryEnv); b != "" {
		bin = b
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(cfg.Dir, monitor.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, filepath.Join(cfg.Dir, monitor.ConfigFile))
	cmd.Dir = cfg.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = append([]string{beLoggerEnv + "=1", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "FAKE_DIR=" + cfg.Dir}, env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(r).ReadString('\n')
	r.Close()
	return cmd, line
}

func monitorConfig(t *testing.T) monitor.Config {
	dir := t.TempDir()
	rt := filepath.Join(dir, "fake")
	if err := os.WriteFile(rt, []byte(fakeRuntime), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	return monitor.Config{ID: "0123456789abcdef", Dir: dir, Runtime: rt, RuntimeArgs: []string{"--root", dir},
		Bundle: dir, LogPath: filepath.Join(dir, "logs", "c.log"), LogDir: filepath.Join(dir, "logs")}
}

// The monitor's protocol: the pid report, the commands, the exit record to watchers and
// in exit.json, and the container's output in the CRI log.
func TestMonitorProtocol(t *testing.T) {
	cfg := monitorConfig(t)
	cmd, line := startMonitor(t, cfg)
	var res monitor.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil || res.Pid <= 0 || res.Error != "" {
		t.Fatalf("report %q: %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watched := make(chan monitor.Exit, 1)
	go func() {
		e, ok, err := monitor.Watch(ctx, cfg.Dir)
		if !ok || err != nil {
			t.Errorf("watch: %v %v", ok, err)
		}
		watched <- e
	}()
	if err := monitor.Command(ctx, cfg.Dir, "bogus"); err == nil || err.Error() != `unknown command "bogus"` {
		t.Errorf("bogus: %v", err)
	}
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdReopen); err != nil {
		t.Errorf("reopen: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // the watch is in place
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart); err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart); err != nil {
		t.Errorf("second start: %v", err)
	}
	e := <-watched
	if e.Pid != res.Pid || e.Status != 7 || e.Signal != 0 || time.Since(e.ExitedAt) > 20*time.Second {
		t.Errorf("exit %+v, want pid %d status 7", e, res.Pid)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("monitor: %v", err)
	}
	if f, err := monitor.ReadExit(cfg.Dir); err != nil || f != e {
		t.Errorf("exit.json %+v %v, want %+v", f, err, e)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, monitor.SocketFile)); !os.IsNotExist(err) {
		t.Errorf("socket left: %v", err)
	}
	b, _ := os.ReadFile(cfg.LogPath)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 {
			t.Fatalf("log line %q", l)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Errorf("log time: %v", err)
		}
		got = append(got, strings.Join(f[1:], " "))
	}
	want := map[string]bool{"stdout F creating": true, "stdout F out-line": true, "stderr F err-line": true}
	for _, g := range got {
		delete(want, g)
	}
	if len(want) != 0 {
		t.Errorf("log %q lacks %v", got, want)
	}
}

// A failing create is reported with the runtime's words; exit ends a container never
// started without an exit record.
func TestMonitorCreateFailsAndExit(t *testing.T) {
	cfg := monitorConfig(t)
	_, line := startMonitor(t, cfg, "FAKE_FAIL=1")
	var res monitor.Result
	// Both streams' last words, in the order they were read.
	if err := json.Unmarshal([]byte(line), &res); err != nil || !strings.HasPrefix(res.Error, "fake create: exit status 3: ") ||
		!strings.Contains(res.Error, "creating") || !strings.Contains(res.Error, "boom: no such thing") {
		t.Errorf("report %q: %v", line, err)
	}

	cfg = monitorConfig(t)
	cmd, line := startMonitor(t, cfg)
	if err := json.Unmarshal([]byte(line), &res); err != nil || res.Pid <= 0 {
		t.Fatalf("report %q: %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdExit); err != nil {
		t.Fatalf("exit: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("monitor: %v", err)
	}
	if _, err := monitor.ReadExit(cfg.Dir); !os.IsNotExist(err) {
		t.Errorf("exit.json after exit: %v", err)
	}
	_ = syscall.Kill(res.Pid, syscall.SIGKILL)
}

// A runtime that cannot be run is reported on fd 3.
func TestMonitorNoRuntime(t *testing.T) {
	dir := t.TempDir()
	_, line := startMonitor(t, monitor.Config{Dir: dir, Runtime: "/no/such/runtime", Bundle: dir, ID: "x"})
	var res monitor.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil || !strings.HasPrefix(res.Error, "runtime create: fork/exec /no/such/runtime: no such file or directory") {
		t.Errorf("report %q: %v", line, err)
	}
}
