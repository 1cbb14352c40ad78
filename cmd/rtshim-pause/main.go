// rtshim-pause is the process of a pod's sandbox container: it holds the pod's namespaces open,
// reaps zombies when it is the pod's PID 1, and exits cleanly on SIGINT or SIGTERM.
// `rtshim-pause -probe` exits 0 at once: rtshimd runs it to check that a handler works.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-probe" {
		os.Exit(0)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
