package sdnotify

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The daemon, started by systemd with NOTIFY_SOCKET, notifies systemd, and nothing it runs
// sees the variable (runc would wait for its container's READY=1).
func TestNotifyWithoutPassingTheSocketOn(t *testing.T) {
	if os.Getenv("SDNOTIFY_CHILD") == "1" {
		// Run as the daemon: this process was started with NOTIFY_SOCKET.
		if err := Notify("READY=1"); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sh", "-c", "echo \"child sees [$NOTIFY_SOCKET]\"").Output()
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.Write(out)
		return
	}
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestNotifyWithoutPassingTheSocketOn$")
	cmd.Env = append(os.Environ(), "SDNOTIFY_CHILD=1", "NOTIFY_SOCKET="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("daemon stand-in: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "child sees []") {
		t.Errorf("a program the daemon ran saw NOTIFY_SOCKET:\n%s", out)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Errorf("systemd got %q, %v; want READY=1", buf[:n], err)
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	old := socket
	defer func() { socket = old }()
	socket = ""
	if err := Notify("READY=1"); err != nil {
		t.Errorf("without a notify socket: %v", err)
	}
}
