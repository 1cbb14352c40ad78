package network

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// A plugin whose child holds its stdout is killed, child too, when the context ends:
// the call returns at the deadline, not when the child would have finished.
func TestPluginExecKillsHungPlugin(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "hang")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\nsleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := newPluginExec().ExecPlugin(ctx, plugin, nil, os.Environ())
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "hang") {
		t.Errorf("ExecPlugin = %v, want DeadlineExceeded naming the plugin", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %v", d)
	}
}

// A plugin's own error (CNI's JSON on stdout) comes back as it wrote it.
func TestPluginExecError(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "fail")
	script := "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"code\":7,\"msg\":\"no bridge\"}'\nexit 1\n"
	if err := os.WriteFile(plugin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := newPluginExec().ExecPlugin(context.Background(), plugin, nil, os.Environ())
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 7 || te.Msg != "no bridge" {
		t.Errorf("ExecPlugin = %#v, want the plugin's error", err)
	}
}
