// Package sdnotify tells systemd (Type=notify) that the daemon is ready or stopping.
package sdnotify

import (
	"net"
	"os"
)

// Notify sends state (e.g. "READY=1") to $NOTIFY_SOCKET; without it, it does nothing.
func Notify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
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
