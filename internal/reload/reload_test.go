package reload

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/config"
)

// A reload whose drop-in another user could write is refused naming the file, and the
// config being served stays: apply is never called.
func TestReloadRefusesUntrustedDropIn(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte("log_level = \"info\"\ndefault_handler = \"runc\"\n[handlers.runc]\nruntime_path = \"/usr/sbin/runc\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(config.DropInDir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	dropIn := filepath.Join(config.DropInDir(path), "50-x.toml")
	if err := os.WriteFile(dropIn, []byte("log_level = \"warn\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	r := New(cfg, func(context.Context, *config.Config, *config.Config) (any, []string, error) {
		applied++
		return nil, nil, nil
	})

	if err := os.WriteFile(dropIn, []byte("log_level = \"debug\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dropIn, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, trigger := range []string{Signal, File} {
		a := r.Reload(context.Background(), trigger)
		if a.Result != Refused || !strings.Contains(a.Error, dropIn) {
			t.Errorf("%s reload: %s (%s), want refused naming %s", trigger, a.Result, a.Error, dropIn)
		}
	}
	if applied != 0 || r.Config() != cfg || r.Config().LogLevel != "warn" {
		t.Errorf("served config changed: applied %d times, log_level %q", applied, r.Config().LogLevel)
	}
	if st := r.Status(); st.Hash != cfg.Hash || st.Last == nil || st.Last.Result != Refused {
		t.Errorf("status %+v, want the loaded config's hash and the refusal", st)
	}

	// Made root's own again, it applies.
	if err := os.Chmod(dropIn, 0o644); err != nil {
		t.Fatal(err)
	}
	if a := r.Reload(context.Background(), Signal); a.Result != Applied || applied != 1 || r.Config().LogLevel != "debug" {
		t.Errorf("reload after chmod: %+v, applied %d, log_level %q", a, applied, r.Config().LogLevel)
	}
}
