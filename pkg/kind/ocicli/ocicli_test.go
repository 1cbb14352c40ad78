package ocicli

import (
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/rtshimd/rtshimd/pkg/kind"
	"github.com/rtshimd/rtshimd/pkg/oci"
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
	row := &oci.Runtime{Handler: "h", Path: "/bin/true", Root: "/run/x"}
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
	row := &oci.Runtime{Handler: "h"}
	if r := NewOCI(row, Options{}); r.Type() != kind.OCI || !r.Plan().PinIPCUTS || r.Plan().SandboxContainer || r.Plan().PodLimits {
		t.Errorf("oci: type %s plan %+v", r.Type(), r.Plan())
	}
	if r := NewSandbox(row, Options{}); r.Type() != kind.OCISandbox || r.Plan().PinIPCUTS || !r.Plan().SandboxContainer || !r.Plan().PodLimits || r.Plan().HostNamespaces {
		t.Errorf("oci-sandbox: type %s plan %+v", r.Type(), r.Plan())
	}
}
