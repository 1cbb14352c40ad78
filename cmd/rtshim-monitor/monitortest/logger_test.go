package monitortest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
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

// monitorBinaryEnv names the monitor binary under test; unset, TestMain builds the
// monitor under ASan and UBSan (make monitor-sanitized) for this run.
const monitorBinaryEnv = "RTSHIMD_TEST_MONITOR"

// monitorBin is the binary under test.
var monitorBin string

func TestMain(m *testing.M) {
	monitorBin = os.Getenv(monitorBinaryEnv)
	if monitorBin == "" {
		dir, err := os.MkdirTemp("", "rtshim-monitor-test-")
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
		// The repository's root: this package lies in cmd/rtshim-monitor/monitortest.
		cmd := exec.Command("make", "--no-print-directory", "-C", "../../..", "monitor-sanitized", "BIN="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Printf("build the monitor (gcc and make needed): %v\n%s", err, out)
			os.Exit(1)
		}
		monitorBin = filepath.Join(dir, "rtshim-monitor-sanitized")
	}
	code := m.Run()
	if os.Getenv(monitorBinaryEnv) == "" {
		os.RemoveAll(filepath.Dir(monitorBin))
	}
	os.Exit(code)
}

// logger is a logger process under test.
type logger struct {
	cmd            *exec.Cmd
	stdout, stderr *os.File // startLogger's write ends: the container's output
	dir            string
}

// startLogger starts a logger with cfg (nil: without a config file) as a shim starts one
// (containerd's binary:// protocol): the container's output on pipes at fds 3 and 4.
func startLogger(t *testing.T, cfg *monitor.LoggerConfig) *logger {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l := execLogger(t, t.TempDir(), cfg, outR, errR)
	l.stdout, l.stderr = outW, errW
	return l
}

// execLogger starts a logger on dir with cfg written there (nil: no config file): fds
// become its fds from 3 on, then its ready fd (5 for a shim, 3 alone for the daemon's
// FIFOs, as monitor.StartLogger starts it), which it must close once it is ready.
func execLogger(t *testing.T, dir string, cfg *monitor.LoggerConfig, fds ...*os.File) *logger {
	t.Helper()
	if cfg != nil {
		if err := monitor.WriteLoggerConfig(dir, *cfg); err != nil {
			t.Fatal(err)
		}
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer readyR.Close()
	cmd := exec.Command(monitorBin, monitor.LoggerMode, dir)
	cmd.Env = []string{"CONTAINER_ID=0123456789abcdef", "CONTAINER_NAMESPACE=rtshimd"}
	cmd.ExtraFiles = append(fds, readyW)
	err = cmd.Start()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	_ = readyR.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, readyR); err != nil {
		t.Fatalf("the logger never said it was ready: %v; its log:\n%s", err, readFile(filepath.Join(dir, monitor.LogFile)))
	}
	return &logger{cmd: cmd, dir: dir}
}

// waitEnd waits up to 10 s for cmd, the monitor or logger (what) running in dir, to exit
// on its own; an error exit or none fails the test, with its log.
func waitEnd(t *testing.T, what string, cmd *exec.Cmd, dir string) {
	t.Helper()
	waitEndFor(t, what, cmd, filepath.Join(dir, monitor.LogFile), 10*time.Second)
}

// waitEndFor is waitEnd with the log at logPath and a bound of its own.
func waitEndFor(t *testing.T, what string, cmd *exec.Cmd, logPath string, bound time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s exited with %v; its log:\n%s", what, err, readFile(logPath))
		}
	case <-time.After(bound):
		t.Fatalf("the %s did not exit within %v; its log:\n%s", what, bound, readFile(logPath))
	}
}

// wait waits for the logger to exit on its own.
func (l *logger) wait(t *testing.T) {
	t.Helper()
	waitEnd(t, "logger", l.cmd, l.dir)
	if _, err := os.Stat(filepath.Join(l.dir, monitor.SocketFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the logger left its socket: %v", err)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// logTexts returns "<stream> <text>" for each CRI log entry.
func logTexts(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(readFile(path), "\n"), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 || f[2] != "F" {
			t.Fatalf("bad CRI log line %q", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Fatalf("bad CRI log line %q: %v", line, err)
		}
		out = append(out, f[1]+" "+f[3])
	}
	return out
}

func TestLoggerLogsAttachesAndEnds(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "0.log")
	stdin := filepath.Join(dir, "stdin")
	if err := unix.Mkfifo(stdin, 0o600); err != nil {
		t.Fatal(err)
	}
	l := startLogger(t, &monitor.LoggerConfig{LogPath: logPath, Stdin: stdin, StdinOnce: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	att, err := monitor.Attach(ctx, l.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	time.Sleep(50 * time.Millisecond) // let the session register before output flows
	fmt.Fprintln(l.stdout, "out line")
	fmt.Fprintln(l.stderr, "err line")
	got := map[byte]string{}
	_ = att.SetReadDeadline(time.Now().Add(10 * time.Second))
	for got[monitor.FrameStdout] != "out line\n" || got[monitor.FrameStderr] != "err line\n" {
		kind, payload, err := monitor.ReadFrame(att)
		if err != nil {
			t.Fatalf("attach frames so far %q: %v", got, err)
		}
		got[kind] += string(payload)
	}

	// Attach input goes into the stdin FIFO (read here as the shim would); the end of
	// the first client's input closes the logger's end of it (StdinOnce).
	in, err := os.OpenFile(stdin, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := monitor.WriteFrame(att, monitor.FrameStdin, []byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	if err := monitor.WriteFrame(att, monitor.FrameCloseStdin, nil); err != nil {
		t.Fatal(err)
	}
	_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(in); err != nil || string(b) != "typed\n" {
		t.Errorf("stdin FIFO got %q, %v; want the typed line, then EOF", b, err)
	}

	if err := monitor.Command(ctx, l.dir, monitor.CmdWatch); err == nil {
		t.Errorf("the logger accepted %q", monitor.CmdWatch)
	}
	// The output ends: the logger ends the attach session and exits.
	l.stdout.Close()
	l.stderr.Close()
	l.wait(t)
	_ = att.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, att); err != nil {
		t.Errorf("attach session not ended: %v", err)
	}
	// The streams are copied concurrently: either order.
	if got := strings.Join(logTexts(t, logPath), "|"); got != "stdout out line|stderr err line" && got != "stderr err line|stdout out line" {
		t.Errorf("CRI log = %q", got)
	}
}

// TestLoggerDrainsOnSIGTERM: at task delete the shim closes its ends of the pipes and
// signals the logger at once; what is still in the pipes must reach the log.
func TestLoggerDrainsOnSIGTERM(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "0.log")
	l := startLogger(t, &monitor.LoggerConfig{LogPath: logPath})
	const n = 2000
	for i := range n {
		fmt.Fprintf(l.stdout, "line %d\n", i)
	}
	l.stdout.Close()
	l.stderr.Close()
	if err := l.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	l.wait(t)
	got := logTexts(t, logPath)
	if len(got) != n || got[n-1] != fmt.Sprintf("stdout line %d", n-1) {
		t.Errorf("CRI log has %d lines (last %q), want %d", len(got), got[len(got)-1], n)
	}
}

// TestLoggerTerminal: with a terminal, the end of stdout alone ends the logger (the shim
// never closes its end of the stderr pipe).
func TestLoggerTerminal(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "0.log")
	l := startLogger(t, &monitor.LoggerConfig{LogPath: logPath, Terminal: true})
	fmt.Fprint(l.stdout, "prompt$ ls\r\n")
	l.stdout.Close()
	defer l.stderr.Close()
	l.wait(t)
	if got := logTexts(t, logPath); len(got) != 1 || !strings.HasPrefix(got[0], "stdout prompt$ ls") {
		t.Errorf("CRI log = %q", got)
	}
}

// TestLoggerWithoutConfig keeps reading (and discarding) the output when its config is
// missing, so that the container's writes do not fail.
func TestLoggerWithoutConfig(t *testing.T) {
	l := startLogger(t, nil)
	for range 1000 {
		if _, err := fmt.Fprintln(l.stdout, strings.Repeat("x", 100)); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	l.stdout.Close()
	l.stderr.Close()
	l.wait(t)
}

// TestLoggerURI: the shim turns the URI's path into the binary and its query into the
// arguments (containerd's NewBinaryCmd): `<binary> logger <dir>`.
func TestLoggerURI(t *testing.T) {
	dir := "/run/rtshimd/containers/a b&c=d?e"
	u, err := url.Parse(monitor.LoggerURI("/usr/local/bin/rtshim-monitor", dir))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for k, vs := range u.Query() {
		args = append(args, k, vs[0])
	}
	if u.Scheme != "binary" || u.Path != "/usr/local/bin/rtshim-monitor" || len(args) != 2 || args[0] != monitor.LoggerMode || args[1] != dir {
		t.Errorf("%s: binary %s %q, args %q", u, u.Scheme, u.Path, args)
	}
}

// wakeups counts the context switches of every thread of pid so far.
func wakeups(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	n := 0
	for _, task := range tasks {
		for _, l := range strings.Split(readFile(task), "\n") {
			if f := strings.Fields(l); len(f) == 2 && strings.HasSuffix(f[0], "ctxt_switches:") {
				v, _ := strconv.Atoi(f[1])
				n += v
			}
		}
	}
	return n
}

// TestLoggerFIFOWaitsAsleep: on FIFOs that no writer has opened yet, the logger sleeps
// until the shim opens them (no polling), then logs what comes and ends with the writers.
func TestLoggerFIFOWaitsAsleep(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "0.log")
	outFifo, errFifo := filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
	for _, p := range []string{outFifo, errFifo} {
		if err := unix.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l := execLogger(t, dir, &monitor.LoggerConfig{LogPath: logPath, Stdout: outFifo, Stderr: errFifo})
	time.Sleep(200 * time.Millisecond)
	before := wakeups(t, l.cmd.Process.Pid)
	time.Sleep(time.Second)
	if n := wakeups(t, l.cmd.Process.Pid) - before; n > 5 {
		t.Errorf("the logger woke %d times in 1s waiting for the FIFOs' writer", n)
	}
	out, err := os.OpenFile(outFifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	errw, err := os.OpenFile(errFifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(out, "out line")
	fmt.Fprintln(errw, "err line")
	out.Close()
	errw.Close()
	l.wait(t)
	if got := strings.Join(logTexts(t, logPath), "|"); got != "stdout out line|stderr err line" && got != "stderr err line|stdout out line" {
		t.Errorf("CRI log = %q", got)
	}
}

// TestLoggerFIFOWriterWithoutOutput: a writer that opens a FIFO and closes it without a
// word (the daemon releasing a logger whose task was never created) ends the logger.
func TestLoggerFIFOWriterWithoutOutput(t *testing.T) {
	dir := t.TempDir()
	outFifo := filepath.Join(dir, "stdout")
	if err := unix.Mkfifo(outFifo, 0o600); err != nil {
		t.Fatal(err)
	}
	l := execLogger(t, dir, &monitor.LoggerConfig{Stdout: outFifo, Terminal: true})
	f, err := os.OpenFile(outFifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	l.wait(t)
}

// TestLoggerNoConfigFIFOFds: started as the daemon starts it (fd 3 alone) but with no
// config to say so, the logger falls back to a shim's fds 3 to 5; none of them may be one
// it opened itself (its epoll fd, its signalfd). It says it is ready and ends.
func TestLoggerNoConfigFIFOFds(t *testing.T) {
	dir := t.TempDir()
	l := execLogger(t, dir, nil)
	l.wait(t)
}
