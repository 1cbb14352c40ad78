package monitor

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzCRILog: whatever a container writes, the log holds well-formed CRI entries only
// ("<RFC3339Nano> <stream> <P|F> <text>"), none longer than the split size, and joining the
// entries back (a newline after each F) gives the output again (the line ends' \r aside,
// which is dropped before a newline, as containerd's writer does; a last line without a
// newline is a P entry, so it comes back without one).
func FuzzCRILog(f *testing.F) {
	for _, seed := range []string{"", "\n", "hello\nworld\n", "no newline", "a\r\nb\rc\n\n", strings.Repeat("x", maxLogLine+7) + "\ny"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "c.log")
		l, err := OpenCRILog(dir, path)
		if err != nil {
			t.Fatal(err)
		}
		l.Copy("stdout", bytes.NewReader(data))
		out, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var joined []byte
		for _, line := range bytes.SplitAfter(out, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			if line[len(line)-1] != '\n' {
				t.Fatalf("entry without its newline: %q", line)
			}
			parts := bytes.SplitN(line[:len(line)-1], []byte(" "), 4)
			if len(parts) != 4 {
				t.Fatalf("malformed entry %q", line)
			}
			if _, err := time.Parse(time.RFC3339Nano, string(parts[0])); err != nil {
				t.Fatalf("entry time %q: %v", parts[0], err)
			}
			if string(parts[1]) != "stdout" || (string(parts[2]) != "P" && string(parts[2]) != "F") {
				t.Fatalf("entry stream/tag %q %q", parts[1], parts[2])
			}
			if len(parts[3]) > maxLogLine {
				t.Fatalf("entry of %d bytes, past the %d split", len(parts[3]), maxLogLine)
			}
			joined = append(joined, parts[3]...)
			if string(parts[2]) == "F" {
				joined = append(joined, '\n')
			}
		}
		want := bytes.ReplaceAll(data, []byte("\r"), nil)
		if got := bytes.ReplaceAll(joined, []byte("\r"), nil); !bytes.Equal(got, want) {
			t.Fatalf("log joins back to %q, want %q", got, want)
		}
	})
}
