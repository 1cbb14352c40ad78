package monitor

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// startReaped starts cmd and returns a channel closed once it has exited and been reaped.
// exec.Cmd.Wait blocks in waitid, holding an OS thread for as long as the child lives:
// one thread (and its Go stacks, some 50 KiB) per running container's monitor, a thousand
// on a full node. So the exit is awaited on a pidfd through the runtime's poller, which
// holds no thread, and Wait is called once the child has exited, when it returns at once.
// Where the kernel gives no pollable pidfd (before 5.3), Wait blocks as before.
func startReaped(cmd *exec.Cmd) (<-chan struct{}, error) {
	pidfd := -1
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.PidFD = &pidfd // ours; os/exec keeps a duplicate of its own
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if pidfd >= 0 {
			awaitExit(pidfd)
		}
		_ = cmd.Wait()
	}()
	return done, nil
}

// awaitExit returns once the process of pidfd has exited (a pidfd polls readable then),
// or at once if the fd cannot be polled; it closes pidfd.
func awaitExit(pidfd int) {
	if err := syscall.SetNonblock(pidfd, true); err != nil {
		_ = syscall.Close(pidfd)
		return
	}
	f := os.NewFile(uintptr(pidfd), "pidfd") // nonblocking: registered with the poller
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
			// Ready, or polling fails: either way Wait takes over.
			return err != nil || n > 0
		}
	})
}
