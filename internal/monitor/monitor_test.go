package monitor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A monitor whose runtime create never returns is given up (and killed) after
// CreateTimeout even when the caller's context has no deadline.
func TestStartBoundedWithoutDeadline(t *testing.T) {
	old := createTimeout
	createTimeout = 500 * time.Millisecond
	defer func() { createTimeout = old }()
	dir := t.TempDir()
	bin := filepath.Join(dir, "hung-monitor")
	must(t, os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755))
	done := make(chan error, 1)
	go func() {
		_, err := Start(context.Background(), bin, Config{ID: "x", Dir: dir})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Start = %v, want DeadlineExceeded", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Start still waiting for a monitor that never reports")
	}
}
