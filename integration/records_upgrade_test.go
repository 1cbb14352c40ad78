//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// recordDirsRelease is the last commit that kept a directory per record (meta.json and
// status.json) instead of one journal per store.
const recordDirsRelease = "ee47d55499c98ff2dcc4b33a2563205e04b4ee92"

// earlierDaemon builds rtshimd of rev from the repository's history into binDir; it skips
// in a checkout without that history.
func earlierDaemon(t testing.TB, rev string) string {
	bin := filepath.Join(binDir, "rtshimd-"+rev[:min(12, len(rev))])
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	// -trimpath: the build cache serves every package the two trees share.
	runIn(t, earlierTree(t, rev), []string{"GOFLAGS=-buildvcs=false"}, "go", "build", "-trimpath",
		"-tags", "containers_image_openpgp,exclude_graphdriver_btrfs", "-o", bin, "./cmd/rtshimd")
	return bin
}

// A node upgraded from the release that kept a directory per record: its pods and
// containers, running and exited, on runc and runsc, are recovered by a daemon of the
// journal after a kill -9 of the old one; the records are moved into the journal (no
// record directory is left) and the pods are stopped and removed as any other.
func TestEarlierRecordsRecovered(t *testing.T) {
	old := earlierDaemon(t, recordDirsRelease)
	e := newContainerEnv(t)
	e.d.Kill()
	e.d.Bin = old
	e.d.Start()
	type pod struct{ id, running, exited string }
	var pods []pod
	for _, handler := range []string{"runc", "runsc"} {
		podID, cfg := e.pod("dirs-"+handler, handler)
		p := pod{id: podID}
		p.running = e.run(podID, cfg, e.ctrConfig("running", "sleep", "1000"))
		p.exited = e.run(podID, cfg, e.ctrConfig("exited", "sh", "-c", "exit 4"))
		e.waitExit(p.exited)
		pods = append(pods, p)
	}
	e.d.Kill()
	for _, p := range pods {
		for kind, id := range map[string]string{"sandboxes": p.id, "containers": p.running} {
			if _, err := os.Stat(filepath.Join(e.d.State, kind, id, "meta.json")); err != nil {
				t.Fatalf("the earlier release kept no record directory: %v", err)
			}
		}
	}

	e.d.Bin = ""
	e.d.Start()
	ctx := ctxT(t)
	for _, p := range pods {
		st, err := e.d.RS.PodSandboxStatus(ctx, p.id, false)
		if err != nil || st.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("pod %s after the upgrade: %v %v", p.id[:12], st.GetStatus().GetState(), err)
		}
		if c, err := e.d.RS.ContainerStatus(ctx, p.running, false); err != nil || c.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("running container after the upgrade: %v %v", c.GetStatus().GetState(), err)
		}
		if c, err := e.d.RS.ContainerStatus(ctx, p.exited, false); err != nil || c.GetStatus().GetExitCode() != 4 {
			t.Errorf("exited container after the upgrade: %v %v", c.GetStatus(), err)
		}
	}
	for _, kind := range []string{"sandboxes", "containers"} {
		entries, _ := os.ReadDir(filepath.Join(e.d.State, kind))
		if len(entries) != 1 || entries[0].Name() != "journal" {
			var names []string
			for _, en := range entries {
				names = append(names, en.Name())
			}
			t.Errorf("%s holds %v after the upgrade, want only its journal", kind, names)
		}
		for _, p := range pods {
			if kind == "sandboxes" && !slices.Contains(stateEntries(filepath.Join(e.d.State, kind)), p.id) {
				t.Errorf("pod %s not in the journal", p.id[:12])
			}
		}
	}
	for _, p := range pods {
		if err := e.d.RS.StopPodSandbox(ctx, p.id); err != nil {
			t.Fatal(err)
		}
		if err := e.d.RS.RemovePodSandbox(ctx, p.id); err != nil {
			t.Fatal(err)
		}
	}
}
