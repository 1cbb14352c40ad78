package ocicli

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
	// A sandbox runtime's containers join its sandbox: only the netns path stays.
	s = runcShape()
	NewSandbox(row, Options{}).AdjustSpec(s)
	want := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace, Path: "/run/rtshimd/sb1/ns/net"},
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
