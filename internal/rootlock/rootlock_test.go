package rootlock

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestHelperHold is not a test: run by holdIn as another process, it takes the lock of
// $ROOTLOCK_DIR, says so on stdout, and holds it until killed.
func TestHelperHold(t *testing.T) {
	dir := os.Getenv("ROOTLOCK_DIR")
	if dir == "" {
		t.Skip("a helper for the other tests")
	}
	if _, err := Acquire(dir); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	select {}
}

// holdIn starts a process holding dir's lock and returns it once it holds it.
func holdIn(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHold$")
	cmd.Env = append(os.Environ(), "ROOTLOCK_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("the holder did not take the lock: %q", line)
	}
	return cmd
}

// A second holder is refused at once and told the first's PID; once the first is gone,
// killed, the root can be taken again: a crashed daemon leaves nothing to clean up.
func TestSecondHolderRefused(t *testing.T) {
	state, run := t.TempDir(), t.TempDir()
	first := holdIn(t, run)
	if !Held(run) || Held(state) {
		t.Errorf("Held: run %v, state %v; want true, false", Held(run), Held(state))
	}
	_, err := Acquire(state, run)
	if !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(first.Process.Pid)) {
		t.Fatalf("second Acquire: %v, want ErrHeld naming pid %d", err, first.Process.Pid)
	}
	// The refused Acquire took nothing: state is free.
	if Held(state) {
		t.Errorf("a refused Acquire left state locked")
	}
	_ = first.Process.Kill()
	_ = first.Wait()
	l, err := Acquire(state, run)
	if err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	if got := Holder(run); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file names pid %s, want ours", got)
	}
	l.Release()
}

// A child that inherited the holder's descriptor does not keep the lock once the holder
// is gone (what a flock did: the soak's restarted daemon found its roots held).
func TestLockNotKeptByChildren(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A child that shares the lock file's open file, as a fork does.
	child := exec.Command("sleep", "30")
	child.ExtraFiles = []*os.File{l.files[0]}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	l.Release()
	if Held(dir) {
		t.Fatalf("the lock is held by the child after its holder let go")
	}
}
