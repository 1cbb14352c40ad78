package ocicmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rtshimd/rtshimd/internal/kind"
)

func TestIsNotExist(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&Error{Handler: "runc", Op: "delete", ID: "x", Text: "container does not exist"}, true},
		{&Error{Handler: "crun", Op: "kill", ID: "x", Text: "error opening file `/run/crun/x/status`: No such file or directory"}, true},
		{&Error{Handler: "runsc", Op: "state", ID: "x", Text: "loading container: container not found"}, true},
		{fmt.Errorf("stop: %w", &Error{Text: "Container Does Not Exist"}), true},
		{&Error{Handler: "runc", Op: "kill", ID: "x", Text: "container not running"}, false},
		{&Error{Handler: "runc", Op: "delete", ID: "x", Text: "permission denied"}, false},
		{errors.New("container does not exist"), false}, // not from a runtime
		{nil, false},
	}
	for _, tt := range tests {
		if got := IsNotExist(tt.err); got != tt.want {
			t.Errorf("IsNotExist(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Handler: "runc", Op: "kill", ID: "abc", Text: "boom"}, `handler "runc": kill abc: boom`},
		{&Error{Handler: "kata", Op: "--version", Text: "exec: not found"}, `handler "kata": --version: exec: not found`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestGlobalArgs(t *testing.T) {
	r := New(&kind.Row{Root: "/run/r", Args: []string{"--network=host"}, SystemdCgroup: true})
	want := []string{"--root", "/run/r", "--systemd-cgroup", "--network=host"}
	if got := r.GlobalArgs(); !reflect.DeepEqual(got, want) {
		t.Errorf("GlobalArgs = %q, want %q", got, want)
	}
	r.SystemdCgroup = false
	if got := r.GlobalArgs(); !reflect.DeepEqual(got, []string{"--root", "/run/r", "--network=host"}) {
		t.Errorf("GlobalArgs without systemd = %q", got)
	}
}

func TestLastLines(t *testing.T) {
	if got := lastLines("a\nb\nc\nd", 2); got != "c | d" {
		t.Errorf("lastLines = %q", got)
	}
	if got := lastLines("only", 5); got != "only" {
		t.Errorf("lastLines = %q", got)
	}
}

// A runtime binary that cannot run must not look like "container already gone".
func TestDeleteWithMissingBinaryFails(t *testing.T) {
	r := New(&kind.Row{Handler: "ghost", Path: "/nonexistent/rtshimd-runtime", Root: t.TempDir()})
	err := r.Delete(context.Background(), "c1", true)
	if err == nil {
		t.Fatal("Delete through a missing binary reported success")
	}
	if IsNotExist(err) {
		t.Errorf("IsNotExist(%v) = true for a binary that never ran", err)
	}
}

// A runtime that exits 0 while a child it started still holds its output (runc delete in
// the cgroup-v2 node) succeeded: the call must not fail once the pipe wait gives up.
func TestRunSucceedsWhenAChildHoldsTheOutput(t *testing.T) {
	// The child keeps stdout and stderr open for longer than the 2-second pipe wait.
	r := fakeRuntime(t, "sleep 5 &\nexit 0")
	if err := r.Delete(context.Background(), "c1", true); err != nil {
		t.Fatalf("Delete through a runtime that exited 0 failed: %v", err)
	}
}

// The same runtime exiting non-zero still fails, with its handler named.
func TestRunFailsWhenTheRuntimeFailsAndAChildHoldsTheOutput(t *testing.T) {
	r := fakeRuntime(t, "echo boom >&2\nsleep 5 &\nexit 3")
	err := r.Kill(context.Background(), "c1", "KILL", false)
	if err == nil {
		t.Fatal("Kill through a runtime that exited 3 reported success")
	}
	var e *Error
	if !errors.As(err, &e) || e.Handler != "held" {
		t.Errorf("error %v does not name the handler", err)
	}
}

// fakeRuntime is the driver of a runtime binary that is the shell script body, as handler
// "held".
func fakeRuntime(t *testing.T, body string) *Runtime {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "runtime")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return New(&kind.Row{Handler: "held", Path: bin, Root: t.TempDir()})
}
