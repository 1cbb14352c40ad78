package oci

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func mountAt(s *specs.Spec, dest string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dest {
			return &s.Mounts[i]
		}
	}
	return nil
}

func TestSandboxContainerSpec(t *testing.T) {
	oom := -998
	ns := []specs.LinuxNamespace{
		{Type: specs.NetworkNamespace, Path: "/run/x/ns/net"},
		{Type: specs.PIDNamespace},
		{Type: specs.MountNamespace},
	}
	o := SandboxContainerOptions{
		ID: "id1", Rootfs: "/pause/rootfs", Args: []string{"/pause"}, Hostname: "web-0",
		Namespaces: ns, CgroupsPath: "/kubepods/id1", OOMScoreAdj: &oom,
		Annotations: map[string]string{AnnotationContainerType: ContainerTypeSandbox},
		Sysctls:     map[string]string{"net.ipv4.ip_forward": "1"},
		User:        specs.User{UID: 65535, GID: 65535},
		ShmPath:     "/run/x/shm",
	}
	s := SandboxContainerSpec(o)
	if s.Version != SpecVersion || s.Hostname != "web-0" {
		t.Errorf("version %q hostname %q", s.Version, s.Hostname)
	}
	if s.Root == nil || s.Root.Path != "/pause/rootfs" || !s.Root.Readonly {
		t.Errorf("root = %+v, want /pause/rootfs read-only", s.Root)
	}
	p := s.Process
	if !p.NoNewPrivileges {
		t.Error("NoNewPrivileges not set")
	}
	if c := p.Capabilities; c == nil || len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) != 0 {
		t.Errorf("capabilities = %+v, want present and empty", c)
	}
	if !reflect.DeepEqual(p.Args, []string{"/pause"}) || !reflect.DeepEqual(p.User, o.User) || p.OOMScoreAdj == nil || *p.OOMScoreAdj != -998 {
		t.Errorf("process = %+v", p)
	}
	if !reflect.DeepEqual(s.Linux.Namespaces, ns) {
		t.Errorf("namespaces = %+v, want %+v", s.Linux.Namespaces, ns)
	}
	if s.Linux.CgroupsPath != "/kubepods/id1" || s.Linux.Sysctl["net.ipv4.ip_forward"] != "1" {
		t.Errorf("linux = %+v", s.Linux)
	}
	if !reflect.DeepEqual(s.Linux.MaskedPaths, DefaultMaskedPaths) || !reflect.DeepEqual(s.Linux.ReadonlyPaths, DefaultReadonlyPaths) {
		t.Errorf("masked %q readonly %q", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	for _, want := range []string{"/proc/kcore", "/sys/firmware"} {
		if !contains(s.Linux.MaskedPaths, want) {
			t.Errorf("masked paths lack %s", want)
		}
	}
	if !contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Error("readonly paths lack /proc/sys")
	}
	if s.Annotations[AnnotationContainerType] != ContainerTypeSandbox {
		t.Errorf("annotations = %v", s.Annotations)
	}
	shm := mountAt(s, "/dev/shm")
	if shm == nil || shm.Type != "bind" || shm.Source != "/run/x/shm" || !contains(shm.Options, "rbind") {
		t.Errorf("/dev/shm = %+v, want a bind of /run/x/shm", shm)
	}
	if sys := mountAt(s, "/sys"); sys == nil || sys.Type != "sysfs" || !contains(sys.Options, "ro") {
		t.Errorf("/sys = %+v, want a read-only sysfs", sys)
	}
	// In a pod user namespace on the node's network, the node's /sys (SysMount).
	o.IDMappings = &IDMappings{UIDs: []specs.LinuxIDMapping{{HostID: 200000, Size: 65536}}}
	if sys := mountAt(SandboxContainerSpec(o), "/sys"); sys == nil || sys.Type != "sysfs" {
		t.Errorf("/sys in a user namespace with a network namespace = %+v, want sysfs", sys)
	}
	o.Namespaces = ns[1:]
	if sys := mountAt(SandboxContainerSpec(o), "/sys"); sys == nil || sys.Type != "bind" || sys.Source != "/sys" || !contains(sys.Options, "rro") || !contains(sys.Options, "ro") {
		t.Errorf("/sys in a user namespace on the node's network = %+v, want the node's, recursively read-only", sys)
	}

	if s.Linux.Seccomp != nil {
		t.Errorf("seccomp = %+v without one asked", s.Linux.Seccomp)
	}
	o.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActErrno}
	if got := SandboxContainerSpec(o).Linux.Seccomp; got != o.Seccomp {
		t.Errorf("seccomp = %+v, want the pod's %+v", got, o.Seccomp)
	}

	o.ShmPath = ""
	shm = mountAt(SandboxContainerSpec(o), "/dev/shm")
	if shm == nil || shm.Type != "tmpfs" || contains(shm.Options, "rbind") {
		t.Errorf("/dev/shm without ShmPath = %+v, want tmpfs", shm)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestWriteBundle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	spec := SandboxContainerSpec(SandboxContainerOptions{ID: "x", Rootfs: "/r", Args: []string{"/pause"}})
	if err := WriteBundle(dir, spec); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got specs.Spec
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Root.Path != "/r" || got.Version != SpecVersion || !got.Root.Readonly {
		t.Errorf("config.json = %s", b)
	}
}

// Under the systemd driver crun is told to keep the container in its scope (no
// "container" subgroup), as runc does; a value the pod set is kept, and the cgroupfs
// driver's paths get no annotation.
func TestScopeIsCgroup(t *testing.T) {
	base := SandboxContainerOptions{ID: "id1", Rootfs: "/r", Args: []string{"/pause"},
		Annotations: map[string]string{AnnotationContainerType: ContainerTypeSandbox}}
	for _, tt := range []struct {
		path, set string
		want      string
		has       bool
	}{
		{path: "kubepods-pod1.slice:rtshimd:id1", want: "", has: true},
		{path: "kubepods-pod1.slice:rtshimd:id1", set: "mine", want: "mine", has: true},
		{path: "/kubepods/id1", has: false},
	} {
		o := base
		o.CgroupsPath = tt.path
		o.Annotations = map[string]string{AnnotationContainerType: ContainerTypeSandbox}
		if tt.set != "" {
			o.Annotations[crunSubgroupAnnotation] = tt.set
		}
		s := SandboxContainerSpec(o)
		got, has := s.Annotations[crunSubgroupAnnotation]
		if has != tt.has || got != tt.want {
			t.Errorf("%s (set %q): annotation %q %v, want %q %v", tt.path, tt.set, got, has, tt.want, tt.has)
		}
		if s.Annotations[AnnotationContainerType] != ContainerTypeSandbox {
			t.Errorf("%s: other annotations lost: %v", tt.path, s.Annotations)
		}
	}
	if _, has := base.Annotations[crunSubgroupAnnotation]; has {
		t.Error("the caller's annotations were changed")
	}
}
