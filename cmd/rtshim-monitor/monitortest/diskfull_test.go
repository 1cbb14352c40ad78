package monitortest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtshimd/rtshimd/internal/monitor"
)

// TestLoggerDiskFull: when the log's file system is full, entries are dropped whole (no
// torn line runs into the next entry, which kubelet would then lose too), the monitor
// says so and keeps reading the container's output, and once space is back the entries
// are written again.
func TestLoggerDiskFull(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounts a tmpfs: needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	defer func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) }()
	logPath := filepath.Join(dir, "0.log")
	l := startLogger(t, &monitor.LoggerConfig{LogPath: logPath, LogDir: dir})
	monLog := filepath.Join(l.dir, monitor.LogFile)
	await := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s; the monitor's log:\n%s", what, readFile(monLog))
			}
		}
	}
	fmt.Fprintln(l.stdout, "before")
	await("the first entry was not logged", func() bool { return strings.Contains(readFile(logPath), "before") })

	// Fill the file system; what is left is the rest of the log's last page.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := filler.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	filler.Close()
	line := func(i int) string { return fmt.Sprintf("full-%03d %s", i, strings.Repeat("x", 1000)) }
	for i := range 40 {
		fmt.Fprintln(l.stdout, line(i))
	}
	await("the monitor did not say it drops entries", func() bool { return strings.Contains(readFile(monLog), "entries are dropped") })
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(l.stdout, "after")
	await("the entry written once space was back is not in the log", func() bool { return strings.Contains(readFile(logPath), "after") })
	l.stdout.Close()
	l.stderr.Close()
	l.wait(t)

	got := logTexts(t, logPath) // fails on a malformed line
	if len(got) < 2 || got[0] != "stdout before" || got[len(got)-1] != "stdout after" {
		t.Fatalf("CRI log entries %.200q, want before, the full lines that fit, after", got)
	}
	if len(got) == 42 {
		t.Fatal("every line fit: the file system was not full")
	}
	// Those that fit are whole and in order; which ones fit depends on how the file
	// system frees what a torn entry had taken (a page cut back makes room for the next).
	next := 0
	for i, g := range got[1 : len(got)-1] {
		for next < 40 && g != "stdout "+line(next) {
			next++
		}
		if next == 40 {
			t.Fatalf("entry %d = %.40q... is not one of the lines written, whole, in order", i+1, g)
		}
		next++
	}
	if !strings.Contains(readFile(monLog), fmt.Sprintf("%d entries were dropped", 40-(len(got)-2))) {
		t.Errorf("the monitor's log does not count the %d dropped entries:\n%s", 40-(len(got)-2), readFile(monLog))
	}
}
