package monitor

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/stats/procstats"
)

// threads is how many threads this test process has now.
func threads(t *testing.T) int {
	t.Helper()
	n := procstats.Read("/proc", []int{os.Getpid()}).Threads
	if n == 0 {
		t.Fatal("no Threads line in /proc/self/status")
	}
	return int(n)
}

// Children awaited with startReaped hold no thread each while they live, and each is
// reaped (no zombie left) once it exits.
func TestStartReapedHoldsNoThread(t *testing.T) {
	const n = 40
	before := threads(t)
	var cmds []*exec.Cmd
	var dones []<-chan struct{}
	for range n {
		cmd := exec.Command("sleep", "60")
		done, err := startReaped(cmd)
		if err != nil {
			t.Fatal(err)
		}
		cmds, dones = append(cmds, cmd), append(dones, done)
	}
	time.Sleep(200 * time.Millisecond) // a blocking Wait would have its thread by now
	if during := threads(t); during-before >= n/2 {
		t.Errorf("%d threads with %d children waited on, %d before: a thread per child", during, n, before)
	}
	for i, d := range dones {
		select {
		case <-d:
			t.Fatalf("child %d: done before it exited", i)
		default:
		}
	}
	for _, c := range cmds {
		_ = c.Process.Signal(syscall.SIGKILL)
	}
	for i, d := range dones {
		select {
		case <-d:
		case <-time.After(10 * time.Second):
			t.Fatalf("child %d killed but its done never closed", i)
		}
		if st := cmds[i].ProcessState; st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("child %d: ProcessState %v, want killed by SIGKILL", i, st)
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(cmds[i].Process.Pid)); err == nil {
			t.Errorf("child %d (pid %d) still in /proc after done: not reaped", i, cmds[i].Process.Pid)
		}
	}
}

// A child that has already exited when the wait begins is seen at once.
func TestStartReapedQuickExit(t *testing.T) {
	done, err := startReaped(exec.Command("true"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("done never closed for a child that exited at once")
	}
	if _, err := startReaped(exec.Command("/nonexistent/binary")); err == nil {
		t.Error("startReaped of a missing binary succeeded")
	}
}

// Where the pidfd cannot be polled (here: a blocking one, which the poller does not take,
// or none at all), done still closes only once the child has exited and been reaped.
func TestStartReapedFallsBackToWait(t *testing.T) {
	orig := openPidfd
	t.Cleanup(func() { openPidfd = orig })
	for name, open := range map[string]func(int) (int, error){
		"blocking pidfd": func(pid int) (int, error) { return unix.PidfdOpen(pid, 0) },
		"no pidfd":       func(int) (int, error) { return -1, unix.ENOSYS },
	} {
		openPidfd = open
		cmd := exec.Command("sleep", "0.5")
		done, err := startReaped(cmd)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
			t.Fatalf("%s: done closed while the child ran", name)
		case <-time.After(100 * time.Millisecond):
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: done never closed", name)
		}
		if st := cmd.ProcessState; st == nil || !st.Success() {
			t.Errorf("%s: ProcessState %v, want reaped with status 0", name, st)
		}
	}
}
