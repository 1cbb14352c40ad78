package ocicli

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rtshimd/rtshimd/internal/kind"
)

// runcShape is a container spec's namespaces as the spec builder makes them: the pod's
// joined by path, a shared PID namespace, a cgroup namespace (cgroup v2).
func runcShape() *specs.Spec {
	return &specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{
		{Type: specs.PIDNamespace, Path: "/proc/42/ns/pid"},
		{Type: specs.NetworkNamespace, Path: "/run/rtshimd/sb1/ns/net"},
		{Type: specs.IPCNamespace, Path: "/run/rtshimd/sb1/ns/ipc"},
		{Type: specs.UTSNamespace, Path: "/run/rtshimd/sb1/ns/uts"},
		{Type: specs.MountNamespace},
		{Type: specs.CgroupNamespace},
	}}}
}

func TestAdjustSpec(t *testing.T) {
	row := &kind.Row{Handler: "h", Path: "/bin/true", Root: "/run/x"}
	// The runc family runs the spec as built.
	s := runcShape()
	NewOCI(row, Options{}).AdjustSpec(s)
	if !reflect.DeepEqual(s, runcShape()) {
		t.Errorf("oci kind changed the spec: %+v", s.Linux.Namespaces)
	}
	// A sandbox runtime's containers join its sandbox: the netns path stays, and a shared
	// PID namespace's (runsc joins its root PID namespace by it; without a path, a new one).
	s = runcShape()
	NewSandbox(row, Options{}).AdjustSpec(s)
	want := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace, Path: "/proc/42/ns/pid"}, {Type: specs.NetworkNamespace, Path: "/run/rtshimd/sb1/ns/net"},
		{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
	}
	if !reflect.DeepEqual(s.Linux.Namespaces, want) {
		t.Errorf("oci-sandbox namespaces = %+v\nwant %+v", s.Linux.Namespaces, want)
	}
}

func TestPlanAndType(t *testing.T) {
	row := &kind.Row{Handler: "h"}
	if r := NewOCI(row, Options{}); r.Type() != kind.OCI || !r.Plan().PinIPCUTS || r.Plan().SandboxContainer || r.Plan().PodLimits {
		t.Errorf("oci: type %s plan %+v", r.Type(), r.Plan())
	}
	if r := NewSandbox(row, Options{}); r.Type() != kind.OCISandbox || r.Plan().PinIPCUTS || !r.Plan().SandboxContainer || !r.Plan().PodLimits || r.Plan().HostNamespaces {
		t.Errorf("oci-sandbox: type %s plan %+v", r.Type(), r.Plan())
	}
}

func TestPathMountsForGVisor(t *testing.T) {
	rootfs := t.TempDir()
	for _, d := range []string{"tmp", "bin", "data", "etc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin/ls"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	// A symlink out of the rootfs is resolved inside it.
	if err := os.Symlink("/etc", filepath.Join(rootfs, "escape")); err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{Root: &specs.Root{Path: rootfs}, Linux: &specs.Linux{
		ReadonlyPaths: []string{"/tmp", "/proc/sys", "/missing", "/escape"},
		MaskedPaths:   []string{"/bin/ls", "/data", "/proc/kcore", "/sys/firmware"},
	}}
	got := map[string]specs.Mount{}
	for _, m := range pathMounts(spec) {
		got[m.Destination] = m
	}
	if len(got) != 4 {
		t.Fatalf("mounts %+v, want /tmp, /escape, /bin/ls, /data", got)
	}
	if m := got["/tmp"]; m.Type != "bind" || m.Source != filepath.Join(rootfs, "tmp") || !slices.Contains(m.Options, "ro") {
		t.Errorf("read-only /tmp: %+v", m)
	}
	if m := got["/escape"]; m.Source != filepath.Join(rootfs, "etc") {
		t.Errorf("a symlink led out of the rootfs: %+v", m)
	}
	if m := got["/bin/ls"]; m.Source != "/dev/null" || !slices.Contains(m.Options, "ro") {
		t.Errorf("masked file: %+v", m)
	}
	if m := got["/data"]; m.Type != "tmpfs" || !slices.Contains(m.Options, "ro") {
		t.Errorf("masked dir: %+v", m)
	}
}

// fakeRuntime is a runtime binary that records its arguments, one call per line.
func fakeRuntime(t *testing.T) (path, calls string) {
	dir := t.TempDir()
	path, calls = filepath.Join(dir, "runtime"), filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, calls
}

// A kill of every process signals the init itself, then --all: runc's --all alone finds
// nothing under its systemd driver on cgroup v1. A sandbox runtime's kill is one call.
func TestKillAllSignalsTheInitFirst(t *testing.T) {
	for _, tt := range []struct {
		sandboxed bool
		all       bool
		want      []string
	}{
		{false, true, []string{"kill c1 SIGKILL", "kill --all c1 SIGKILL"}},
		{false, false, []string{"kill c1 SIGTERM"}},
		{true, true, []string{"kill c1 SIGKILL"}},
	} {
		path, calls := fakeRuntime(t)
		row := &kind.Row{Handler: "h", Path: path}
		r := NewOCI(row, Options{})
		if tt.sandboxed {
			r = NewSandbox(row, Options{})
		}
		sig := "SIGKILL"
		if !tt.all {
			sig = "SIGTERM"
		}
		if err := r.Kill(t.Context(), kind.Task{ID: "c1"}, sig, tt.all); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(calls)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			got = append(got, line[strings.Index(line, "kill"):]) // after the global arguments
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("sandboxed=%v all=%v: runtime called with %q, want %q", tt.sandboxed, tt.all, got, tt.want)
		}
	}
}

// The monitor is given runc's exec FIFO only for runc's containers, not for a sandbox
// runtime's or a sandbox container (poststart hooks are the monitor's to find in the
// bundle: TestMonitorExecFifoStart); `features` is asked until it answers, and crun's (no
// runc version) is not runc.
func TestExecFifo(t *testing.T) {
	dir := t.TempDir()
	script := func(name, annotations string) string {
		p := filepath.Join(dir, name)
		// The first features call fails: it is asked again at the next create.
		body := "#!/bin/sh\nfor a; do [ \"$a\" = features ] || continue\n" +
			"if [ ! -e " + p + ".asked ]; then touch " + p + ".asked; exit 1; fi\n" +
			"echo '{\"ociVersionMin\":\"1.0.0\",\"annotations\":{" + annotations + "}}'; exit 0; done\nexit 1\n"
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	runc := &kind.Row{Handler: "runc", Path: script("runc", `"org.opencontainers.runc.version":"1.1.5"`), Root: "/run/r"}
	crun := &kind.Row{Handler: "crun", Path: script("crun", `"run.oci.crun.version":"1.8"`), Root: "/run/c"}
	ctx := t.Context()
	r := NewOCI(runc, Options{})
	if got := r.execFifo(ctx, kind.Task{ID: "c1"}); got != "" {
		t.Errorf("exec FIFO after a failed features call: %q", got)
	}
	if got := r.execFifo(ctx, kind.Task{ID: "c1"}); got != "/run/r/c1/exec.fifo" {
		t.Errorf("exec FIFO = %q, want /run/r/c1/exec.fifo", got)
	}
	for name, tc := range map[string]struct {
		r *Runtime
		t kind.Task
	}{
		"sandbox container": {r, kind.Task{ID: "c1", Sandbox: true}},
		"sandbox runtime":   {NewSandbox(runc, Options{}), kind.Task{ID: "c1"}},
		"crun":              {NewOCI(crun, Options{}), kind.Task{ID: "c1"}},
	} {
		tc.r.execFifo(ctx, tc.t) // past the failed first features call
		if got := tc.r.execFifo(ctx, tc.t); got != "" {
			t.Errorf("%s: exec FIFO %q, want none", name, got)
		}
	}
}
