// Package sdnotify tells systemd (Type=notify) that the daemon is ready or stopping.
//
// The notify socket's address is taken from the environment once, when the process starts,
// and removed from it: every program the daemon runs (runtimes, shims, monitors, CNI
// plugins) would otherwise inherit NOTIFY_SOCKET, and runc, seeing it, proxies the socket
// into the container and waits for the container to send READY=1, which a pod's
// containers never do: under systemd every runc container start hung until its timeout.
// containerd and CRI-O drop it the same way. github.com/coreos/go-systemd's SdNotify reads
// the address from the environment at each call, so it cannot be used once it is removed.
package sdnotify

import (
	"net"
	"os"
)

// socket is $NOTIFY_SOCKET as the process was started with.
var socket = takeEnv()

func takeEnv() string {
	s := os.Getenv("NOTIFY_SOCKET")
	_ = os.Unsetenv("NOTIFY_SOCKET")
	return s
}

// Notify sends state (e.g. "READY=1") to the notify socket; without one, it does nothing.
func Notify(state string) error {
	path := socket
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:] // abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
