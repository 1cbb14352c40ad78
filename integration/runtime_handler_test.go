//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// assertNoSandboxes checks that a refused request left no record, directory or mount.
func assertNoSandboxes(t *testing.T, d *Daemon) {
	t.Helper()
	items, err := d.RS.ListPodSandbox(ctxT(t), nil)
	if err != nil || len(items) != 0 {
		t.Errorf("ListPodSandbox after refusal: %d items, %v", len(items), err)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.RunRoot, "sandboxes")); len(entries) > 0 {
		t.Errorf("refused sandbox left %s/%s", filepath.Join(d.RunRoot, "sandboxes"), entries[0].Name())
	}
	if left := stateEntries(filepath.Join(d.State, "sandboxes")); len(left) > 0 {
		t.Errorf("refused sandbox left records %v", left)
	}
	if m := slices.DeleteFunc(mountsUnder(d.RunRoot), func(p string) bool { return isStoreMount(d, p) }); len(m) > 0 {
		t.Errorf("refused sandbox left mounts %v", m)
	}
}

func TestUnknownHandler(t *testing.T) {
	d := newDaemon(t)
	_, err := d.RS.RunPodSandbox(ctxT(t), podConfig("unknown", runtimeapi.NamespaceMode_CONTAINER), "no-such-handler")
	if status.Code(err) != codes.NotFound {
		t.Fatalf("RunPodSandbox with unknown handler: %v, want NotFound", err)
	}
	msg := status.Convert(err).Message()
	for _, want := range []string{`"no-such-handler"`, "ghost", "runc", "runsc"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	assertNoSandboxes(t, d)
}

func TestMissingRuntimeBinary(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	_, err := d.RS.RunPodSandbox(ctx, podConfig("ghostpod", runtimeapi.NamespaceMode_CONTAINER), "ghost")
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("RunPodSandbox on a handler whose binary is missing: %v, want FailedPrecondition", err)
	}
	msg := status.Convert(err).Message()
	if !strings.Contains(msg, `"ghost"`) || !strings.Contains(msg, "/opt/rtshimd-test/no-such-runtime") || !strings.Contains(msg, "not installed") {
		t.Errorf("error %q should name the handler, the binary and why", msg)
	}
	assertNoSandboxes(t, d)

	// Status lists the ready handlers only, the default also under "".
	st, err := d.RS.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range st.RuntimeHandlers {
		names = append(names, h.Name)
	}
	// runsc-shim is ready only where a shim may lower its oom_score_adj (not this host).
	if got := strings.Join(names, ","); got != ",runc,runc-shim,runsc,runsc-debian" && got != ",runc,runc-shim,runsc,runsc-debian,runsc-shim" {
		t.Errorf("runtime_handlers = %q, want \",runc,runc-shim,runsc,runsc-debian[,runsc-shim]\"", names)
	}
	// The verbose info has the whole table, the not-ready handler with its reason.
	table, err := handlerRows(st)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, h := range table {
		if h.Name == "ghost" {
			found = true
			if h.Ready || !strings.Contains(h.Reason, "not installed") {
				t.Errorf("ghost handler: ready %v reason %q", h.Ready, h.Reason)
			}
		}
	}
	if !found {
		t.Error("ghost handler missing from verbose Status info")
	}
}

func TestStatusAndRuntimeConfig(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	st, err := d.RS.Status(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	conds := map[string]*runtimeapi.RuntimeCondition{}
	for _, c := range st.Status.Conditions {
		conds[c.Type] = c
	}
	if c := conds[runtimeapi.RuntimeReady]; c == nil || !c.Status {
		t.Errorf("RuntimeReady = %v", c)
	}
	if c := conds[runtimeapi.NetworkReady]; c == nil || c.Status || c.Reason == "" || c.Message == "" {
		t.Errorf("NetworkReady = %v, want false with a reason until networking exists", c)
	}
	if len(st.Info) != 0 {
		t.Errorf("non-verbose Status has info %v", st.Info)
	}
	features := map[string]*runtimeapi.RuntimeHandlerFeatures{}
	for _, h := range st.RuntimeHandlers {
		features[h.Name] = h.Features
	}
	if features[""] == nil || features["runc"] == nil || features[""].String() != features["runc"].String() {
		t.Errorf("default handler \"\" should carry runc's features: %v", features)
	}
	// Pod user namespaces where rtshimd makes the pod's namespaces and runc can join them;
	// gVisor makes its own (TestUserNamespaces runs them).
	for name, want := range map[string]bool{"runc": true, "runsc": false, "runsc-debian": false} {
		if f := features[name]; f == nil || f.UserNamespaces != want {
			t.Errorf("handler %q: user_namespaces = %v, want %v", name, f.GetUserNamespaces(), want)
		}
	}
	rc, err := d.RS.RuntimeConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rc.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_CGROUPFS {
		t.Errorf("cgroup driver = %v", rc.GetLinux().GetCgroupDriver())
	}
	v, err := d.RS.Version(ctx, "v1")
	if err != nil || v.RuntimeName != "rtshimd" || v.RuntimeApiVersion != "v1" {
		t.Errorf("Version = %v, %v", v, err)
	}
}

// A pod that asks for what its handler cannot do is refused at RunPodSandbox, naming the
// feature and the handler, and nothing is made.
func TestHandlerRefusesUnsupportedFeatures(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	cases := []struct {
		name, handler, feature string
		mutate                 func(*runtimeapi.NamespaceOption)
	}{
		{"host-pid-on-runsc", "runsc", "host_pid", func(o *runtimeapi.NamespaceOption) { o.Pid = runtimeapi.NamespaceMode_NODE }},
		{"host-ipc-on-runsc", "runsc", "host_ipc", func(o *runtimeapi.NamespaceOption) { o.Ipc = runtimeapi.NamespaceMode_NODE }},
		{"userns-on-runsc", "runsc", "user_namespaces", func(o *runtimeapi.NamespaceOption) {
			o.UsernsOptions = usernsOptions(300000)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := podConfig(tc.name, runtimeapi.NamespaceMode_CONTAINER)
			tc.mutate(cfg.Linux.SecurityContext.NamespaceOptions)
			_, err := d.RS.RunPodSandbox(ctx, cfg, tc.handler)
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("got %v, want FailedPrecondition", err)
			}
			msg := status.Convert(err).Message()
			if !strings.Contains(msg, `"`+tc.handler+`"`) || !strings.Contains(msg, tc.feature) {
				t.Errorf("error %q should name handler %q and feature %s", msg, tc.handler, tc.feature)
			}
			assertNoSandboxes(t, d)
		})
	}

	// Host namespaces on the runc family are fine: the pod uses the node's.
	t.Run("host-namespaces-on-runc", func(t *testing.T) {
		cfg := podConfig("hostns", runtimeapi.NamespaceMode_NODE)
		cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
		cfg.Linux.SecurityContext.NamespaceOptions.Ipc = runtimeapi.NamespaceMode_NODE
		id, err := d.RS.RunPodSandbox(ctx, cfg, "runc")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := d.RS.PodSandboxStatus(ctx, id, true)
		if err != nil {
			t.Fatal(err)
		}
		info := decodeInfo(t, resp.Info)
		if info.Metadata.NetNS != "" || info.Metadata.IPCNS != "" || info.Metadata.UTSNS != "" || info.Metadata.Shm != "" {
			t.Errorf("host-namespace pod pinned namespaces or shm: %+v", info.Metadata)
		}
		host, _ := os.Hostname()
		if b, _ := os.ReadFile(filepath.Join(podFilesDir(info), "hostname")); strings.TrimSpace(string(b)) != host {
			t.Errorf("host-network pod hostname = %q, want the node's %q", b, host)
		}
		if err := d.RS.RemovePodSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	})
	// runsc runs host-network pods: the kind gives the sandbox --network=host (the node's stack).
	t.Run("host-network-on-runsc", func(t *testing.T) {
		cfg := podConfig("hostnet-runsc", runtimeapi.NamespaceMode_CONTAINER)
		cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
		id, err := d.RS.RunPodSandbox(ctx, cfg, "runsc")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := d.RS.PodSandboxStatus(ctx, id, true)
		if err != nil {
			t.Fatal(err)
		}
		info := decodeInfo(t, resp.Info)
		if !sameFile("/proc/self/ns/net", "/proc/"+itoa(info.Status.InfraPid)+"/ns/net") {
			t.Errorf("runsc host-network sandbox is not in the node's netns")
		}
		if err := d.RS.RemovePodSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	})
	removeTestCgroups(t)
}

// TestRtshimdHandlersCommand: `rtshimd handlers` prints the table a person reads.
func TestRtshimdHandlersCommand(t *testing.T) {
	d := newDaemon(t)
	out, err := exec.Command(filepath.Join(binDir, "rtshimd"), "handlers", "--config", d.Config).CombinedOutput()
	if err != nil {
		t.Fatalf("rtshimd handlers: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 10 || !strings.HasPrefix(strings.Join(strings.Fields(lines[0]), " "), "NAME TYPE") {
		t.Fatalf("want a header with the kind, 6 rows, one discovery note, NRI's line and the node labels', got:\n%s", out)
	}
	// No [node] kubeconfig in the harness: the labels are said, not written.
	if l := lines[9]; !strings.HasPrefix(l, "node labels: not written ([node] kubeconfig is empty); they would be: ") ||
		!strings.Contains(l, "runtime.rtshimd.io/runc=true") || strings.Contains(l, "runtime.rtshimd.io/ghost") || strings.Contains(l, "features.runtime.rtshimd.io/runsc.host-pid") {
		t.Errorf("node labels line %q", l)
	}
	// The harness' daemon has NRI on with its own socket and no plugin installed.
	if want := "nri: on, socket " + filepath.Join(filepath.Dir(d.Config), "nri.sock") + "; plugins started from "; !strings.HasPrefix(lines[8], want) || !strings.HasSuffix(lines[8], ": none") {
		t.Errorf("NRI line %q, want %q...: none", lines[8], want)
	}
	// Debian's 2022 runsc: host networking found by discovery, and said.
	if note := lines[7]; !strings.HasPrefix(note, "runsc-debian: runs with --network=host:") || !strings.Contains(note, "root network namespace") {
		t.Errorf("runsc-debian's discovery note: %q", note)
	}
	lines = lines[:7]
	rows := map[string]string{}
	for _, l := range lines[1:] {
		rows[strings.Fields(l)[0]] = l
	}
	if r := rows["ghost"]; !strings.Contains(r, "not ready") || !strings.Contains(r, "not installed") {
		t.Errorf("ghost row: %q", r)
	}
	if r := rows["runc"]; strings.Fields(r)[2] != "oci" || !strings.Contains(r, "(default)") || !strings.Contains(r, "runc version") || !strings.HasSuffix(r, "ready") {
		t.Errorf("runc row: %q", r)
	}
	if r := rows["runsc"]; strings.Fields(r)[1] != "oci-sandbox" || !strings.Contains(r, "-host_pid") || !strings.HasSuffix(r, "ready") {
		t.Errorf("runsc row: %q", r)
	}
	if r := rows["runc-shim"]; strings.Fields(r)[1] != "shim-v2" || !strings.Contains(r, "containerd-shim-runc-v2 1.") || !strings.HasSuffix(r, "ready") {
		t.Errorf("runc-shim row: %q", r)
	}
	// gVisor's shim: ready where rtshimd may lower a shim's oom_score_adj; on a node whose
	// root cannot (this test host: no CAP_SYS_RESOURCE, no systemd), not ready, saying why.
	if r := rows["runsc-shim"]; strings.Fields(r)[1] != "shim-v2" || !strings.Contains(r, "containerd-shim-runsc-v1 ") ||
		!(strings.HasSuffix(r, " ready") || strings.Contains(r, "not ready: ") && strings.Contains(r, "OOMScoreAdjust=-999")) {
		t.Errorf("runsc-shim row: %q", r)
	}
}

// handlerRow is a row of Status verbose info's "handlers".
type handlerRow struct {
	Name   string `json:"name"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
}

// handlerRows decodes Status verbose info's handler table.
func handlerRows(st *runtimeapi.StatusResponse) ([]handlerRow, error) {
	var rows []handlerRow
	if err := json.Unmarshal([]byte(st.GetInfo()["handlers"]), &rows); err != nil {
		return nil, fmt.Errorf("verbose handlers info %q: %w", st.GetInfo()["handlers"], err)
	}
	return rows, nil
}
