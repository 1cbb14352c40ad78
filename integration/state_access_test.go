//go:build integration

package integration

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// nobodyReaches is what another local user (uid and gid 65534, no groups) may reach
// under the daemon's roots while a runc pod and a runc pod in a user namespace run, each
// with a container: "d <path>" for a directory it can enter, "f <path>" for a file it can
// read, "o <path>" for anything else it can read or write (a socket, a FIFO). Container,
// pod and layer IDs read <id>. Each entry says who needs it.
var nobodyReaches = map[string]string{
	// The roots are searchable (0711, as containerd's): a pod user namespace's root is
	// another user on the node, and runc 1.1 reaches the pod's files and the container's
	// rootfs as that user.
	"d run":                          "the run root: containers/<id>/userns and sandboxes/<id>/tmpfs below it; the CRI socket in it is 0660",
	"d run/containers":               "containers/<id>/userns/rootfs: a pod user namespace's rootfs bind",
	"d run/containers/<id>":          "its userns/ is a guard only the pod's root may enter (0700); nothing in it but init.pid is readable by others",
	"f run/containers/<id>/init.pid": "runc writes its --pid-file 0644: the container's PID, which /proc shows anyway",
	"d run/sandboxes":                "sandboxes/<id>/tmpfs: the pod's tmpfs, 0700 and owned by the pod's root in a user namespace",
	"d run/sandboxes/<id>":           "the same",
	"d run/runsc":                    "runsc makes its --root 0711 itself; nothing in it is reachable",
	"d run/runsc-debian":             "the same",
	"d state":                        "the state root: the pause rootfs is below it, whose rtshim-pause holds a pod's user namespace, started in it as the pod's root (nsfile.PinInUserNS; discovery checks the path, handlers.closedAncestor)",
	"d state/pause":                  "the same",
	"d state/pause/rootfs":           "the pause rootfs: an empty tree and rtshim-pause, a public program",
	"d state/pause/rootfs/dev":       "the same",
	"d state/pause/rootfs/etc":       "the same",
	"d state/pause/rootfs/proc":      "the same",
	"d state/pause/rootfs/sys":       "the same",
	"d state/pause/rootfs/tmp":       "the same",
	"f state/pause/rootfs/pause":     "the same",
	"d state/storage":                "the image store's graph root (0711): a pod user namespace's root passes it to its own layers, which containers/storage gives that user (rootfs, image volumes); every layer's directory is 0700, and so is rtshimd-rootfs",
	"d state/storage/overlay":        "the same, the overlay driver's home",
	"d state/storage/overlay/l":      "containers/storage's short links to the layers' diff directories, each behind its layer's 0700 directory",
	"f state/boot_id":                "the kernel's boot ID, world-readable in /proc/sys/kernel/random/boot_id",
	"f state/checkpoint-key.pub":     "the public half of the node's checkpoint signing key, for other nodes' checkpoints.trusted_keys (the key itself is 0600)",
}

// TestStateClosedToOthers (N2 of the 2026-11-26 audit): a container's writable layer is
// out of other local users' reach, and nothing else under the state and run roots is
// reachable by them beyond what nobodyReaches lists. A runc container writes a 0644 file
// and touches /tmp/x; then, as nobody, the file cannot be read through the layer's upper
// directory nor a file planted in its /tmp, and a walk of both roots finds only the
// listed paths. A layer directory an earlier release left searchable is closed at start.
func TestStateClosedToOthers(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (util-linux) runs the checks as nobody: %v", err)
	}
	e := newContainerEnv(t)
	ctx := ctxT(t)
	podID, pod := e.pod("closed", "runc")
	id := e.run(podID, pod, e.ctrConfig("app", "sh", "-c", "echo db-password=hunter2 > /secret.conf && chmod 0644 /secret.conf && touch /tmp/x && sleep 1000"))
	waitFor(t, 30*time.Second, "the container to write its files", func() (bool, string) {
		out, _ := e.exec(id, "sh", "-c", "test -e /tmp/x && cat /secret.conf")
		return out == "db-password=hunter2", out
	})
	// A pod in a user namespace: its root is another user on the node, who must reach its
	// rootfs and files; what it needs is in the walk too.
	upod := podConfig("closed-userns", runtimeapi.NamespaceMode_CONTAINER)
	upod.Linux.SecurityContext.NamespaceOptions.UsernsOptions = usernsOptions(200000)
	upodID, err := e.d.RS.RunPodSandbox(ctx, upod, "runc")
	if err != nil {
		t.Fatalf("RunPodSandbox(user namespace): %v", err)
	}
	ucfg := e.ctrConfig("app", "sleep", "1000")
	ucfg.Linux.SecurityContext.NamespaceOptions = upod.Linux.SecurityContext.NamespaceOptions
	uid := e.run(upodID, upod, ucfg)
	if out, _ := e.exec(uid, "sh", "-c", "touch /etc/written && echo ok"); out != "ok" {
		t.Errorf("the user-namespaced container writes its rootfs: %q", out)
	}

	layers := filepath.Join(e.d.State, "storage", "rtshimd-rootfs")
	upper := filepath.Join(layers, id, "upper")
	if b, err := os.ReadFile(filepath.Join(upper, "secret.conf")); err != nil || !strings.Contains(string(b), "hunter2") {
		t.Fatalf("the container's file in %s: %q %v", upper, b, err)
	}
	if out, err := asNobody("", "cat", filepath.Join(upper, "secret.conf")); err == nil || strings.Contains(out, "hunter2") {
		t.Errorf("nobody reads the container's file through its upper dir: %q (err %v)", out, err)
	}
	planted := filepath.Join(upper, "tmp", "planted")
	if out, err := asNobody("", "sh", "-c", "echo planted-by-nobody > "+planted); err == nil {
		t.Errorf("nobody writes into the container's /tmp through its upper dir: %q", out)
	}
	if _, err := os.Lstat(planted); err == nil {
		t.Errorf("%s exists", planted)
		_ = os.Remove(planted)
	}
	if out := findOpen(t, layers); out != "" {
		t.Errorf("searchable by others under %s:\n%s", layers, out)
	}

	got := reachedByNobody(t, map[string]string{"state": e.d.State, "run": e.d.RunRoot})
	var extra []string
	for _, p := range got {
		if _, ok := nobodyReaches[p]; !ok {
			extra = append(extra, p)
		}
	}
	if len(extra) > 0 {
		t.Errorf("nobody reaches what no one needs it to (add to nobodyReaches only with the reason):\n%s", strings.Join(extra, "\n"))
	}
	t.Logf("nobody reaches:\n%s", strings.Join(got, "\n"))

	// A layer an earlier release made searchable (0711) is closed at the next start, and
	// the container goes on.
	for _, d := range []string{layers, filepath.Join(layers, id)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	e.d.Restart(false)
	if out := findOpen(t, layers); out != "" {
		t.Errorf("after a restart on an earlier release's layers, searchable by others under %s:\n%s", layers, out)
	}
	if out, _ := e.exec(id, "sh", "-c", "cat /secret.conf && touch /tmp/y && echo ok"); out != "db-password=hunter2\nok" {
		t.Errorf("the container after the restart: %q", out)
	}
	for _, p := range []string{upodID, podID} {
		if err := e.d.RS.StopPodSandbox(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := e.d.RS.RemovePodSandbox(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
}

// asNobody runs args as uid and gid 65534 with no supplementary groups, stdin in.
func asNobody(stdin string, args ...string) (string, error) {
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// findOpen is what `find dir -maxdepth 1 -perm /o+x` prints: dir and its entries that
// others may search.
func findOpen(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("find", dir, "-maxdepth", "1", "-perm", "/o+x").CombinedOutput()
	if err != nil {
		t.Fatalf("find %s: %v: %s", dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

var hexID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// reachedByNobody walks each root (by name) as root, then has nobody test every path
// found with access(2): the directories it can enter ("d"), the files it can read ("f"),
// the other files it can read or write ("o"), sorted, as "<kind> <name>/<path>" with each
// 64-hex-digit component as <id>. Symbolic links are not followed (what they name is in
// the walk, or outside the roots).
func reachedByNobody(t *testing.T, roots map[string]string) []string {
	t.Helper()
	var paths []string
	name := map[string]string{}
	for n, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink != 0 {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			parts := strings.Split(filepath.Join(n, rel), "/")
			for i, c := range parts {
				if hexID.MatchString(c) {
					parts[i] = "<id>"
				}
			}
			name[p] = strings.Join(parts, "/")
			paths = append(paths, p)
			return nil
		})
	}
	const script = `while IFS= read -r p; do
	if [ -d "$p" ]; then [ -x "$p" ] && printf 'd %s\n' "$p"
	elif [ -f "$p" ]; then [ -r "$p" ] && printf 'f %s\n' "$p"
	elif [ -r "$p" ] || [ -w "$p" ]; then printf 'o %s\n' "$p"
	fi
done; true`
	out, err := asNobody(strings.Join(paths, "\n")+"\n", "bash", "-c", script)
	if err != nil {
		t.Fatalf("walk as nobody: %v: %s", err, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		kind, p, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		got = append(got, kind+" "+name[p])
	}
	slices.Sort(got)
	return slices.Compact(got)
}
