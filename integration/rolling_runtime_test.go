//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Rolling a runtime (the RuntimeClass design's own user story): a reload that points the
// runc row at a new binary applies to pods started after it, while a pod started before
// keeps the runtime it started with, for its containers made after the reload and for
// its stop and removal; `crictl inspectp` (PodSandboxStatus verbose) shows each pod's.
func TestRollingRuntime(t *testing.T) {
	e := newContainerEnv(t)
	d := e.d
	next, calls := loggedRunc(t, d.Dir)
	oldID, oldCfg := e.pod("rolling-before", "runc")
	first := e.run(oldID, oldCfg, e.ctrConfig("first", "sleep", "1000"))

	d.Cfg.Handlers["runc"].RuntimePath = next
	d.WriteConfig()
	if out, err := rtshimdReload(t, d); err != nil {
		t.Fatalf("rtshimd reload: %v\n%s", err, out)
	}
	waitFor(t, 60*time.Second, "the runc row on the new binary to be served and ready", func() (bool, string) {
		st, err := d.RS.Status(ctxT(t), true)
		if err != nil {
			return false, err.Error()
		}
		var rows []struct {
			Name   string `json:"name"`
			Ready  bool   `json:"ready"`
			Config struct {
				RuntimePath string `json:"runtime_path"`
			} `json:"config"`
		}
		if err := json.Unmarshal([]byte(st.Info["handlers"]), &rows); err != nil {
			return false, err.Error()
		}
		for _, r := range rows {
			if r.Name == "runc" {
				return r.Ready && r.Config.RuntimePath == next, fmt.Sprintf("%+v", r)
			}
		}
		return false, "no runc row"
	})
	newID, newCfg := e.pod("rolling-after", "runc")
	second := e.run(newID, newCfg, e.ctrConfig("second", "sleep", "1000"))
	late := e.run(oldID, oldCfg, e.ctrConfig("late", "sleep", "1000"))
	for _, id := range []string{first, second, late} {
		if out, err := e.exec(id, "echo", "ok"); out != "ok" {
			t.Errorf("exec in %s: %q, %v", id, out, err)
		}
	}
	runtimeOf := func(podID string) string {
		st, err := d.RS.PodSandboxStatus(ctxT(t), podID, true)
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Metadata struct {
				Runtime struct {
					Path string `json:"path"`
				} `json:"runtime"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
			t.Fatal(err)
		}
		return info.Metadata.Runtime.Path
	}
	if got := runtimeOf(oldID); got != "/usr/sbin/runc" {
		t.Errorf("inspectp of the pod started before the reload: runtime %q, want /usr/sbin/runc", got)
	}
	if got := runtimeOf(newID); got != next {
		t.Errorf("inspectp of the pod started after the reload: runtime %q, want %s", got, next)
	}
	for _, podID := range []string{oldID, newID} {
		if err := d.RS.StopPodSandbox(ctxT(t), podID); err != nil {
			t.Fatal(err)
		}
		if err := d.RS.RemovePodSandbox(ctxT(t), podID); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if !strings.Contains(log, second) {
		t.Errorf("the new pod's container did not run through the new binary:\n%s", log)
	}
	for _, id := range []string{first, late} {
		if strings.Contains(log, id) {
			t.Errorf("the old pod's container %s ran through the new binary:\n%s", id, log)
		}
	}
}
