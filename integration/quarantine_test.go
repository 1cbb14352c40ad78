//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A record recovery cannot read is quarantined, not trusted and not deleted: the daemon
// starts, the record is kept aside and named in Status verbose, and what it describes,
// still running, is kept running with its files (a container of a kept pod with it) until
// an operator stops it with `rtshimd quarantine stop`, which ends it in its runtime before
// its files go. Three records go bad while the daemon is down: a running container's
// metadata turns to garbage (an early release removed its rootfs while it ran), a pod's
// status becomes unreadable (the daemon refused to start), and another pod's metadata is
// cut short (its sandbox kept running, unlisted). Once the kept ones are stopped and the
// surviving pod is removed the node is as before.
func TestBadRecordsQuarantined(t *testing.T) {
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e := newContainerEnv(t)
			n := writeNetwork(t, e)
			ctx := ctxT(t)
			before := e.nodeState(n, handler)

			podA, cfgA := e.pod("bad-ctr-"+handler, handler)
			victim := e.run(podA, cfgA, e.ctrConfig("victim", "sleep", "1000"))
			podB, cfgB := e.pod("bad-pod-status-"+handler, handler)
			inB := e.run(podB, cfgB, e.ctrConfig("in-b", "sleep", "1000"))
			podC, cfgC := e.pod("bad-pod-meta-"+handler, handler)
			inC := e.run(podC, cfgC, e.ctrConfig("in-c", "sleep", "1000"))

			e.d.Kill()
			// Records a damaged disk could give back: garbage metadata, a status that is
			// not JSON, metadata cut in half.
			editRecord(t, e.d, "containers", victim, func(_, _ []byte) ([]byte, []byte) {
				return []byte("{\"id\": \x00garbage"), nil
			})
			editRecord(t, e.d, "sandboxes", podB, func(_, _ []byte) ([]byte, []byte) {
				return nil, []byte{0xff, 0x00, '{'}
			})
			editRecord(t, e.d, "sandboxes", podC, func(meta, _ []byte) ([]byte, []byte) {
				return meta[:len(meta)/2], nil
			})
			e.d.Start() // fails the test if the daemon does not come up

			for _, id := range []string{victim, inB, inC} {
				if _, err := e.d.RS.ContainerStatus(ctx, id, false); status.Code(err) != codes.NotFound {
					t.Errorf("container %s after restart: %v, want NotFound", id[:12], err)
				}
			}
			for _, id := range []string{podB, podC} {
				if _, err := e.d.RS.PodSandboxStatus(ctx, id, false); status.Code(err) != codes.NotFound {
					t.Errorf("pod %s after restart: %v, want NotFound", id[:12], err)
				}
			}
			st, err := e.d.RS.Status(ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			var q struct {
				Sandboxes, Containers []quarantineEntry
			}
			if err := json.Unmarshal([]byte(st.Info["quarantined"]), &q); err != nil {
				t.Fatalf("Status verbose quarantined %q: %v", st.Info["quarantined"], err)
			}
			ids := func(l []quarantineEntry) []string {
				var out []string
				for _, r := range l {
					out = append(out, r.ID)
					if _, err := os.Stat(filepath.Join(r.Path, "meta.json")); err != nil || r.Reason == "" || !r.Kept {
						t.Errorf("quarantined record %s at %s: meta %v, reason %q, kept %v", r.ID, r.Path, err, r.Reason, r.Kept)
					}
				}
				slices.Sort(out)
				return out
			}
			wantPods := []string{podB, podC}
			slices.Sort(wantPods)
			if got := ids(q.Sandboxes); !slices.Equal(got, wantPods) {
				t.Errorf("quarantined sandboxes %v, want %v", got, wantPods)
			}
			// The victim, and the containers of the two kept pods, kept with them.
			wantCtrs := []string{victim, inB, inC}
			slices.Sort(wantCtrs)
			if got := ids(q.Containers); !slices.Equal(got, wantCtrs) {
				t.Errorf("quarantined containers %v, want %v", got, wantCtrs)
			}
			for _, id := range wantCtrs {
				if !slices.Contains(writableLayers(e.d.State), id) {
					t.Errorf("kept container %s lost its writable layer", id[:12])
				}
			}
			// The operator's stops: each ends what it names before its files go.
			for _, id := range []string{victim, podB, podC} {
				if out := quarantineCLI(t, e.d, "stop", id); !strings.Contains(out, "stopped") {
					t.Errorf("quarantine stop %s: %s", id[:12], out)
				}
			}
			if out := quarantineCLI(t, e.d); strings.Contains(out, "kept running") {
				t.Errorf("after the stops, still kept:\n%s", out)
			}

			// The pod whose container was quarantined carries on.
			ok := e.run(podA, cfgA, e.ctrConfig("after", "true"))
			if st := e.waitExit(ok); st.ExitCode != 0 {
				t.Errorf("container after the quarantine: exit %d", st.ExitCode)
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podA); err != nil {
				t.Fatal(err)
			}
			// Nothing of the three runs or is held any more (the records aside are not the node's).
			var after map[string][]string
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if after = e.nodeState(n, handler); maps2Equal(before, after) {
					break
				}
			}
			if !maps2Equal(before, after) {
				t.Errorf("after quarantine and the removal of the last pod, the node differs:\n%s", stateDiff(before, after))
			}
		})
	}
}

// quarantineEntry is an entry of Status verbose's "quarantined".
type quarantineEntry struct {
	ID, Path, Reason    string
	Kept, StopRequested bool `json:",omitempty"`
}

// quarantineCLI runs `rtshimd quarantine args...` on d's config and returns its output;
// a failure fails the test.
func quarantineCLI(t *testing.T, d *Daemon, args ...string) string {
	t.Helper()
	args = append(append([]string{"quarantine"}, args...), "--config", d.Config)
	out, err := exec.Command(filepath.Join(binDir, "rtshimd"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rtshimd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
