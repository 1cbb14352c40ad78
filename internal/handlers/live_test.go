package handlers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtshimd/rtshimd/internal/config"
)

func TestLiveReload(t *testing.T) {
	tb, hs := table(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live := NewLive(ctx, tb, NewRuntimes(Env{}), Probe{})

	cfg := config.Default()
	delete(cfg.Handlers, "kata")
	cfg.Handlers["crun"].RuntimePath = "/nonexistent/crun"
	cfg.Handlers["extra"] = &config.Handler{RuntimeType: "oci", RuntimePath: "/nonexistent/extra", RuntimeRoot: "/run/x"}
	cfg.DefaultHandler = "runsc"
	next, err := live.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := next.Change()
	if !slices.Equal(c.Added, []string{"extra"}) || !slices.Equal(c.Changed, []string{"crun"}) ||
		!slices.Equal(c.Removed, []string{"kata"}) || !slices.Equal(c.Probing, []string{"crun", "extra"}) || c.Default != "runsc" {
		t.Fatalf("change = %+v", c)
	}
	if live.Table() != tb {
		t.Fatal("Prepare served the new table")
	}
	live.Publish(next)
	cur := live.Table()
	if cur == tb || cur.Default() != "runsc" {
		t.Fatalf("Publish did not serve the new table (default %q)", cur.Default())
	}
	// Unchanged ready rows keep their runtime and discovery: the same row.
	if h, _ := cur.Get("runc"); h != hs["runc"] {
		t.Error("runc was rebuilt though its row did not change")
	}
	// The table that was served is a value: nothing in it changed.
	if _, ok := tb.Get("kata"); !ok || tb.Default() != "runc" {
		t.Error("the old table was written")
	}
	if _, err := live.Lookup("kata"); err == nil {
		t.Error("kata still served after its removal")
	}
	// New rows start not ready, then say what their probe found.
	if h, _ := cur.Get("extra"); h.Ready || !strings.Contains(h.Reason, "probing") {
		t.Errorf("extra before its probe: ready %v, reason %q", h.Ready, h.Reason)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, _ := live.Table().Get("extra")
		if strings.Contains(h.Reason, "not installed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("extra after its probe: reason %q", h.Reason)
		}
		time.Sleep(10 * time.Millisecond)
	}
	live.Wait()
	if h, _ := live.Table().Get("crun"); h.Ready || !strings.Contains(h.Reason, "/nonexistent/crun") {
		t.Errorf("crun after its probe: ready %v, reason %q", h.Ready, h.Reason)
	}
	if h, _ := live.Table().Get("runc"); h != hs["runc"] {
		t.Error("a probe's publish replaced an unchanged row")
	}
}
