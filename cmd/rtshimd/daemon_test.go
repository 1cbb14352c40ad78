package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/pkg/config"
)

// The default monitor is the C one beside rtshimd; the Go one where only it is there; a
// configured path always wins.
func TestChooseMonitor(t *testing.T) {
	dir := t.TempDir()
	beside := func(name string) string { return filepath.Join(dir, name) }
	put := func(name string) {
		mode := os.FileMode(0o755)
		if n, ok := strings.CutSuffix(name, ":0644"); ok {
			name, mode = n, 0o644
		}
		if err := os.WriteFile(beside(name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		installed  []string
		configured string
		want       string
	}{
		{nil, "", beside("rtshim-monitor-c")}, // neither: the C one's path, for the error
		{[]string{"rtshim-monitor"}, "", beside("rtshim-monitor")},
		{[]string{"rtshim-monitor-c"}, "", beside("rtshim-monitor-c")},
		{[]string{"rtshim-monitor-c", "rtshim-monitor"}, "", beside("rtshim-monitor-c")},
		{[]string{"rtshim-monitor-c"}, "/opt/rtshim-monitor", "/opt/rtshim-monitor"},
		// A C monitor without its x bit is passed over for an installed Go one.
		{[]string{"rtshim-monitor-c:0644", "rtshim-monitor"}, "", beside("rtshim-monitor")},
	} {
		for _, n := range []string{"rtshim-monitor", "rtshim-monitor-c"} {
			os.Remove(beside(n))
		}
		for _, n := range c.installed {
			put(n)
		}
		if got := chooseMonitor(c.configured, beside); got != c.want {
			t.Errorf("installed %v, configured %q: %s, want %s", c.installed, c.configured, got, c.want)
		}
	}
}

// A configured monitor that is missing or lacks its x bit stops the daemon before anything
// starts, with an error naming the key, the path and what to do.
func TestCheckMonitorRefusesUnrunnable(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "rtshim-monitor-c")
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
