package rootlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A second holder is refused at once and told the first's PID; once the first lets go,
// the root can be taken again.
func TestSecondHolderRefused(t *testing.T) {
	state, run := t.TempDir(), t.TempDir()
	l, err := Acquire(state, run)
	if err != nil {
		t.Fatal(err)
	}
	if !Held(state) || !Held(run) {
		t.Errorf("Held after Acquire: %v %v", Held(state), Held(run))
	}
	// flock locks belong to open files: a second open in this process conflicts as another
	// process's would.
	_, err = Acquire(t.TempDir(), run)
	if !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Acquire: %v, want ErrHeld naming pid %d", err, os.Getpid())
	}
	l.Release()
	if Held(run) {
		t.Errorf("Held after Release")
	}
	l2, err := Acquire(state, run)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// The kernel drops the lock of a process that died: a crashed daemon leaves nothing to
// clean up.
func TestLockGoesWithItsProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("flock", "-n", "-o", filepath.Join(dir, File), "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("flock(1):", err)
	}
	defer cmd.Process.Kill()
	for i := 0; i < 100 && !Held(dir); i++ {
		_ = exec.Command("sleep", "0.05").Run()
	}
	if _, err := Acquire(dir); !errors.Is(err, ErrHeld) {
		t.Fatalf("Acquire while flock(1) holds it: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	l.Release()
}
