package cmdexit

import (
	"os/exec"
	"testing"
	"time"
)

func TestSucceeded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		want   bool
	}{
		{"exit 0", "exit 0", true},
		{"exit 3", "exit 3", false},
		// The shell exits at once; its background child holds stdout past WaitDelay.
		{"exit 0, child holds the pipe", "sleep 3 & exit 0", true},
		{"exit 3, child holds the pipe", "sleep 3 & exit 3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", tc.script)
			var out []byte
			cmd.Stdout = writerFunc(func(p []byte) (int, error) { out = append(out, p...); return len(p), nil })
			cmd.WaitDelay = 200 * time.Millisecond
			err := cmd.Run()
			if got := Succeeded(cmd, err); got != tc.want {
				t.Errorf("Succeeded(%v) = %v, want %v", err, got, tc.want)
			}
		})
	}
	if Succeeded(exec.Command("/nonexistent/binary"), exec.Command("/nonexistent/binary").Run()) {
		t.Error("a command that could not start succeeded")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
