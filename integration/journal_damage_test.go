//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/store"
)

// damageJournal compacts the store of kind in a stopped daemon's state (every record one
// entry) and flips a byte of id's entry: a bad sector.
func damageJournal(t *testing.T, d *Daemon, kind, id string) {
	t.Helper()
	dir := filepath.Join(d.State, kind)
	s, err := store.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 200<<10)
	for i := 0; i < 12; i++ {
		if err := s.Save("filler", map[string]string{"id": "filler"}, big); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete("filler"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	j := filepath.Join(dir, "journal")
	b, err := os.ReadFile(j)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(`"id":"`+id+`"`))
	if i < 0 {
		t.Fatalf("no entry of %s in %s", id, j)
	}
	b[i+len(id)+60] ^= 1
	if err := os.WriteFile(j, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// One damaged journal entry never costs a running container or pod (audit N1), with the
// real runtimes: the daemon restarts on the damaged journals; the container whose record
// was lost, and the pod whose record was lost with its container, run on with their
// files, unlisted, kept in quarantine and named in Status verbose; `rtshimd quarantine
// stop` ends each in its runtime before its files go; then the node is as before.
func TestJournalDamageKeepsRunning(t *testing.T) {
	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e := newContainerEnv(t)
			n := writeNetwork(t, e)
			ctx := ctxT(t)
			before := e.nodeState(n, handler)

			podA, cfgA := e.pod("dmg-ctr-"+handler, handler)
			victim := e.run(podA, cfgA, e.ctrConfig("victim", "sleep", "1000"))
			podB, cfgB := e.pod("dmg-pod-"+handler, handler)
			inB := e.run(podB, cfgB, e.ctrConfig("in-b", "sleep", "1000"))
			monitors := map[string]int{victim: monitorPid(t, e.d, victim), inB: monitorPid(t, e.d, inB)}

			e.d.Kill()
			damageJournal(t, e.d, "containers", victim)
			damageJournal(t, e.d, "sandboxes", podB)
			e.d.Start()

			for _, id := range []string{victim, inB} {
				if _, err := e.d.RS.ContainerStatus(ctx, id, false); status.Code(err) != codes.NotFound {
					t.Errorf("container %s after restart: %v, want NotFound (no record)", id[:12], err)
				}
				if pid := monitors[id]; pid == 0 || !processAlive(pid) {
					t.Errorf("container %s: its monitor %d is gone: the container was stopped", id[:12], pid)
				}
				if !slices.Contains(writableLayers(e.d.State), id) {
					t.Errorf("container %s lost its writable layer", id[:12])
				}
				if _, err := os.Stat(filepath.Join(e.d.RunRoot, "containers", id)); err != nil {
					t.Errorf("container %s lost its directory: %v", id[:12], err)
				}
			}
			if _, err := e.d.RS.PodSandboxStatus(ctx, podB, false); status.Code(err) != codes.NotFound {
				t.Errorf("pod after restart: %v, want NotFound (no record)", err)
			}
			// The pin home keeps what it holds for the kept pod (audit N9: its collection at
			// start released every pod not listed).
			if pinned, err := pinnedPods(e.d.RunRoot); err != nil || !slices.Contains(pinned, podB) {
				t.Errorf("the kept pod's pins after restart: %v (%v), want %s among them", pinned, err, podB[:12])
			}
			st, err := e.d.RS.Status(ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			var q struct {
				Sandboxes, Containers []quarantineEntry
				Journals              []string
			}
			if err := json.Unmarshal([]byte(st.Info["quarantined"]), &q); err != nil {
				t.Fatalf("Status verbose quarantined %q: %v", st.Info["quarantined"], err)
			}
			kept := func(l []quarantineEntry, id string) bool {
				return slices.ContainsFunc(l, func(e quarantineEntry) bool { return e.ID == id && e.Kept })
			}
			if !kept(q.Containers, victim) || !kept(q.Containers, inB) || !kept(q.Sandboxes, podB) {
				t.Errorf("Status verbose quarantined: %s", st.Info["quarantined"])
			}
			if len(q.Journals) != 2 {
				t.Errorf("Status verbose names the damaged journals: %q", q.Journals)
			}
			// kubelet, which sees neither, makes each again (audit R7): refused, naming the
			// kept one and `rtshimd quarantine`, not a second copy beside it.
			if _, err := e.d.RS.RunPodSandbox(ctx, cfgB, handler); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "rtshimd quarantine stop "+podB) {
				t.Errorf("RunPodSandbox of the kept pod: %v, want FailedPrecondition naming it", err)
			}
			if _, err := e.d.RS.CreateContainer(ctx, podA, e.ctrConfig("victim", "sleep", "1000"), cfgA); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "rtshimd quarantine stop "+victim) {
				t.Errorf("CreateContainer of the kept container: %v, want FailedPrecondition naming it", err)
			}
			// The other pod carries on.
			ok := e.run(podA, cfgA, e.ctrConfig("after", "true"))
			if st := e.waitExit(ok); st.ExitCode != 0 {
				t.Errorf("container after the damage: exit %d", st.ExitCode)
			}

			list := quarantineCLI(t, e.d)
			for _, id := range []string{victim, inB, podB} {
				if !strings.Contains(list, id) {
					t.Errorf("rtshimd quarantine does not list %s:\n%s", id[:12], list)
				}
			}
			for _, id := range []string{victim, podB} {
				if out := quarantineCLI(t, e.d, "stop", id); !strings.Contains(out, "stopped") {
					t.Errorf("quarantine stop %s: %s", id[:12], out)
				}
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podA); err != nil {
				t.Fatal(err)
			}
			// (A shim's logger ends when the pod's shim goes, so only after podA's removal.)
			for id, pid := range monitors {
				waitFor(t, 30*time.Second, "the stopped container's monitor to end", func() (bool, string) {
					return !processAlive(pid), id[:12]
				})
			}
			// The damaged journals are kept aside for the operator, who reads them, then
			// removes them.
			for _, kind := range []string{"containers", "sandboxes"} {
				aside, _ := filepath.Glob(filepath.Join(e.d.State, kind, "journal.damaged-*"))
				if len(aside) != 1 {
					t.Errorf("%s: damaged journal kept as %v, want one", kind, aside)
				}
				for _, p := range aside {
					os.Remove(p)
				}
			}
			var after map[string][]string
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if after = e.nodeState(n, handler); maps2Equal(before, after) {
					break
				}
			}
			if !maps2Equal(before, after) {
				t.Errorf("after the stops and the removal of the last pod, the node differs:\n%s", stateDiff(before, after))
			}
		})
	}
}

// One daemon per root (audit N6): a second rtshimd on a running one's roots exits at once,
// naming the first's PID, and changes nothing: the first keeps its socket and records.
func TestSecondDaemonRefused(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	pod, err := d.RS.RunPodSandbox(ctx, podConfig("first", runtimeapi.NamespaceMode_CONTAINER), "runc")
	if err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(d.State, "sandboxes", "journal")
	before, _ := os.ReadFile(journal)
	out, err := exec.Command(filepath.Join(binDir, "rtshimd"), "--config", d.Config).CombinedOutput()
	if err == nil {
		t.Fatalf("a second daemon on the same roots started:\n%s", out)
	}
	if want := "pid " + strconv.Itoa(d.cmd.Process.Pid); !strings.Contains(string(out), want) {
		t.Errorf("the refusal does not name the first daemon (%s):\n%s", want, out)
	}
	if after, _ := os.ReadFile(journal); !bytes.Equal(before, after) {
		t.Errorf("the second daemon changed the first's journal")
	}
	if _, err := d.RS.PodSandboxStatus(ctx, pod, false); err != nil {
		t.Errorf("the first daemon after the second's try: %v", err)
	}
	if err := d.RS.StopPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := d.RS.RemovePodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
}
