package container

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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

// Setting back a failed update gives every limit the update changed its old value, and
// "no limit" to one the container did not have.
func TestUndoResources(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	shares := uint64(512)
	prev, _ := json.Marshal(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(64 << 20)}, CPU: &specs.LinuxCPU{Shares: &shares}})
	next := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: i64(96 << 20), Swap: i64(96 << 20)}, CPU: &specs.LinuxCPU{Quota: i64(50000)}}
	undo := undoResources(prev, next)
	if got := *undo.Memory.Limit; got != 64<<20 {
		t.Errorf("memory limit set back to %d, want %d", got, 64<<20)
	}
	if got := *undo.Memory.Swap; got != -1 {
		t.Errorf("swap set back to %d, want -1 (none before)", got)
	}
	if got := *undo.CPU.Quota; got != -1 {
		t.Errorf("cpu quota set back to %d, want -1 (none before)", got)
	}
	if got := *undo.CPU.Shares; got != 512 {
		t.Errorf("cpu shares set back to %d, want 512", got)
	}
	if undo := undoResources(nil, &specs.LinuxResources{}); undo.Memory != nil || undo.CPU != nil {
		t.Errorf("an update that set nothing is set back with %+v", undo)
	}
}
