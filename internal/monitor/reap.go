package monitor

import (
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

// openPidfd opens a pidfd of our own for a child, nonblocking so that Go's poller takes
// it. It is independent of the one os/exec keeps for Wait, which must stay blocking:
// waitid on a nonblocking pidfd answers EAGAIN while the child lives. A test replaces it.
var openPidfd = func(pid int) (int, error) { return unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK) }

// startReaped starts cmd and returns a channel closed once it has exited and been reaped.
// exec.Cmd.Wait blocks in waitid, holding an OS thread for as long as the child lives:
// one thread (and its Go stacks, some 50 KiB) per running container's monitor, a thousand
// on a full node. So the exit is awaited on a pidfd through the runtime's poller, which
// holds no thread, and Wait is called once the child has exited, when it returns at once.
// Only we wait for the child, so its pid cannot be reused before the pidfd is opened.
// Where the kernel gives no pollable pidfd (before 5.3), Wait blocks as before.
func startReaped(cmd *exec.Cmd) (<-chan struct{}, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pidfd, err := openPidfd(cmd.Process.Pid)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err == nil {
			awaitExit(pidfd)
		}
		_ = cmd.Wait()
	}()
	return done, nil
}

// awaitExit returns once the process of pidfd has exited (a pidfd polls readable then),
// or early if the fd cannot be polled, after which Wait blocks; it closes pidfd.
func awaitExit(pidfd int) {
	f := os.NewFile(uintptr(pidfd), "pidfd") // a nonblocking fd is registered with the poller
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 0)
			if err == unix.EINTR {
				continue
			}
			// Ready, or polling fails: either way the blocking Wait takes over.
			return err != nil || n > 0
		}
	})
}
