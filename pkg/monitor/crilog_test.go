package monitor

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type entry struct {
	stream, tag, text string
}

// readLog parses a CRI log file, failing on any malformed line.
func readLog(t *testing.T, path string) []entry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	if b[len(b)-1] != '\n' {
		t.Fatalf("log does not end in a newline: %q", b)
	}
	var out []entry
	for _, line := range strings.Split(string(b[:len(b)-1]), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			t.Fatalf("malformed entry %.80q", line)
		}
		ts, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			t.Fatalf("entry %.80q: timestamp: %v", line, err)
		}
		if d := time.Since(ts); d < 0 || d > time.Minute {
			t.Errorf("entry %.80q: timestamp %v is not now", line, ts)
		}
		if f[2] != "P" && f[2] != "F" {
			t.Fatalf("entry %.80q: tag %q", line, f[2])
		}
		out = append(out, entry{f[1], f[2], f[3]})
	}
	return out
}

func TestCRILogCopy(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 2500) // 40000 bytes: two full P entries and an F
	exact := strings.Repeat("x", maxLogLine)
	tests := []struct {
		name string
		in   string
		want []entry // text of P entries checked only by length and concatenation
	}{
		{"lines", "hello\nworld\n", []entry{{"stdout", "F", "hello"}, {"stdout", "F", "world"}}},
		// As containerd: output that ends without a newline is a P entry, so that kubelet
		// (which ends an F entry with a newline) reads back exactly "a\nb".
		{"no final newline", "a\nb", []entry{{"stdout", "F", "a"}, {"stdout", "P", "b"}}},
		{"empty line", "\n", []entry{{"stdout", "F", ""}}},
		{"empty lines between", "a\n\nb\n", []entry{{"stdout", "F", "a"}, {"stdout", "F", ""}, {"stdout", "F", "b"}}},
		{"nothing", "", nil},
		{"long line", long + "\nnext\n", []entry{
			{"stdout", "P", long[:maxLogLine]}, {"stdout", "P", long[maxLogLine : 2*maxLogLine]},
			{"stdout", "F", long[2*maxLogLine:]}, {"stdout", "F", "next"}}},
		{"line of exactly 16 KiB", exact + "\n", []entry{{"stdout", "P", exact}, {"stdout", "F", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "0.log")
			l, err := OpenCRILog(filepath.Dir(path), path)
			if err != nil {
				t.Fatal(err)
			}
			defer l.f.Close()
			l.Copy("stdout", strings.NewReader(tt.in))
			got := readLog(t, path)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d entries, want %d: %.200v", len(got), len(tt.want), got)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("entry %d = {%s %s %.40q (%d bytes)}, want {%s %s %.40q (%d bytes)}", i,
						got[i].stream, got[i].tag, got[i].text, len(got[i].text),
						tt.want[i].stream, tt.want[i].tag, tt.want[i].text, len(tt.want[i].text))
				}
			}
		})
	}
}

func TestCRILogLongLineConcatenates(t *testing.T) {
	in := strings.Repeat("abcdefghijklmnopqrstuvwxyz", 5000) // 130000 bytes
	path := filepath.Join(t.TempDir(), "0.log")
	l, err := OpenCRILog(filepath.Dir(path), path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.f.Close()
	l.Copy("stderr", strings.NewReader(in+"\n"))
	var b strings.Builder
	got := readLog(t, path)
	for i, e := range got {
		last := i == len(got)-1
		if e.stream != "stderr" || (e.tag == "F") != last || len(e.text) > maxLogLine {
			t.Errorf("entry %d: stream %s tag %s, %d bytes", i, e.stream, e.tag, len(e.text))
		}
		b.WriteString(e.text)
	}
	if len(got) < 2 || b.String() != in {
		t.Errorf("%d entries concatenate to %d bytes, want %d bytes of input", len(got), b.Len(), len(in))
	}
}

func TestCRILogConcurrentStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	l, err := OpenCRILog(filepath.Dir(path), path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.f.Close()
	var wg sync.WaitGroup
	for _, s := range []string{"stdout", "stderr"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Copy(s, strings.NewReader(strings.Repeat(s+" line\n", 500)))
		}()
	}
	wg.Wait()
	n := map[string]int{}
	for _, e := range readLog(t, path) {
		if e.tag != "F" || e.text != e.stream+" line" {
			t.Fatalf("interleaved entry %+v", e)
		}
		n[e.stream]++
	}
	if n["stdout"] != 500 || n["stderr"] != 500 {
		t.Errorf("entries per stream = %v, want 500 each", n)
	}
}

func TestCRILogReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	l, err := OpenCRILog(filepath.Dir(path), path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.f.Close() }()
	l.Copy("stdout", strings.NewReader("before\n"))
	rotated := path + ".20240101-000000"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	l.Copy("stdout", strings.NewReader("still old\n"))
	if err := l.Reopen(); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	l.Copy("stdout", strings.NewReader("after\n"))

	if got := readLog(t, rotated); len(got) != 2 || got[0].text != "before" || got[1].text != "still old" {
		t.Errorf("rotated file = %+v, want before and still old", got)
	}
	if got := readLog(t, path); len(got) != 1 || got[0] != (entry{"stdout", "F", "after"}) {
		t.Errorf("new file = %+v, want only after", got)
	}
}
