package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtshimd/rtshimd/pkg/monitor"
)

// entries reads a CRI log into "<tag> <text>" per stream, failing on a malformed entry.
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
			t.Fatalf("entry without its newline: %q", line)
		}
		f := bytes.SplitN(line[:len(line)-1], []byte(" "), 4)
		if len(f) != 4 || (string(f[2]) != "P" && string(f[2]) != "F") {
			t.Fatalf("malformed entry %q", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, string(f[0])); err != nil {
			t.Fatalf("entry time %q: %v", f[0], err)
		}
		out[string(f[1])] = append(out[string(f[1])], string(f[2])+" "+string(f[3]))
	}
	return out
}

// FuzzLoggerLog holds the monitor binary's CRI log writer (RTSHIMD_TEST_MONITOR: the C
// monitor, under ASan and UBSan in the test command) to the Go one in pkg/monitor, which
// FuzzCRILog checks against the format: whatever a container writes on stdout and
// stderr, the binary's log holds, stream by stream, the same entries (tag and text) as
// CRILog.Copy writes for it.
func FuzzLoggerLog(f *testing.F) {
	long := strings.Repeat("x", 16*1024)
	for _, seed := range [][2]string{{"", ""}, {"hello\nworld\n", "err\n"}, {"no newline", "a\r\nb\rc\n\n"},
		{long + "\r\n" + long + "y\n", long[:100] + "\r"}, {"\x00\xff\xfe binary\n", "\n\n\n"}} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, stdout, stderr []byte) {
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
		got := entries(t, logPath)

		want := map[string][]string{}
		for stream, data := range map[string][]byte{"stdout": stdout, "stderr": stderr} {
			path := filepath.Join(dir, stream+".want")
			w, err := monitor.OpenCRILog(dir, path)
			if err != nil {
				t.Fatal(err)
			}
			w.Copy(stream, bytes.NewReader(data)) // its file is closed by the GC
			if e := entries(t, path)[stream]; e != nil {
				want[stream] = e
			}
		}
		for _, stream := range []string{"stdout", "stderr"} {
			if g, w := fmt.Sprintf("%q", got[stream]), fmt.Sprintf("%q", want[stream]); g != w {
				t.Fatalf("%s: the monitor logged\n%s\nCRILog writes\n%s", stream, g, w)
			}
		}
	})
}
