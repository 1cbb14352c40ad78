//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtshimd/rtshimd/internal/config"
)

// With [node] kubeconfig set, the daemon keeps its Node's labels in step with the handler
// table on a real API server: runtime.rtshimd.io/<handler>=true for each ready handler
// (the RuntimeClasses' node selector) and a label per feature it gives; none for a handler
// that is not ready; a stale label of its prefix removed, everyone else's left; a row a
// reload takes away loses its labels. Status verbose says what was written.
func TestNodeLabels(t *testing.T) {
	api := startAPIServer(t)
	const node = "rtshimd-labels-node"
	api.Create("/api/v1/nodes", fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: %s
  labels: {operator.example/keep: "yes", runtime.rtshimd.io/gone: "true"}
`, node))
	d := newDaemon(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Node = config.Node{Kubeconfig: api.Kubeconfig, Name: node}
	}))
	labels := func() map[string]string {
		b, err := api.Do(http.MethodGet, "/api/v1/nodes/"+node, "")
		if err != nil {
			t.Fatal(err)
		}
		var n struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &n); err != nil {
			t.Fatal(err)
		}
		return n.Metadata.Labels
	}
	ready := []string{"runc", "runc-shim", "runsc", "runsc-debian"}
	waitFor(t, 60*time.Second, "the ready handlers' labels", func() (bool, string) {
		l := labels()
		for _, h := range ready {
			if l["runtime.rtshimd.io/"+h] != "true" {
				return false, fmt.Sprint(l)
			}
		}
		return true, ""
	})
	l := labels()
	for k, want := range map[string]string{
		"operator.example/keep":                            "yes",  // not ours: kept
		"runtime.rtshimd.io/gone":                          "",     // ours, no such handler: removed
		"runtime.rtshimd.io/ghost":                         "",     // configured, not ready
		"features.runtime.rtshimd.io/runc.host-pid":        "true", // runc gives it
		"features.runtime.rtshimd.io/runsc.host-pid":       "",     // gVisor does not
		"features.runtime.rtshimd.io/runsc.host-network":   "true",
		"features.runtime.rtshimd.io/runc.user-namespaces": "true",
	} {
		if l[k] != want {
			t.Errorf("label %s = %q, want %q (all: %v)", k, l[k], want, l)
		}
	}
	st, err := d.RS.Status(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if info := st.GetInfo()["node_labels"]; !strings.Contains(info, `"node":"`+node+`"`) || strings.Contains(info, `"error"`) || !strings.Contains(info, "runtime.rtshimd.io/runc") {
		t.Errorf("Status verbose node_labels = %s", info)
	}
	// A reload that takes a row away takes its labels away.
	delete(d.Cfg.Handlers, "runsc-debian")
	d.WriteConfig()
	waitFor(t, 60*time.Second, "runsc-debian's labels to go", func() (bool, string) {
		l := labels()
		for k := range l {
			if strings.Contains(k, "runsc-debian") {
				return false, fmt.Sprint(l)
			}
		}
		return l["runtime.rtshimd.io/runsc"] == "true", fmt.Sprint(l)
	})
}

// On a kubeadm node kubelet's kubeconfig appears only after `kubeadm join`, which needs the
// runtime running first: a kubeconfig that is not there yet is waited for (Status verbose
// says so), and the labels are written once it appears.
func TestNodeLabelsWaitForKubeconfig(t *testing.T) {
	api := startAPIServer(t)
	const node = "rtshimd-labels-later"
	api.Create("/api/v1/nodes", fmt.Sprintf("apiVersion: v1\nkind: Node\nmetadata:\n  name: %s\n", node))
	kubeconfig := filepath.Join(t.TempDir(), "kubelet.conf")
	d := newDaemon(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Node = config.Node{Kubeconfig: kubeconfig, Name: node}
	}))
	waitFor(t, 30*time.Second, "Status verbose to say the kubeconfig is awaited", func() (bool, string) {
		st, err := d.RS.Status(context.Background(), true)
		if err != nil {
			return false, err.Error()
		}
		info := st.GetInfo()["node_labels"]
		return strings.Contains(info, "waiting for it") && strings.Contains(info, kubeconfig), info
	})
	b, err := os.ReadFile(api.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "runc's label once the kubeconfig is there", func() (bool, string) {
		b, err := api.Do(http.MethodGet, "/api/v1/nodes/"+node, "")
		return err == nil && strings.Contains(string(b), `"runtime.rtshimd.io/runc":"true"`), fmt.Sprint(string(b), err)
	})
}
