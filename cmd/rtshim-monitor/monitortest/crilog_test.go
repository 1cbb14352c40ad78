package monitortest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtshimd/rtshimd/internal/monitor"
)

// maxLogLine is where the monitor splits a long line into partial (P) entries, as kubelet
// expects (docs/monitor-protocol.md).
const maxLogLine = 16 * 1024

// wantEntries is the CRI log format as a model: the "<tag> <text>" entries the monitor
// must write for a stream's output data. A full line (its "\n" or "\r\n" dropped) is an F
// entry; a line over maxLogLine is cut into P parts (a "\r\n" across the cut keeps its
// "\r" for the next part); output that ends without a newline is a P entry, as containerd
// writes it, so that kubelet, which adds a newline after an F entry, gives back what the
// container wrote (`echo -n DONE` as a termination message is "DONE").
func wantEntries(data []byte) []string {
	var out []string
	br := bufio.NewReaderSize(bytes.NewReader(data), maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
			out = append(out, "F "+string(line))
			continue
		case err == bufio.ErrBufferFull:
			if n := len(line); n > 1 && line[n-1] == '\r' {
				_ = br.UnreadByte()
				line = line[:n-1]
			}
			out = append(out, "P "+string(line))
			continue
		}
		if len(line) > 0 {
			out = append(out, "P "+string(line))
		}
		return out
	}
}

// entries reads a CRI log into "<tag> <text>" per stream, failing on a malformed entry,
// one longer than the split size, or one not written in the last minute.
func entries(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if line[len(line)-1] != '\n' {
			t.Fatalf("entry without its newline: %.80q", line)
		}
		f := bytes.SplitN(line[:len(line)-1], []byte(" "), 4)
		if len(f) != 4 || (string(f[2]) != "P" && string(f[2]) != "F") {
			t.Fatalf("malformed entry %.80q", line)
		}
		ts, err := time.Parse(time.RFC3339Nano, string(f[0]))
		if err != nil {
			t.Fatalf("entry time %q: %v", f[0], err)
		}
		if d := time.Since(ts); d < -time.Second || d > time.Minute {
			t.Fatalf("entry time %v is not now", ts)
		}
		if len(f[3]) > maxLogLine {
			t.Fatalf("entry of %d bytes, past the %d split", len(f[3]), maxLogLine)
		}
		out[string(f[1])] = append(out[string(f[1])], string(f[2])+" "+string(f[3]))
	}
	return out
}

// logOutput runs a logger on stdout and stderr (written concurrently) and returns its CRI
// log's entries per stream.
func logOutput(t *testing.T, stdout, stderr []byte) map[string][]string {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "0.log")
	l := startLogger(t, &monitor.LoggerConfig{LogPath: logPath, LogDir: dir})
	errs := make(chan error, 2)
	for _, w := range []struct {
		f    *os.File
		data []byte
	}{{l.stdout, stdout}, {l.stderr, stderr}} {
		go func() {
			_, err := w.f.Write(w.data)
			w.f.Close()
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("write the output: %v", err)
		}
	}
	l.wait(t)
	return entries(t, logPath)
}

// The CRI log format, case by case, as the binary writes it.
func TestLoggerCRILogFormat(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 2500) // 40000 bytes: two full P entries and an F
	exact := strings.Repeat("x", maxLogLine)
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"lines", "hello\nworld\n", []string{"F hello", "F world"}},
		{"no final newline", "a\nb", []string{"F a", "P b"}},
		{"crlf", "a\r\nb\rc\n", []string{"F a", "F b\rc"}},
		{"empty line", "\n", []string{"F "}},
		{"empty lines between", "a\n\nb\n", []string{"F a", "F ", "F b"}},
		{"nothing", "", nil},
		{"long line", long + "\nnext\n", []string{"P " + long[:maxLogLine], "P " + long[maxLogLine:2*maxLogLine],
			"F " + long[2*maxLogLine:], "F next"}},
		{"line of exactly 16 KiB", exact + "\n", []string{"P " + exact, "F "}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := logOutput(t, []byte(c.in), nil)
			if g, w := fmt.Sprintf("%.300q", got["stdout"]), fmt.Sprintf("%.300q", c.want); g != w || len(got) > 1 {
				t.Errorf("entries %s (streams %d), want %s", g, len(got), w)
			}
			// The model agrees with the cases, so the fuzz target below holds the binary
			// to the same rules.
			if g, w := fmt.Sprintf("%q", wantEntries([]byte(c.in))), fmt.Sprintf("%q", c.want); g != w {
				t.Errorf("model: %.300s, want %.300s", g, w)
			}
		})
	}
}

// Both streams at once: every line an entry of its own stream, none torn or interleaved.
func TestLoggerConcurrentStreams(t *testing.T) {
	got := logOutput(t, []byte(strings.Repeat("stdout line\n", 2000)), []byte(strings.Repeat("stderr line\n", 2000)))
	for _, s := range []string{"stdout", "stderr"} {
		if len(got[s]) != 2000 {
			t.Errorf("%s: %d entries, want 2000", s, len(got[s]))
		}
		for _, e := range got[s] {
			if e != "F "+s+" line" {
				t.Fatalf("%s: entry %q", s, e)
			}
		}
	}
}

// Reopen after kubelet rotated the log: later output goes to the new file; a log path
// swapped for a symlink is not followed (the monitor runs as root), the reopen fails and
// output keeps going to the open file.
func TestMonitorReopen(t *testing.T) {
	for _, swap := range []bool{false, true} {
		t.Run(map[bool]string{false: "rotated", true: "symlink"}[swap], func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "0.log")
			l := startLogger(t, &monitor.LoggerConfig{LogPath: logPath, LogDir: dir})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			await := func(path, text string) {
				t.Helper()
				for deadline := time.Now().Add(10 * time.Second); !strings.Contains(readFile(path), text); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%s never held %q: %q", path, text, readFile(path))
					}
				}
			}
			fmt.Fprintln(l.stdout, "before")
			await(logPath, "before")
			rotated := logPath + ".1"
			if err := os.Rename(logPath, rotated); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(t.TempDir(), "shadow")
			if swap {
				if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, logPath); err != nil {
					t.Fatal(err)
				}
			}
			fmt.Fprintln(l.stdout, "still old")
			await(rotated, "still old")
			err := monitor.Command(ctx, l.dir, monitor.CmdReopen)
			if swap != (err != nil) {
				t.Fatalf("reopen: %v", err)
			}
			fmt.Fprintln(l.stdout, "after")
			l.stdout.Close()
			l.stderr.Close()
			l.wait(t)
			wantOld, wantNew := "F before|F still old", "F after"
			if swap {
				wantOld, wantNew = "F before|F still old|F after", ""
				if b := readFile(target); b != "keep" {
					t.Errorf("the symlink's target was written: %q", b)
				}
			}
			if got := strings.Join(entries(t, rotated)["stdout"], "|"); got != wantOld {
				t.Errorf("rotated file: %q, want %q", got, wantOld)
			}
			if !swap {
				if got := strings.Join(entries(t, logPath)["stdout"], "|"); got != wantNew {
					t.Errorf("new file: %q, want %q", got, wantNew)
				}
			}
		})
	}
}

// FuzzLoggerLog holds the monitor binary's CRI log writer (under ASan and UBSan in the
// test command) to the format's model: whatever a container writes on stdout and stderr,
// the log holds, stream by stream, the entries wantEntries gives; so joining them back (a
// newline after each F) gives the output again, the line ends' "\r" aside.
func FuzzLoggerLog(f *testing.F) {
	long := strings.Repeat("x", maxLogLine)
	for _, seed := range [][2]string{{"", ""}, {"hello\nworld\n", "err\n"}, {"no newline", "a\r\nb\rc\n\n"},
		{long + "\r\n" + long + "y\n", long[:100] + "\r"}, {"\x00\xff\xfe binary\n", "\n\n\n"}} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, stdout, stderr []byte) {
		got := logOutput(t, stdout, stderr)
		for stream, data := range map[string][]byte{"stdout": stdout, "stderr": stderr} {
			if g, w := fmt.Sprintf("%q", got[stream]), fmt.Sprintf("%q", wantEntries(data)); g != w {
				t.Fatalf("%s: the monitor logged\n%s\nthe format says\n%s", stream, g, w)
			}
			var joined []byte
			for _, e := range got[stream] {
				joined = append(joined, e[2:]...)
				if e[0] == 'F' {
					joined = append(joined, '\n')
				}
			}
			if g, w := bytes.ReplaceAll(joined, []byte("\r"), nil), bytes.ReplaceAll(data, []byte("\r"), nil); !bytes.Equal(g, w) {
				t.Fatalf("%s: the log joins back to %q, want %q", stream, g, w)
			}
		}
	})
}
