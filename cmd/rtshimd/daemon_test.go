package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/config"
)

// The default monitor is the one beside rtshimd; a configured path wins.
func TestChooseMonitor(t *testing.T) {
	beside := func(name string) string { return filepath.Join("/opt/rtshimd/bin", name) }
	if got := chooseMonitor("", beside); got != "/opt/rtshimd/bin/rtshim-monitor" {
		t.Errorf("default: %s", got)
	}
	if got := chooseMonitor("/usr/libexec/rtshim-monitor", beside); got != "/usr/libexec/rtshim-monitor" {
		t.Errorf("configured: %s", got)
	}
}

// A configured monitor that is missing or lacks its x bit stops the daemon before anything
// starts, with an error naming the key, the path and what to do.
func TestCheckMonitorRefusesUnrunnable(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "rtshim-monitor")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{plain, filepath.Join(dir, "missing")} {
		err := checkMonitor(&config.Config{MonitorPath: p})
		if err == nil || !strings.Contains(err.Error(), `monitor_path "`+p+`"`) || !strings.Contains(err.Error(), "leave monitor_path empty") {
			t.Errorf("monitor_path %s: %v", p, err)
		}
	}
	if err := os.Chmod(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkMonitor(&config.Config{MonitorPath: plain}); err != nil {
		t.Errorf("executable monitor refused: %v", err)
	}
}
