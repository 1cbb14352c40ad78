// Package cmdexit holds the one rule for reading how a command run through os/exec ended
// when it may leave a child behind.
package cmdexit

import (
	"errors"
	"os/exec"
)

// Succeeded reports whether cmd, whose Run or Wait returned err, exited 0. A command that
// exited 0 while a child it left (a runtime's sandbox process, a CNI plugin's daemonized
// helper) still holds its pipes did its work: os/exec reports that as exec.ErrWaitDelay
// once cmd.WaitDelay has passed, and treating it as a failure undoes work that was done.
func Succeeded(cmd *exec.Cmd, err error) bool {
	if err == nil {
		return true
	}
	return errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success()
}
