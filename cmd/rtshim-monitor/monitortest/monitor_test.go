package monitortest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/monitor"
)

// fakeRuntime is an OCI runtime's command line as far as the monitor uses it: create
// writes the pid of an init that waits for start, prints on both streams and exits 7;
// FAKE_FAIL makes create fail with words on stderr; FAKE_FLOOD=N makes the init first
// write N lines of 1000 bytes (floodText) in bursts of 64; FAKE_CAT makes it copy its
// stdin to stdout after a second; FAKE_HOLD makes it wait for $FAKE_DIR/release after
// start; FAKE_WAIT_FILE makes create wait for that file before it ends. With FAKE_FIFO,
// create makes that FIFO and the init waits on it as runc's does: it writes its byte and
// closes its end 0.3 s later, after it touched $FAKE_DIR/released (FAKE_FIFO_DIE: it ends
// before it opens the FIFO; FAKE_FIFO_OPEN_DIE: it opens it and ends); start notes each
// call in $FAKE_DIR/runtime-starts and, with either of those, fails as runc's does.
// restore notes its arguments in $FAKE_DIR/restore-args, prints and, with FAKE_FAIL, fails;
// else it leaves an init that prints a line and its stdin's first line, and exits 5.
const fakeRuntime = `#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in create|start|restore) cmd=$1; shift; break;; *) shift;; esac; done
case $cmd in
create)
	while [ $# -gt 1 ]; do case "$1" in --pid-file) pidf=$2; shift 2;; *) shift;; esac; done
	echo creating
	if [ -n "$FAKE_FAIL" ]; then echo "boom: no such thing" >&2; exit 3; fi
	exec 3<&0 # the init's stdin: sh gives a background job /dev/null
	if [ -n "$FAKE_FIFO" ]; then mkfifo "$FAKE_FIFO"; fi
	# The init never outlives its test directory: a test that ended without a start
	# (its cleanup wrote "started" just before the directory went) would leave it polling.
	sh -c 'if [ -n "$FAKE_FIFO_DIE" ]; then exit 9; fi
		if [ -n "$FAKE_FIFO_OPEN_DIE" ]; then exec 4>"$FAKE_FIFO"; exit 9; fi
		if [ -n "$FAKE_FIFO" ]; then
			exec 4>"$FAKE_FIFO"; printf 0 >&4; sleep 0.3; touch "$FAKE_DIR/released"; exec 4>&-
		fi
		while [ -z "$FAKE_FIFO" ] && [ -d "$FAKE_DIR" ] && [ ! -e "$FAKE_DIR/started" ]; do sleep 0.02; done
		if [ -n "$FAKE_HOLD" ]; then while [ -d "$FAKE_DIR" ] && [ ! -e "$FAKE_DIR/release" ]; do sleep 0.02; done; fi
		i=0; while [ $i -lt "${FAKE_FLOOD:-0}" ]; do
			awk -v i=$i "BEGIN { for (k = i; k < i + 64; k++) printf \"%08d %0990d\\n\", k, 0 }"
			i=$((i + 64)); sleep 0.01
		done
		if [ -n "$FAKE_CAT" ]; then sleep 1; cat; fi
		echo out-line; printf "err-line\nerr-tail" >&2
		exit 7' <&3 3<&- &
	echo $! > "$pidf"
	if [ -n "$FAKE_WAIT_FILE" ]; then while [ ! -e "$FAKE_WAIT_FILE" ]; do sleep 0.02; done; fi
	;;
restore)
	echo "$*" > "$FAKE_DIR/restore-args"
	while [ $# -gt 1 ]; do case "$1" in --pid-file) pidf=$2; shift 2;; *) shift;; esac; done
	echo restoring
	if [ -n "$FAKE_FAIL" ]; then echo "restore boom" >&2; exit 2; fi
	exec 3<&0
	sh -c 'echo restored-line; read l; echo "in=$l"; exit 5' <&3 3<&- &
	echo $! > "$pidf" ;;
start)
	echo start >> "$FAKE_DIR/runtime-starts"
	if [ -n "$FAKE_FIFO_DIE$FAKE_FIFO_OPEN_DIE" ]; then echo "cannot start a container that has stopped" >&2; exit 1; fi
	if [ -p "$FAKE_FIFO" ]; then cat "$FAKE_FIFO" > /dev/null; rm -f "$FAKE_FIFO"; fi
	touch "$FAKE_DIR/started" ;;
esac
`

// floodText is what the init writes on stdout with FAKE_FLOOD=lines: the flood, then its
// last line.
func floodText(lines int) string {
	var b strings.Builder
	for k := range lines {
		fmt.Fprintf(&b, "%08d %0990d\n", k, 0)
	}
	return b.String() + "out-line\n"
}

// stdoutFrames reads attach frames from r until an error and sends the stdout they held.
func stdoutFrames(r io.Reader) <-chan string {
	got := make(chan string, 1)
	go func() {
		var out strings.Builder
		for {
			kind, p, err := monitor.ReadFrame(r)
			if err != nil {
				got <- out.String()
				return
			}
			if kind == monitor.FrameStdout {
				out.Write(p)
			}
		}
	}()
	return got
}

// startMonitor runs the monitor under test on cfg as the
// daemon does and returns its report line.
func startMonitor(t *testing.T, cfg monitor.Config, env ...string) (*exec.Cmd, string) {
	t.Helper()
	data, _ := json.Marshal(cfg)
	return startMonitorRaw(t, cfg.Dir, data, env...)
}

// startMonitorRaw is startMonitor with monitor.json's bytes as given.
func startMonitorRaw(t *testing.T, dir string, data []byte, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cfg := monitor.Config{Dir: dir}
	if err := os.WriteFile(filepath.Join(cfg.Dir, monitor.ConfigFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := monitorBin
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
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "FAKE_DIR=" + cfg.Dir}, env...)
	for _, k := range []string{"ASAN_OPTIONS", "UBSAN_OPTIONS"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b, _ := os.ReadFile(filepath.Join(cfg.Dir, monitor.LogFile))
		checkSanitizer(t, b)
	})
	// A monitor that hangs before its report fails the test instead of hanging it.
	_ = r.SetReadDeadline(time.Now().Add(60 * time.Second))
	line, _ := bufio.NewReader(r).ReadString('\n')
	r.Close()
	return cmd, line
}

// checkSanitizer fails the test with what a sanitizer build (make unit runs one) reported
// in the monitor's log, b.
func checkSanitizer(t *testing.T, b []byte) {
	t.Helper()
	for _, s := range []string{"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"} {
		if i := strings.Index(string(b), s); i >= 0 {
			t.Errorf("the monitor's sanitizer: %s", b[i:min(len(b), i+2000)])
		}
	}
}

// startCreated is startMonitor for a create that must succeed: it returns the report.
func startCreated(t *testing.T, cfg monitor.Config, env ...string) (*exec.Cmd, monitor.Result) {
	t.Helper()
	cmd, line := startMonitor(t, cfg, env...)
	var res monitor.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil || res.Pid <= 0 || res.Error != "" {
		t.Fatalf("report %q: %v", line, err)
	}
	return cmd, res
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
	cmd, res := startCreated(t, cfg, "FAKE_HOLD=1")
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
	// The container ends only now: a start racing its end would find the monitor gone.
	if err := os.WriteFile(filepath.Join(cfg.Dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
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
	// Output that ends without a newline is a P entry, as containerd writes it.
	want := map[string]bool{"stdout F creating": true, "stdout F out-line": true, "stderr F err-line": true, "stderr P err-tail": true}
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

// A container restored at start: create runs nothing and reports no pid; start runs the
// runtime's restore with the container's stdio and follows the restored init to its
// exit; a failed restore is reported in the runtime's words and not tried again.
func TestMonitorRestore(t *testing.T) {
	cfg := monitorConfig(t)
	cfg.RestoreImage, cfg.RestoreWork, cfg.Stdin = filepath.Join(cfg.Dir, "image"), filepath.Join(cfg.Dir, "work"), true
	cmd, line := startMonitor(t, cfg)
	var res monitor.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil || res.Pid != 0 || res.Error != "" {
		t.Fatalf("report %q: %v, want no pid and no error", line, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "restore-args")); !os.IsNotExist(err) {
		t.Errorf("the runtime ran before the start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watched := make(chan monitor.Exit, 1)
	go func() {
		e, _, _ := monitor.Watch(ctx, cfg.Dir)
		watched <- e
	}()
	time.Sleep(100 * time.Millisecond) // the watch is in place
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart); err != nil {
		t.Fatalf("start (the restore): %v", err)
	}
	args, _ := os.ReadFile(filepath.Join(cfg.Dir, "restore-args"))
	want := fmt.Sprintf("--detach --bundle %s --pid-file %s/init.pid --image-path %s --work-path %s %s", cfg.Dir, cfg.Dir, cfg.RestoreImage, cfg.RestoreWork, cfg.ID)
	if strings.TrimSpace(string(args)) != want {
		t.Errorf("restore's arguments %q, want %q", args, want)
	}
	// The restored init reads the container's stdin: the pipe create made.
	go func() {
		_ = monitor.AttachSession(ctx, cfg.Dir, strings.NewReader("hello\n"), io.Discard, io.Discard, nil, nil)
	}()
	e := <-watched
	pid, _ := os.ReadFile(filepath.Join(cfg.Dir, monitor.PidFile))
	if e.Status != 5 || strconv.Itoa(e.Pid) != strings.TrimSpace(string(pid)) {
		t.Errorf("exit %+v, want status 5 of the restored init %s", e, pid)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("monitor: %v", err)
	}
	log, _ := os.ReadFile(cfg.LogPath)
	for _, w := range []string{"stdout F restoring", "stdout F restored-line", "stdout F in=hello"} {
		if !strings.Contains(string(log), w) {
			t.Errorf("log %q lacks %q", log, w)
		}
	}

	cfg = monitorConfig(t)
	cfg.RestoreImage = filepath.Join(cfg.Dir, "image")
	cmd, _ = startMonitor(t, cfg, "FAKE_FAIL=1")
	err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart)
	if err == nil || !strings.HasPrefix(err.Error(), "fake restore: exit status 2: ") || !strings.Contains(err.Error(), "restore boom") {
		t.Errorf("failed restore: %v, want the runtime's words", err)
	}
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart); err == nil || !strings.Contains(err.Error(), "failed already") {
		t.Errorf("second start after a failed restore: %v", err)
	}
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdExit); err != nil {
		t.Errorf("exit: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("monitor: %v", err)
	}
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

// An attach client that reads slowly must not slow the container's supervision: the
// CRI log takes all the output at once and the exit is recorded promptly; the slow client
// is dropped with a prefix of the output, in order, while a client that keeps up gets it
// all.
func TestMonitorSlowAttachClient(t *testing.T) {
	const lines = 4096 // 4 MB
	cfg := monitorConfig(t)
	cmd, _ := startCreated(t, cfg, fmt.Sprintf("FAKE_FLOOD=%d", lines))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	slow, err := monitor.Attach(ctx, cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := monitor.Attach(ctx, cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	time.Sleep(100 * time.Millisecond) // the sessions are in place before the output
	// The slow client takes 4 KiB every 100 ms: each frame is taken well within a second,
	// so only a bound on what waits for it can let the container go on at its own pace.
	slowGot := make(chan []byte, 1)
	go func() {
		var got []byte
		buf := make([]byte, 4096)
		for {
			_ = slow.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := slow.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				slowGot <- got
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	fastGot := stdoutFrames(bufio.NewReaderSize(fast, 256<<10))
	watched := make(chan error, 1)
	go func() {
		_, _, err := monitor.Watch(ctx, cfg.Dir)
		watched <- err
	}()
	time.Sleep(100 * time.Millisecond)
	began := time.Now()
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart); err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := <-watched; err != nil {
		t.Fatalf("watch: %v (after %v: supervision waited for the slow client)", err, time.Since(began))
	}
	t.Logf("%d lines and the exit in %v", lines, time.Since(began))
	if err := cmd.Wait(); err != nil {
		t.Errorf("monitor: %v", err)
	}

	want := floodText(lines)
	var logged strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(readFile(cfg.LogPath), "\n"), "\n") {
		if f := strings.SplitN(l, " ", 4); len(f) == 4 && f[1] == "stdout" && f[3] != "creating" {
			logged.WriteString(f[3] + "\n")
		}
	}
	if logged.String() != want {
		t.Errorf("CRI log: %d bytes of stdout, want %d in order", logged.Len(), len(want))
	}
	if got := <-fastGot; got != want {
		t.Errorf("the client that kept up got %d bytes of stdout, want %d in order", len(got), len(want))
	}
	// What the slow client got: whole frames, then perhaps part of one; a prefix.
	b := <-slowGot
	var out strings.Builder
	for len(b) >= 5 {
		n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
		end := min(5+n, len(b))
		if b[0] == monitor.FrameStdout {
			out.Write(b[5:end])
		}
		b = b[end:]
	}
	if !strings.HasPrefix(want, out.String()) || out.Len() >= len(want) {
		t.Errorf("the slow client got %d bytes of stdout: want a proper prefix of the %d", out.Len(), len(want))
	}
	if !strings.Contains(readFile(filepath.Join(cfg.Dir, monitor.LogFile)), "attach client dropped") {
		t.Errorf("monitor.log does not say the slow client was dropped")
	}
}

// A console socket peer that connects and sends nothing fails the create within the
// terminal's 10 s instead of hanging the monitor.
func TestMonitorConsoleSilentPeer(t *testing.T) {
	cfg := monitorConfig(t)
	cfg.Terminal = true
	release := filepath.Join(cfg.Dir, "release")
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(cfg.Dir, "started"), nil, 0o600) }) // the fake init ends
	// While create runs, connect to its console socket and send nothing.
	go func() {
		for range 500 {
			c, err := net.Dial("unix", filepath.Join(cfg.Dir, "console.sock"))
			if err == nil {
				t.Cleanup(func() { c.Close() })
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = os.WriteFile(release, nil, 0o600)
	}()
	began := time.Now()
	_, line := startMonitor(t, cfg, "FAKE_WAIT_FILE="+release)
	var res monitor.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil || !strings.HasPrefix(res.Error, "fake create: wait for the terminal: ") ||
		!strings.Contains(res.Error, "i/o timeout") {
		t.Errorf("report %q after %v: %v", line, time.Since(began), err)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("the report took %v", d)
	}
}

// A relative log directory that cleans to ".." is refused as any other path outside it
// (filepath.Rel gives "../x.log" for "../../x.log" below "..").
func TestMonitorRelativeLogDirEscape(t *testing.T) {
	cfg := monitorConfig(t)
	cfg.LogDir, cfg.LogPath = "..", "../../escaped.log"
	_, line := startMonitor(t, cfg)
	var res monitor.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil || !strings.Contains(res.Error, `is not below the log directory ".."`) {
		t.Errorf("report %q: %v", line, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "../../escaped.log")); err == nil {
		t.Errorf("the log was created outside its directory")
	}
}

// monitor.json is read as strictly as Go's encoding/json reads it.
func TestMonitorConfigStrict(t *testing.T) {
	for _, bad := range []string{
		`{"id":"x"} trailing`,
		`{"id":"a\qb"}`,
		`{"id":"x","terminal":tru}`,
		`{"id":"x","other":01}`,
		`{"id":"x","other":[1,]}`,
		"{\"id\":\"a\tb\"}",
		`{"id":"x"`,
		``,
	} {
		dir := t.TempDir()
		_, line := startMonitorRaw(t, dir, []byte(bad))
		var res monitor.Result
		if err := json.Unmarshal([]byte(line), &res); err != nil || !strings.HasPrefix(res.Error, "monitor: read config: ") {
			t.Errorf("config %q: report %q: %v", bad, line, err)
		}
	}
	// A repeated key: the last value wins (an array is replaced, not appended to).
	cfg := monitorConfig(t)
	data, _ := json.Marshal(cfg)
	data = append([]byte(`{"runtime_args":["start"],"runtime":"/no/such",`), data[1:]...)
	_, line := startMonitorRaw(t, cfg.Dir, data)
	var res monitor.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil || res.Pid <= 0 {
		t.Errorf("report %q: %v", line, err)
	}
	_ = syscall.Kill(res.Pid, syscall.SIGKILL)
}

// Attach stdin that the container does not read yet waits (the session reads no further
// frames meanwhile), and all of it arrives in order once the container reads, followed by
// the close of stdin; the output keeps flowing to the same client, to its last line.
func TestMonitorAttachStdinWaits(t *testing.T) {
	const lines = 300 // 300 KB: several times a pipe's buffer
	cfg := monitorConfig(t)
	cfg.Stdin, cfg.StdinOnce = true, true
	env := []string{"FAKE_CAT=1"}
	cmd, _ := startCreated(t, cfg, env...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	att, err := monitor.Attach(ctx, cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	want := floodText(lines)
	_ = att.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := stdoutFrames(att)
	time.Sleep(100 * time.Millisecond)
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart); err != nil {
		t.Fatalf("start: %v", err)
	}
	// 32 KiB frames, the last one's end mid-line.
	data := []byte(strings.TrimSuffix(want, "out-line\n"))
	for len(data) > 0 {
		n := min(32<<10, len(data))
		if err := monitor.WriteFrame(att, monitor.FrameStdin, data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	if err := monitor.WriteFrame(att, monitor.FrameCloseStdin, nil); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != want {
		t.Errorf("the client got %d bytes of stdout, want %d in order", len(g), len(want))
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("monitor: %v", err)
	}
	if e, err := monitor.ReadExit(cfg.Dir); err != nil || e.Status != 7 {
		t.Errorf("exit %+v %v, want status 7", e, err)
	}
}

// Attach sessions have a bound of their own: anyone allowed to attach to the pod opens as
// many as the monitor's connections (128) and still the daemon's control requests are
// served; the sessions past monitor.MaxAttach are refused with an error frame.
func TestMonitorAttachSessionsBounded(t *testing.T) {
	cfg := monitorConfig(t)
	startCreated(t, cfg, "FAKE_HOLD=1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart); err != nil {
		t.Fatalf("start: %v", err)
	}
	defer func() { _ = os.WriteFile(filepath.Join(cfg.Dir, "release"), nil, 0o600) }()
	const opened = 128
	var refused int
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < opened; i++ {
		c, err := monitor.Attach(ctx, cfg.Dir)
		if err != nil {
			t.Fatalf("attach %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	// Each session past the bound gets an error frame and its end; the others stay open.
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		kind, p, err := monitor.ReadFrame(c)
		switch {
		case err == nil && kind == monitor.FrameError:
			refused++
			if !strings.Contains(string(p), fmt.Sprintf("too many attach sessions (%d)", monitor.MaxAttach)) {
				t.Errorf("session %d refused with %q", i, p)
			}
		case err != nil && os.IsTimeout(err):
		default:
			t.Errorf("session %d: frame %d %q, %v", i, kind, p, err)
		}
	}
	if refused != opened-monitor.MaxAttach {
		t.Errorf("%d sessions refused, want %d", refused, opened-monitor.MaxAttach)
	}
	// Control requests are answered (a log reopen: kubelet's rotation waits on it).
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	if err := monitor.Command(rctx, cfg.Dir, monitor.CmdReopen); err != nil {
		t.Errorf("reopen with %d attach sessions open: %v", opened, err)
	}
}

// A hard link planted at the container's log path (by someone who can write the pod's log
// directory) is not appended to as root: the create fails and names it.
func TestMonitorLogHardLink(t *testing.T) {
	cfg := monitorConfig(t)
	victim := filepath.Join(cfg.Dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(victim, cfg.LogPath); err != nil {
		t.Fatal(err)
	}
	_, line := startMonitor(t, cfg)
	var res monitor.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil || !strings.Contains(res.Error, "hard links") {
		t.Errorf("report %q: %v; want the create refused for the log's hard links", line, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the linked file was written: %q", b)
	}
}

// The monitor's socket lets only root connect whatever umask the monitor inherits (a
// daemon run with umask 0 made it connectable by anyone on the node).
func TestMonitorSocketMode(t *testing.T) {
	old := syscall.Umask(0)
	cfg := monitorConfig(t)
	startCreated(t, cfg, "FAKE_HOLD=1")
	syscall.Umask(old)
	defer func() { _ = os.WriteFile(filepath.Join(cfg.Dir, "release"), nil, 0o600) }()
	fi, err := os.Stat(filepath.Join(cfg.Dir, monitor.SocketFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("monitor socket %v %v, want mode 0600", fi.Mode(), err)
	}
}

// A file that is not a terminal, sent on the console socket by whoever reaches it first,
// is refused: the container's stdio would otherwise go to and come from that file.
func TestMonitorConsoleNotATerminal(t *testing.T) {
	cfg := monitorConfig(t)
	cfg.Terminal = true
	release := filepath.Join(cfg.Dir, "release")
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(cfg.Dir, "started"), nil, 0o600) })
	victim := filepath.Join(cfg.Dir, "victim")
	go func() {
		defer func() { _ = os.WriteFile(release, nil, 0o600) }()
		for range 500 {
			c, err := net.Dial("unix", filepath.Join(cfg.Dir, "console.sock"))
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			defer c.Close()
			f, err := os.Create(victim)
			if err != nil {
				return
			}
			defer f.Close()
			_, _, _ = c.(*net.UnixConn).WriteMsgUnix([]byte("x"), unix.UnixRights(int(f.Fd())), nil)
			return
		}
	}()
	_, line := startMonitor(t, cfg, "FAKE_WAIT_FILE="+release)
	var res monitor.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil || !strings.Contains(res.Error, "is not a terminal") {
		t.Errorf("report %q: %v; want the file refused as not a terminal", line, err)
	}
	if b, _ := os.ReadFile(victim); len(b) != 0 {
		t.Errorf("the file sent as a console was written: %q", b)
	}
}

// An exit.json that cannot be written does not lose the exit: the monitor serves it to the
// next watcher (a daemon that was down when the container ended) and the watch returns it,
// instead of a lost supervision the daemon would record as 137.
func TestMonitorExitFileUnwritable(t *testing.T) {
	cfg := monitorConfig(t)
	// exit.json is a directory that is not empty: the rename onto it fails.
	if err := os.MkdirAll(filepath.Join(cfg.Dir, monitor.ExitFile, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd, res := startCreated(t, cfg, "FAKE_HOLD=1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart); err != nil {
		t.Fatalf("start: %v", err)
	}
	// The container ends while nobody watches.
	if err := os.WriteFile(filepath.Join(cfg.Dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	e, ok, err := monitor.Watch(ctx, cfg.Dir)
	if err != nil || !ok || e.Pid != res.Pid || e.Status != 7 || e.ExitedAt.IsZero() {
		t.Errorf("watch after the end = %+v %v %v, want pid %d status 7", e, ok, err, res.Pid)
	}
	waitEnd(t, "monitor", cmd, cfg.Dir) // once the exit was taken
}

// A monitor whose exit.json cannot be written and that no watcher asks serves the exit
// until its directory is gone (its socket's name went with it: nobody can connect any
// more), then logs the exit it could not hand over and ends, instead of trying the file
// each second for ever (audit 2026-11-26, N10). The directory goes after the container
// ended, exit.json being unwritable, or before, taking the file's place with it.
func TestMonitorEndsWhenItsDirIsGone(t *testing.T) {
	for _, tc := range []struct {
		name       string
		unwritable bool // exit.json cannot be written: the dir goes after the end
	}{{"after the end", true}, {"before the end", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := monitorConfig(t)
			if tc.unwritable {
				// exit.json is a directory that is not empty: the rename onto it fails.
				if err := os.MkdirAll(filepath.Join(cfg.Dir, monitor.ExitFile, "x"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			cmd, _ := startCreated(t, cfg, "FAKE_HOLD=1")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart); err != nil {
				t.Fatalf("start: %v", err)
			}
			// The log outlives the directory through a link of its own.
			logPath := filepath.Join(t.TempDir(), monitor.LogFile)
			if err := os.Link(filepath.Join(cfg.Dir, monitor.LogFile), logPath); err != nil {
				t.Fatal(err)
			}
			if tc.unwritable {
				// The container ends while nobody watches; the monitor serves the exit.
				if err := os.WriteFile(filepath.Join(cfg.Dir, "release"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				for deadline := time.Now().Add(20 * time.Second); !strings.Contains(readFile(logPath), "serving the exit to the next watcher"); time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the monitor never served the exit; its log:\n%s", readFile(logPath))
					}
				}
			}
			// The container's directory goes (the daemon removed the container); without
			// the dir, the init ends too.
			if err := os.RemoveAll(cfg.Dir); err != nil {
				t.Fatal(err)
			}
			// An upper bound on a hang, not a timing: the monitor looks once a second.
			waitEndFor(t, "monitor", cmd, logPath, 30*time.Second)
			b, _ := os.ReadFile(logPath)
			checkSanitizer(t, b)
			if !strings.Contains(string(b), "exit not handed over") || !strings.Contains(string(b), `"status":7`) {
				t.Errorf("the monitor's log does not name the exit it could not hand over:\n%s", b)
			}
		})
	}
}

// With exec_fifo, start lets the init go through its exec FIFO, as runc start does,
// without running the runtime, returns once the init has closed its end, and removes the
// FIFO. Where the FIFO is missing, the bundle names poststart hooks, or the init ended
// before it wrote, it runs the runtime's start, whose words say why.
func TestMonitorExecFifoStart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       []string
		noFifo    bool // exec_fifo names a path create does not make
		poststart bool // the bundle's config.json has a poststart hook
		exitCode  int
		runtime   bool   // the runtime's start ran
		startErr  string // in start's error
	}{
		{name: "fifo", exitCode: 7},
		{name: "no fifo", noFifo: true, exitCode: 7, runtime: true},
		{name: "poststart", poststart: true, exitCode: 7, runtime: true},
		{name: "init gone", env: []string{"FAKE_FIFO_DIE=1"}, exitCode: 9, runtime: true, startErr: "cannot start a container that has stopped"},
		{name: "init gone after open", env: []string{"FAKE_FIFO_OPEN_DIE=1"}, exitCode: 9, runtime: true, startErr: "cannot start a container that has stopped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := monitorConfig(t)
			cfg.ExecFifo = filepath.Join(cfg.Dir, "exec.fifo")
			spec := `{"ociVersion":"1.0.2","process":{"args":["sh"]}}`
			if tc.poststart {
				spec = `{"ociVersion":"1.0.2","hooks":{"poststart":[{"path":"/bin/true"}]}}`
			}
			if err := os.WriteFile(filepath.Join(cfg.Bundle, "config.json"), []byte(spec), 0o600); err != nil {
				t.Fatal(err)
			}
			env := tc.env
			if !tc.noFifo {
				env = append(env, "FAKE_FIFO="+cfg.ExecFifo)
			}
			cmd, _ := startCreated(t, cfg, env...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			watched := make(chan monitor.Exit, 1)
			go func() {
				e, _, _ := monitor.Watch(ctx, cfg.Dir)
				watched <- e
			}()
			err := monitor.Command(ctx, cfg.Dir, monitor.CmdStart)
			if tc.startErr == "" && err != nil {
				t.Fatalf("start: %v", err)
			}
			if tc.startErr != "" && (err == nil || !strings.Contains(err.Error(), tc.startErr)) {
				t.Errorf("start: %v, want an error with %q", err, tc.startErr)
			}
			if _, serr := os.Stat(filepath.Join(cfg.Dir, "released")); tc.name == "fifo" && serr != nil {
				t.Errorf("start returned before the init closed its end of the FIFO: %v", serr)
			}
			if e := <-watched; e.Status != tc.exitCode {
				t.Errorf("exit %+v, want status %d", e, tc.exitCode)
			}
			waitEnd(t, "monitor", cmd, cfg.Dir)
			_, err = os.Stat(filepath.Join(cfg.Dir, "runtime-starts"))
			if ran := err == nil; ran != tc.runtime {
				t.Errorf("the runtime's start ran: %v, want %v", ran, tc.runtime)
			}
			if _, err := os.Lstat(cfg.ExecFifo); tc.name == "fifo" && !os.IsNotExist(err) {
				t.Errorf("the exec FIFO is left: %v", err)
			}
			if b, _ := os.ReadFile(cfg.LogPath); tc.exitCode == 7 && !strings.Contains(string(b), "stdout F out-line") {
				t.Errorf("log %q: the init did not run on", b)
			}
		})
	}
}
