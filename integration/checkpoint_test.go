//go:build integration

package integration

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// criuCheck runs `criu check` with the CRIU at path ("criu": runc's, from PATH): "" if it
// works here, else the first error it gives, without its time and source location.
func criuCheck(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command(path, "check").CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case err == nil && !strings.Contains(string(out), "Error ("):
		return ""
	case err != nil && !errors.As(err, &exitErr):
		return "criu" // not installed: the runtime says it cannot find it
	}
	for _, line := range strings.Split(string(out), "\n") {
		if _, msg, ok := strings.Cut(line, "Error ("); ok {
			if _, after, ok := strings.Cut(msg, "): "); ok {
				return strings.TrimSpace(after)
			}
		}
	}
	return strings.TrimSpace(string(out))
}

// debianCRIU is Debian 12's CRIU, which fails on this host's kernel (make test installs 4.1.1
// at /usr/local/sbin/criu, runc's from PATH). The runc-oldcriu row runs runc with it.
const debianCRIU = "/usr/sbin/criu"

// CheckpointContainer on runc writes the archive and leaves the container running (CRIU
// 4.1.1, which make test installs); with a CRIU that fails on this node (Debian 12's, on a
// row of its own) the error says why in CRIU's words and nothing is left, the container
// running on. Other kinds refuse by name, and bad requests are refused naming the field.
func TestCheckpointContainer(t *testing.T) {
	e := newContainerEnv(t, withConfig(func(_ *Daemon, c *config.Config) {
		row := *c.Handlers["runc"]
		row.RuntimeRoot = ""
		row.RuntimeArgs = append(slices.Clone(row.RuntimeArgs), "--criu", debianCRIU)
		c.Handlers["runc-oldcriu"] = &row
	}))
	d := e.d
	ctx := ctxT(t)
	podID, pod := e.pod("checkpoint-runc", "runc")
	ctr := e.run(podID, pod, e.ctrConfig("sleeper", "sleep", "1000"))
	out := t.TempDir()
	location := filepath.Join(out, "sleeper.tar")
	checkpoint := func(id, location string) error {
		return d.RS.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: location, Timeout: 60})
	}
	assertRunning := func(id string) {
		t.Helper()
		resp, err := d.RS.ContainerStatus(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s is %v after the checkpoint, want RUNNING", id[:12], resp.Status.State)
		}
		if got, _ := e.exec(id, "echo", "alive"); got != "alive" {
			t.Errorf("exec after the checkpoint: %q", got)
		}
	}

	if why := criuCheck(t, "criu"); why != "" {
		t.Fatalf("CRIU in PATH does not work on this node (%s): make test installs CRIU 4.1.1 (hack/tools.sh install-criu)", why)
	}
	if err := checkpoint(ctr, location); err != nil {
		t.Fatalf("CheckpointContainer: %v", err)
	}
	entries := readTar(t, location)
	for _, name := range []string{"checkpoint/", "checkpoint/inventory.img", "config.dump", "spec.dump", "dump.log"} {
		if _, ok := entries[name]; !ok {
			t.Errorf("archive has no %s (has %d entries)", name, len(entries))
		}
	}
	var cfg struct {
		ID      string `json:"id"`
		Name    string `json:"name"`
		Runtime string `json:"runtime"`
	}
	if err := json.Unmarshal(entries["config.dump"], &cfg); err != nil || cfg.ID != ctr || cfg.Runtime != "runc" {
		t.Errorf("config.dump %s: %v", entries["config.dump"], err)
	}
	var spec struct {
		Process struct {
			Args []string `json:"args"`
		} `json:"process"`
	}
	if err := json.Unmarshal(entries["spec.dump"], &spec); err != nil || strings.Join(spec.Process.Args, " ") != "sleep 1000" {
		t.Errorf("spec.dump process %v: %v", spec.Process.Args, err)
	}
	if fi, err := os.Stat(location); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("archive mode %v: %v", fi.Mode(), err)
	}
	if err := checkpoint(ctr, location); status.Code(err) != codes.AlreadyExists {
		t.Errorf("checkpoint over an existing archive: %v", err)
	}
	assertRunning(ctr)

	t.Run("failing CRIU", func(t *testing.T) {
		why := criuCheck(t, debianCRIU)
		if why == "" || why == debianCRIU {
			t.Skipf("Debian's CRIU works on this node or is not installed (%q): no failing CRIU to check the refusal with", why)
		}
		podID, pod := e.pod("checkpoint-oldcriu", "runc-oldcriu")
		id := e.run(podID, pod, e.ctrConfig("sleeper", "sleep", "1000"))
		dir := t.TempDir()
		err := checkpoint(id, filepath.Join(dir, "old.tar"))
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(msg, why) || !strings.Contains(msg, id) {
			t.Errorf("CheckpointContainer: %v, want FailedPrecondition naming the container and CRIU's reason %q", err, why)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("a refused checkpoint left %d files beside the location (%s)", len(left), left[0].Name())
		}
		assertRunning(id)
		if err := d.RS.RemovePodSandbox(ctx, podID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			name, id, location string
			code               codes.Code
			says               []string
		}{
			{"empty id", "", filepath.Join(out, "x.tar"), codes.InvalidArgument, []string{"container_id"}},
			{"unknown id", "0123456789abcdef", filepath.Join(out, "x.tar"), codes.NotFound, []string{"0123456789abcdef"}},
			{"empty location", ctr, "", codes.InvalidArgument, []string{"location"}},
			{"relative location", ctr, "x.tar", codes.InvalidArgument, []string{"location", `"x.tar"`}},
			{"no such directory", ctr, filepath.Join(out, "nodir", "x.tar"), codes.InvalidArgument, []string{"location", "nodir"}},
		} {
			wantRefused(t, tc.name, checkpoint(tc.id, tc.location), tc.code, tc.says...)
		}
		done := e.run(podID, pod, e.ctrConfig("done", "true"))
		e.waitExit(done)
		err := checkpoint(done, filepath.Join(out, "done.tar"))
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "exited") {
			t.Errorf("exited container: %v, want FailedPrecondition naming its state", err)
		}
	})

	// Kinds that cannot checkpoint a container refuse by the handler's name, and leave it
	// running.
	for _, tc := range []struct {
		handler string
		code    codes.Code
	}{{"runsc", codes.FailedPrecondition}, {"runc-shim", codes.Unimplemented}} {
		t.Run(tc.handler, func(t *testing.T) {
			podID, pod := e.pod("checkpoint-"+tc.handler, tc.handler)
			id := e.run(podID, pod, e.ctrConfig("sleeper", "sleep", "1000"))
			err := checkpoint(id, filepath.Join(out, tc.handler+".tar"))
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), `handler "`+tc.handler+`"`) {
				t.Errorf("%v, want %v naming handler %q", err, tc.code, tc.handler)
			}
			assertRunning(id)
			if left, _ := os.ReadDir(out); len(left) > 1 || (len(left) == 1 && left[0].Name() != "sleeper.tar") {
				t.Errorf("a refused checkpoint left files: %v", left)
			}
			if err := d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// readTar returns a tar's entries by name (directories with no content).
func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s is not a readable tar: %v", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = b
	}
}
