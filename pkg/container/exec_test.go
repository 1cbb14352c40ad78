package container

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// io.Copy into the capped writers (as the kinds copy exec output) keeps the shared cap
// and still drains the reader.
func TestCappedExecOutput(t *testing.T) {
	b := &execBudget{left: 10}
	out, errw := &capped{budget: b}, &capped{budget: b}
	src := strings.NewReader(strings.Repeat("o", 7))
	if n, err := io.Copy(out, src); n != 7 || err != nil {
		t.Fatalf("copy stdout: %d %v", n, err)
	}
	big := bytes.NewReader(bytes.Repeat([]byte("e"), 1<<20))
	if n, err := io.Copy(errw, big); n != 1<<20 || err != nil {
		t.Fatalf("copy stderr: %d %v (the reader must be drained)", n, err)
	}
	if string(out.Bytes()) != "ooooooo" || string(errw.Bytes()) != "eee" {
		t.Errorf("kept %q and %q", out.Bytes(), errw.Bytes())
	}
	if d := b.droppedBytes(); d != 1<<20-3 {
		t.Errorf("dropped %d", d)
	}
}
