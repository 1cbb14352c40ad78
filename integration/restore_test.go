//go:build integration

package integration

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A container checkpointed under rtshimd is restored into another pod from the archive
// (CreateContainer with the archive's path as image, as with CRI-O and containerd;
// StartContainer restores it through runc and CRIU 4.1.1): it goes on counting where it
// stopped, into its new log, with the file it holds open, the file it wrote and the one it
// deleted as they were; exec reaches it; its removal leaves nothing. What cannot be
// restored is refused by field or handler before anything is made.
func TestRestoreContainer(t *testing.T) {
	e := newContainerEnv(t, withRestore())
	d := e.d
	ctx := ctxT(t)
	if why := criuCheck(t, "criu"); why != "" {
		t.Fatalf("CRIU in PATH does not work on this node (%s): make test installs CRIU 4.1.1 (hack/tools.sh install-criu)", why)
	}
	assertNoRestoreLeft := noRestoreLeft(t, d)

	// The counter writes each number to its log and to a file it keeps open in its
	// writable layer (CRIU restores an open file only if it is as it was), after writing a
	// file and deleting one of the image's.
	podA, podCfgA := e.pod("restore-from", "runc")
	script := `echo kept > /written; rm /etc/group; exec 3>>/count.log; i=0; ` +
		`while :; do i=$((i+1)); echo $i >&3; echo n=$i; sleep 0.1; done`
	orig := e.run(podA, podCfgA, e.ctrConfig("counter", "sh", "-c", script))
	waitFor(t, 30*time.Second, "the counter to count", func() (bool, string) {
		out, _ := e.exec(orig, "sh", "-c", "wc -l < /count.log")
		n, _ := strconv.Atoi(out)
		return n >= 5, out
	})
	archive := filepath.Join(t.TempDir(), "counter.tar")
	if err := d.RS.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: orig, Location: archive, Timeout: 60}); err != nil {
		t.Fatalf("CheckpointContainer: %v", err)
	}
	entries := readTar(t, archive)
	var deleted []string
	if err := json.Unmarshal(entries["deleted.files"], &deleted); err != nil || strings.Join(deleted, ",") != "/etc/group" {
		t.Errorf("deleted.files %q (%v), want [\"/etc/group\"]", entries["deleted.files"], err)
	}
	if _, ok := entries["rootfs-diff.tar"]; !ok {
		t.Fatalf("archive has no rootfs-diff.tar")
	}
	diffPath := filepath.Join(t.TempDir(), "diff.tar")
	if err := os.WriteFile(diffPath, entries["rootfs-diff.tar"], 0o600); err != nil {
		t.Fatal(err)
	}
	diff := readTar(t, diffPath)
	if string(diff["written"]) != "kept\n" || diff["count.log"] == nil || diff["etc/.wh.group"] == nil {
		t.Errorf("rootfs-diff.tar: written %q, count.log %d bytes, whiteout of etc/group %v; want the changes", diff["written"], len(diff["count.log"]), diff["etc/.wh.group"] != nil)
	}
	e.removePod(podA) // as a migration: the original is gone before the restore

	podB, podCfgB := e.pod("restore-to", "runc")
	cfg := e.ctrConfig("restored")
	cfg.Image = &runtimeapi.ImageSpec{Image: archive}
	id, err := d.RS.CreateContainer(ctx, podB, cfg, podCfgB)
	if err != nil {
		t.Fatalf("CreateContainer from the archive: %v", err)
	}
	st, err := d.RS.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	img, err := d.IS.ImageStatus(ctx, imgSpec(e.image), false)
	if err != nil || img.Image == nil {
		t.Fatalf("ImageStatus(%s): %v", e.image, err)
	}
	if st.Status.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.Status.ImageId != img.Image.Id {
		t.Errorf("restored container before start: %v, image_id %q; want CREATED, the checkpoint's image %s", st.Status.State, st.Status.ImageId, img.Image.Id)
	}
	if err := d.RS.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer (the restore): %v", err)
	}
	assertNoRestoreLeft("after the start")
	var first int
	logPath := filepath.Join(e.logs, "restore-to", "restored.log")
	waitFor(t, 30*time.Second, "the restored counter's output", func() (bool, string) {
		lines := readCRILog(t, logPath)
		if len(lines) < 3 {
			return false, strconv.Itoa(len(lines))
		}
		first, _ = strconv.Atoi(strings.TrimPrefix(lines[0][2], "n="))
		last, _ := strconv.Atoi(strings.TrimPrefix(lines[len(lines)-1][2], "n="))
		return last > first, lines[len(lines)-1][2]
	})
	if first <= 5 {
		t.Errorf("the restored counter's first line is n=%d: it started again instead of going on from past 5", first)
	}
	out, _ := e.exec(id, "sh", "-c", "cat /written; test -e /etc/group && echo group; head -n1 /count.log; tail -n1 /count.log")
	if lines := strings.Fields(out); len(lines) != 3 || lines[0] != "kept" || lines[1] != "1" {
		t.Errorf("restored rootfs: %q; want the written file, /etc/group gone, the count from 1", out)
	} else if n, _ := strconv.Atoi(lines[2]); n < first {
		t.Errorf("/count.log ends at %d, below the restored output's %d", n, first)
	}
	st, err = d.RS.ContainerStatus(ctx, id, false)
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("restored container: %v, %v; want RUNNING", st.GetStatus().GetState(), err)
	}
	// The restored processes are in the new container's cgroup: its stats see them.
	stats, err := d.RS.ContainerStats(ctx, id)
	if err != nil || stats.GetMemory().GetWorkingSetBytes().GetValue() == 0 || stats.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 {
		t.Errorf("restored container's stats: memory %d, CPU %d (%v); want its processes'", stats.GetMemory().GetWorkingSetBytes().GetValue(), stats.GetCpu().GetUsageCoreNanoSeconds().GetValue(), err)
	}

	t.Run("refused", func(t *testing.T) {
		runscPod, runscCfg := e.pod("restore-runsc", "runsc")
		notArchive := filepath.Join(t.TempDir(), "not.tar")
		if err := os.WriteFile(notArchive, []byte("no tar here"), 0o600); err != nil {
			t.Fatal(err)
		}
		tty := e.ctrConfig("tty")
		tty.Image, tty.Tty = &runtimeapi.ImageSpec{Image: archive}, true
		for _, tc := range []struct {
			name   string
			pod    string
			podCfg *runtimeapi.PodSandboxConfig
			cfg    *runtimeapi.ContainerConfig
			code   codes.Code
			says   []string
		}{
			{"missing archive", podB, podCfgB, withImage(e.ctrConfig("x"), "/no/such.tar"), codes.InvalidArgument, []string{"config.image.image", "/no/such.tar"}},
			{"not an archive", podB, podCfgB, withImage(e.ctrConfig("x"), notArchive), codes.InvalidArgument, []string{"config.image.image", notArchive, "checkpoint archive"}},
			{"terminal", podB, podCfgB, tty, codes.FailedPrecondition, []string{"config.tty"}},
			{"runsc", runscPod, runscCfg, withImage(e.ctrConfig("x"), archive), codes.FailedPrecondition, []string{`handler "runsc"`, "restore"}},
		} {
			_, err := d.RS.CreateContainer(ctx, tc.pod, tc.cfg, tc.podCfg)
			wantRefused(t, tc.name, err, tc.code, tc.says...)
		}
		assertNoRestoreLeft("after the refusals")
		ctrs, err := d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podB})
		if err != nil || len(ctrs) != 1 {
			t.Errorf("pod %s lists %d containers after the refusals (%v), want the restored one", podB[:12], len(ctrs), err)
		}
		e.removePod(runscPod)
	})

	t.Run("from a checkpoint image", func(t *testing.T) {
		// Pulled as any image, named by a pod spec, restored at start.
		ref := pushCheckpointImage(t, e, archive, "1")
		if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			t.Fatal(err)
		}
		tty := withImage(e.ctrConfig("from-image-tty"), ref)
		tty.Tty = true
		_, err := d.RS.CreateContainer(ctx, podB, tty, podCfgB)
		wantRefused(t, "a terminal, from a checkpoint image", err, codes.FailedPrecondition, "config.tty")
		assertNoRestoreLeft("after a refusal of a checkpoint image")
		cfg := withImage(e.ctrConfig("from-image"), ref)
		id, err := d.RS.CreateContainer(ctx, podB, cfg, podCfgB)
		if err != nil {
			t.Fatalf("CreateContainer from the checkpoint image: %v", err)
		}
		if err := d.RS.StartContainer(ctx, id); err != nil {
			t.Fatalf("StartContainer (the restore): %v", err)
		}
		logPath := filepath.Join(e.logs, "restore-to", "from-image.log")
		waitFor(t, 30*time.Second, "the output of the counter restored from the image", func() (bool, string) {
			lines := readCRILog(t, logPath)
			if len(lines) < 2 {
				return false, strconv.Itoa(len(lines))
			}
			n, _ := strconv.Atoi(strings.TrimPrefix(lines[0][2], "n="))
			return n > 5, lines[0][2]
		})
		if out, _ := e.exec(id, "cat", "/written"); out != "kept" {
			t.Errorf("restored from the image: /written %q", out)
		}
		if err := d.RS.StopContainer(ctx, id, 10); err != nil {
			t.Fatal(err)
		}
		if err := d.RS.RemoveContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		assertNoRestoreLeft("after the container from the image")
	})

	t.Run("restart before the start", func(t *testing.T) {
		// The daemon killed between create and start: the container is still created,
		// its monitor waiting, and the start restores it.
		id, err := d.RS.CreateContainer(ctx, podB, withImage(e.ctrConfig("after-restart"), archive), podCfgB)
		if err != nil {
			t.Fatalf("CreateContainer from the archive: %v", err)
		}
		d.Restart(true)
		if st, err := d.RS.ContainerStatus(ctx, id, false); err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Fatalf("after the restart: %v, %v; want CREATED", st.GetStatus().GetState(), err)
		}
		if err := d.RS.StartContainer(ctx, id); err != nil {
			t.Fatalf("StartContainer after the restart: %v", err)
		}
		if out, _ := e.exec(id, "cat", "/written"); out != "kept" {
			t.Errorf("restored after the restart: /written %q", out)
		}
		if err := d.RS.StopContainer(ctx, id, 10); err != nil {
			t.Fatal(err)
		}
		if err := d.RS.RemoveContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("failed restore", func(t *testing.T) {
		// CRIU refuses an image whose inventory is not one: the start fails in CRIU's
		// words, the container stays created and is not restored twice, and goes whole.
		bad := filepath.Join(t.TempDir(), "bad.tar")
		rewriteTar(t, archive, bad, map[string][]byte{"checkpoint/inventory.img": []byte("not an inventory")})
		resignTar(t, d, bad) // a checkpoint the node trusts that CRIU refuses all the same
		id, err := d.RS.CreateContainer(ctx, podB, withImage(e.ctrConfig("bad"), bad), podCfgB)
		if err != nil {
			t.Fatalf("CreateContainer from the bad archive: %v", err)
		}
		err = d.RS.StartContainer(ctx, id)
		if err == nil || !strings.Contains(err.Error(), "restore") {
			t.Fatalf("StartContainer of a bad image: %v, want the restore's failure", err)
		}
		t.Logf("refused: %v", err)
		if st, err := d.RS.ContainerStatus(ctx, id, false); err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Errorf("after a failed restore: %v, %v; want CREATED", st.GetStatus().GetState(), err)
		}
		if err := d.RS.StartContainer(ctx, id); err == nil || !strings.Contains(err.Error(), "failed already") {
			t.Errorf("second start: %v, want the refusal to restore again", err)
		}
		if err := d.RS.RemoveContainer(ctx, id); err != nil {
			t.Fatalf("RemoveContainer after a failed restore: %v", err)
		}
		assertNoRestoreLeft("after a failed restore's removal")
	})

	t.Run("created, then removed", func(t *testing.T) {
		id, err := d.RS.CreateContainer(ctx, podB, withImage(e.ctrConfig("never"), archive), podCfgB)
		if err != nil {
			t.Fatalf("CreateContainer from the archive: %v", err)
		}
		if err := d.RS.RemoveContainer(ctx, id); err != nil {
			t.Fatalf("RemoveContainer of a container never restored: %v", err)
		}
		assertNoRestoreLeft("after removing a container never started")
	})

	if err := d.RS.StopContainer(ctx, id, 10); err != nil {
		t.Fatal(err)
	}
	if st := e.waitExit(id); st.ExitCode != 137 && st.ExitCode != 143 {
		t.Errorf("restored container's exit: %d, want a signal's", st.ExitCode)
	}
	e.removePod(podB)
	assertNoRestoreLeft("after the pod's removal")
}

// pushCheckpointImage pushes a checkpoint archive to the test registry as a checkpoint
// image, as buildah's recipe for CRI-O makes one: the archive's files as its one layer,
// the manifest annotated with the checkpoint's name. It returns the image's reference.
func pushCheckpointImage(t *testing.T, e *containerEnv, archive, tag string) string {
	t.Helper()
	var files []File
	for name, b := range readTar(t, archive) {
		files = append(files, File{Path: "/" + strings.TrimSuffix(name, "/"), Content: string(b), Dir: strings.HasSuffix(name, "/"), Mode: 0o600})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	e.reg.Push(t, "test/counter-checkpoint", tag, ImageSpec{
		Layers:      []Layer{{Files: files}},
		Annotations: map[string]string{"io.kubernetes.cri-o.annotations.checkpoint.name": "counter"},
	}, nil)
	return e.reg.Ref("test/counter-checkpoint", tag)
}

// rewriteTar copies the tar at src to dst with the content of the entries in replace
// changed.
func rewriteTar(t *testing.T, src, dst string, replace map[string][]byte) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if b, ok := replace[hdr.Name]; ok {
			body, hdr.Size = b, int64(len(b))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// wantRefused fails the test unless err has code and its message names each of says.
func wantRefused(t testing.TB, what string, err error, code codes.Code, says ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return
	}
	for _, s := range says {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Errorf("%s: %q does not name %s", what, status.Convert(err).Message(), s)
		}
	}
}

func withImage(cfg *runtimeapi.ContainerConfig, img string) *runtimeapi.ContainerConfig {
	cfg.Image = &runtimeapi.ImageSpec{Image: img}
	return cfg
}

// The way a checkpoint travels through Kubernetes: kubelet's checkpoint API
// (ContainerCheckpoint) has rtshimd write the archive, the archive becomes a checkpoint
// image in a registry (buildah's recipe: its files as one layer, the annotation), and a
// pod naming that image is restored by kubelet's own pull, create and start: the counter
// goes on from where it was, and kubelet reports it running.
func TestKubeletCheckpointRestore(t *testing.T) {
	e := newContainerEnv(t, withRestore())
	writeNetwork(t, e)
	k := startKubelet(t, e.d, "")
	if why := criuCheck(t, "criu"); why != "" {
		t.Fatalf("CRIU in PATH does not work on this node (%s): make test installs CRIU 4.1.1 (hack/tools.sh install-criu)", why)
	}
	node := "-" + k.NodeName
	script := `echo kept > /written; i=0; while :; do i=$((i+1)); echo $i > /count; echo n=$i; sleep 0.1; done`
	k.AddStaticPod("counter.yaml", onePod("counter", e.image, "", "", "sh", "-c", script))
	k.WaitPod("counter"+node, 2*time.Minute, "Running and Ready", runningReady)
	waitFor(t, 30*time.Second, "the counter to count", func() (bool, string) {
		out, _ := k.Run("default", "counter"+node, "main", "cat", "/count")
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n >= 5, out
	})
	b, err := k.do(http.MethodPost, "/checkpoint/default/counter"+node+"/main?timeout=60")
	if err != nil {
		t.Fatalf("kubelet's checkpoint API: %v", err)
	}
	var resp struct {
		Items []string `json:"items"`
	}
	if err := json.Unmarshal(b, &resp); err != nil || len(resp.Items) != 1 {
		t.Fatalf("kubelet's checkpoint answer %q: %v", b, err)
	}
	archive := resp.Items[0]
	t.Logf("kubelet wrote %s", archive)
	k.RemoveStaticPod("counter.yaml")

	ref := pushCheckpointImage(t, e, archive, "kubelet")
	k.AddStaticPod("restored.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: restored, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
`, ref))
	k.WaitPod("restored"+node, 2*time.Minute, "Running and Ready", runningReady)
	var first string
	waitFor(t, 30*time.Second, "the restored counter's output", func() (bool, string) {
		out, err := k.ContainerLogs("default", "restored"+node, "main", false)
		if err != nil {
			return false, err.Error()
		}
		first, _, _ = strings.Cut(out, "\n")
		n, _ := strconv.Atoi(strings.TrimPrefix(first, "n="))
		return n > 5, first
	})
	t.Logf("the restored counter went on at %s", first)
	if out, err := k.Run("default", "restored"+node, "main", "cat", "/written"); err != nil || strings.TrimSpace(out) != "kept" {
		t.Errorf("the restored pod's /written: %q, %v", out, err)
	}
	k.RemoveStaticPod("restored.yaml")
	waitFor(t, time.Minute, "the restored pod to go", func() (bool, string) {
		pods, err := k.Pods()
		return err == nil && pods["restored"+node] == nil, fmt.Sprint(err)
	})
}
