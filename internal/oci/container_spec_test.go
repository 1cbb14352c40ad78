package oci

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgcontrollers"
	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// testOptions is a plain unprivileged container in a pod with pinned namespaces.
func testOptions(t *testing.T) ContainerOptions {
	t.Helper()
	return ContainerOptions{
		ID: "c1",
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			Image:    &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.36"},
			Command:  []string{"sleep", "inf"},
			Linux:    &runtimeapi.LinuxContainerConfig{},
		},
		SandboxConfig: &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod", Namespace: "ns", Uid: "pod-uid"},
			Hostname: "podhost",
			Linux:    &runtimeapi.LinuxPodSandboxConfig{},
		},
		Rootfs:       testRootfs(t),
		SandboxID:    "sb1",
		NetNS:        "/run/rtshimd/netns/sb1",
		IPCNS:        "/run/rtshimd/ipcns/sb1",
		UTSNS:        "/run/rtshimd/utsns/sb1",
		HostnamePath: "/run/rtshimd/sb1/hostname",
		HostsPath:    "/run/rtshimd/sb1/hosts",
		ResolvPath:   "/run/rtshimd/sb1/resolv.conf",
		ShmPath:      "/run/rtshimd/sb1/shm",
		CgroupsPath:  "/kubepods/pod1/c1",
		Capabilities: AllCapabilities,
	}
}

func mustSpec(t *testing.T, o ContainerOptions) *specs.Spec {
	t.Helper()
	s, err := ContainerSpec(o)
	if err != nil {
		t.Fatalf("ContainerSpec: %v", err)
	}
	return s
}

// wantInvalid checks that err wraps ErrInvalidArgument and says want.
func wantInvalid(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one saying %q", want)
	}
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("error %v does not wrap ErrInvalidArgument", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
}

func TestProcessArgs(t *testing.T) {
	tests := []struct {
		name            string
		entrypoint, cmd []string
		command, args   []string
		want            []string
	}{
		{"image only", []string{"/ep"}, []string{"c1", "c2"}, nil, nil, []string{"/ep", "c1", "c2"}},
		{"image cmd only", nil, []string{"sh", "-c", "x"}, nil, nil, []string{"sh", "-c", "x"}},
		{"command replaces entrypoint and cmd", []string{"/ep"}, []string{"c1"}, []string{"/bin/true"}, nil, []string{"/bin/true"}},
		{"command and args", []string{"/ep"}, []string{"c1"}, []string{"/bin/echo"}, []string{"a", "b"}, []string{"/bin/echo", "a", "b"}},
		{"args replace cmd after entrypoint", []string{"/ep", "-v"}, []string{"c1"}, nil, []string{"a"}, []string{"/ep", "-v", "a"}},
		{"args without entrypoint", nil, []string{"c1"}, nil, []string{"sh", "-c", "y"}, []string{"sh", "-c", "y"}},
		{"empty entrypoint is cleared", []string{""}, []string{"c1"}, nil, nil, []string{"c1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{Command: tt.command, Args: tt.args}
			img := ocispec.ImageConfig{Entrypoint: tt.entrypoint, Cmd: tt.cmd}
			got, err := processArgs(cfg, img)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("args = %q, want %q", got, tt.want)
			}
		})
	}
	// The image's slices are not aliased by the result.
	img := ocispec.ImageConfig{Entrypoint: []string{"/ep"}}
	got, _ := processArgs(&runtimeapi.ContainerConfig{Args: []string{"a"}}, img)
	got[0] = "changed"
	if img.Entrypoint[0] != "/ep" {
		t.Error("processArgs writes into the image's Entrypoint")
	}

	o := testOptions(t)
	o.Config.Command = nil
	_, err := ContainerSpec(o)
	wantInvalid(t, err, "config.command is empty and the image has no ENTRYPOINT or CMD")
}

func TestProcessEnv(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{Envs: []*runtimeapi.KeyValue{
		{Key: "A", Value: []byte("9")}, {Key: "C", Value: []byte("x=y")}, {Key: "HOSTNAME", Value: []byte("mine")},
	}}
	img := ocispec.ImageConfig{Env: []string{"PATH=/opt/bin", "A=1", "B=2"}}
	got, err := processEnv(cfg, img, "podhost")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/opt/bin", "HOSTNAME=mine", "A=9", "B=2", "C=x=y"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env = %q, want %q", got, want)
	}

	got, err = processEnv(&runtimeapi.ContainerConfig{}, ocispec.ImageConfig{Env: []string{"X=1"}}, "podhost")
	if err != nil {
		t.Fatal(err)
	}
	want = []string{DefaultPathEnv, "HOSTNAME=podhost", "X=1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env = %q, want %q", got, want)
	}

	for _, key := range []string{"", "A=B"} {
		_, err := processEnv(&runtimeapi.ContainerConfig{Envs: []*runtimeapi.KeyValue{{Key: "OK"}, {Key: key}}}, ocispec.ImageConfig{}, "h")
		wantInvalid(t, err, `config.envs[1].key "`+key+`"`)
	}
}

func TestProcessCwd(t *testing.T) {
	tests := []struct{ config, image, want string }{
		{"", "", "/"},
		{"", "/srv", "/srv"},
		{"", "app", "/app"},
		{"/work/", "/srv", "/work"},
	}
	for _, tt := range tests {
		got, err := processCwd(&runtimeapi.ContainerConfig{WorkingDir: tt.config}, ocispec.ImageConfig{WorkingDir: tt.image})
		if err != nil || got != tt.want {
			t.Errorf("cwd(%q, %q) = %q, %v; want %q", tt.config, tt.image, got, err, tt.want)
		}
	}
	_, err := processCwd(&runtimeapi.ContainerConfig{WorkingDir: "rel"}, ocispec.ImageConfig{})
	wantInvalid(t, err, `config.working_dir "rel" is not an absolute path`)
}

func TestContainerSpecBasics(t *testing.T) {
	o := testOptions(t)
	o.Image = ocispec.ImageConfig{Env: []string{"FOO=bar"}, WorkingDir: "/srv", User: "alice"}
	o.Config.Tty = true
	o.Config.Annotations = map[string]string{
		"user.example/a":          "1",
		AnnotationSandboxID:       "someone-elses-sandbox",
		"io.kubernetes.cri.other": "x",
		"io.kubernetes.cri-o.Foo": "y",
	}
	o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{NoNewPrivs: true, ReadonlyRootfs: true}
	o.SandboxConfig.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}
	s := mustSpec(t, o)

	if s.Version != SpecVersion {
		t.Errorf("version %q", s.Version)
	}
	if s.Root == nil || s.Root.Path != o.Rootfs || !s.Root.Readonly {
		t.Errorf("root = %+v", s.Root)
	}
	p := s.Process
	if !reflect.DeepEqual(p.Args, []string{"sleep", "inf"}) || p.Cwd != "/srv" || !p.Terminal || !p.NoNewPrivileges {
		t.Errorf("process = %+v", p)
	}
	if !contains(p.Env, "FOO=bar") || !contains(p.Env, "HOSTNAME=podhost") {
		t.Errorf("env = %q", p.Env)
	}
	if p.User.UID != 1000 || p.User.GID != 1000 {
		t.Errorf("user = %+v", p.User)
	}
	if p.OOMScoreAdj == nil || *p.OOMScoreAdj != 0 {
		t.Errorf("oomScoreAdj = %v", p.OOMScoreAdj)
	}
	if s.Hostname != "podhost" {
		t.Errorf("hostname %q", s.Hostname)
	}
	if s.Linux.CgroupsPath != "/kubepods/pod1/c1" {
		t.Errorf("cgroupsPath %q", s.Linux.CgroupsPath)
	}
	if !reflect.DeepEqual(s.Linux.Sysctl, o.SandboxConfig.Linux.Sysctls) {
		t.Errorf("sysctl = %v", s.Linux.Sysctl)
	}
	s.Linux.Sysctl["x"] = "y"
	if _, ok := o.SandboxConfig.Linux.Sysctls["x"]; ok {
		t.Error("the spec's sysctls alias the sandbox config's")
	}
	wantAnn := map[string]string{
		"user.example/a":        "1",
		AnnotationContainerType: ContainerTypeContainer,
		AnnotationSandboxID:     "sb1",
		AnnotationSandboxName:   "pod",
		AnnotationSandboxNS:     "ns",
		AnnotationSandboxUID:    "pod-uid",
		AnnotationContainerName: "app",
		AnnotationImageName:     "docker.io/library/busybox:1.36",
		AnnotationCRIOType:      ContainerTypeContainer,
		AnnotationCRIOSandboxID: "sb1",
	}
	if !reflect.DeepEqual(s.Annotations, wantAnn) {
		t.Errorf("annotations = %v\nwant %v", s.Annotations, wantAnn)
	}
	if s.Linux.Seccomp != nil {
		t.Error("seccomp set without being asked for")
	}

	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"ociVersion":"1.0.2-dev"`) {
		t.Errorf("json: %s", data)
	}

	// Host network: no hostname of our own (the host's UTS namespace).
	o.HostNetwork = true
	if s := mustSpec(t, o); s.Hostname != "" {
		t.Errorf("host network hostname %q", s.Hostname)
	}
}

// kubelet sends the image's ID in image.image and the name the pod spec gives in
// user_specified_image: the annotation runtimes and tools read names the image as the
// user did, and older kubelets' image.image stays what it was.
func TestImageNameAnnotation(t *testing.T) {
	o := testOptions(t)
	o.Config.Image = &runtimeapi.ImageSpec{Image: "sha256:4d0c4c3c8e2f5b8a1e7b0f6a0d3f9c2b1a8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c", UserSpecifiedImage: "busybox:1.36"}
	if got := mustSpec(t, o).Annotations[AnnotationImageName]; got != "busybox:1.36" {
		t.Errorf("%s = %q, want the user_specified_image", AnnotationImageName, got)
	}
	o.Config.Image.UserSpecifiedImage = ""
	if got := mustSpec(t, o).Annotations[AnnotationImageName]; got != o.Config.Image.Image {
		t.Errorf("%s = %q without user_specified_image, want image.image", AnnotationImageName, got)
	}
}

func TestPrivilegedNeedsPrivilegedSandbox(t *testing.T) {
	o := testOptions(t)
	o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{Privileged: true}
	_, err := ContainerSpec(o)
	wantInvalid(t, err, "config.linux.security_context.privileged is true but the pod sandbox is not privileged")

	o.SandboxConfig.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
	if _, err := ContainerSpec(o); err != nil {
		t.Fatal(err)
	}
}

func TestCapabilities(t *testing.T) {
	limited := []string{"CAP_CHOWN", "CAP_KILL", "CAP_NET_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SYS_CHROOT"}
	tests := []struct {
		name       string
		add, drop  []string
		ambient    []string
		privileged bool
		node       []string
		want       []string
		wantAmb    []string
	}{
		{name: "default", node: AllCapabilities, want: DefaultCapabilities},
		{name: "add without prefix, any case", add: []string{"NET_ADMIN", "cap_sys_time"}, node: AllCapabilities,
			want: append(slices.Clone(DefaultCapabilities), "CAP_NET_ADMIN", "CAP_SYS_TIME")},
		{name: "drop", drop: []string{"chown", "CAP_KILL"}, node: AllCapabilities,
			want: slices.DeleteFunc(slices.Clone(DefaultCapabilities), func(c string) bool { return c == "CAP_CHOWN" || c == "CAP_KILL" })},
		{name: "add ALL gives what the node has", add: []string{"all"}, node: limited, want: limited},
		{name: "add ALL then drop one", add: []string{"ALL"}, drop: []string{"NET_ADMIN"}, node: limited,
			want: []string{"CAP_CHOWN", "CAP_KILL", "CAP_SETUID", "CAP_SETGID", "CAP_SYS_CHROOT"}},
		{name: "drop ALL then add", drop: []string{"ALL"}, add: []string{"NET_BIND_SERVICE"}, node: AllCapabilities,
			want: []string{"CAP_NET_BIND_SERVICE"}},
		{name: "drop ALL", drop: []string{"ALL"}, node: AllCapabilities, want: []string{}},
		{name: "beyond the node is dropped silently", add: []string{"SYS_ADMIN"}, node: limited,
			want: []string{"CAP_CHOWN", "CAP_KILL", "CAP_SETUID", "CAP_SETGID", "CAP_SYS_CHROOT"}},
		{name: "privileged gets the node's, never more", privileged: true, drop: []string{"CHOWN"}, node: limited, want: limited},
		{name: "privileged on a node granting all", privileged: true, node: nil, want: AllCapabilities},
		{name: "ambient", drop: []string{"ALL"}, ambient: []string{"NET_BIND_SERVICE"}, node: AllCapabilities,
			want: []string{"CAP_NET_BIND_SERVICE"}, wantAmb: []string{"CAP_NET_BIND_SERVICE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t)
			o.Capabilities = tt.node
			o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
				Privileged: tt.privileged,
				Capabilities: &runtimeapi.Capability{
					AddCapabilities: tt.add, DropCapabilities: tt.drop, AddAmbientCapabilities: tt.ambient,
				},
			}
			o.SandboxConfig.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: tt.privileged}
			c := mustSpec(t, o).Process.Capabilities
			sorted := func(l []string) []string { l = slices.Clone(l); slices.Sort(l); return l }
			want := sorted(tt.want)
			for name, got := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted} {
				if !reflect.DeepEqual(sorted(got), want) {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			if !reflect.DeepEqual(sorted(c.Ambient), sorted(tt.wantAmb)) || !reflect.DeepEqual(sorted(c.Inheritable), sorted(tt.wantAmb)) {
				t.Errorf("ambient %v inheritable %v, want %v", c.Ambient, c.Inheritable, tt.wantAmb)
			}
		})
	}

	for _, tt := range []struct {
		caps *runtimeapi.Capability
		want string
	}{
		{&runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN", "CAP_BOGUS"}},
			`config.linux.security_context.capabilities.add_capabilities[1] "CAP_BOGUS" is not a capability`},
		{&runtimeapi.Capability{DropCapabilities: []string{"nope"}},
			`config.linux.security_context.capabilities.drop_capabilities[0] "nope" is not a capability`},
		{&runtimeapi.Capability{AddAmbientCapabilities: []string{"bad"}},
			`add_ambient_capabilities[0] "bad" is not a capability`},
	} {
		o := testOptions(t)
		o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{Capabilities: tt.caps}
		_, err := ContainerSpec(o)
		wantInvalid(t, err, tt.want)
	}
}

func TestMounts(t *testing.T) {
	vol := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(vol, link); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t)
	o.Config.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/data/deep/er", HostPath: vol},
		{ContainerPath: "/data", HostPath: vol, Readonly: true},
		{ContainerPath: "/slave", HostPath: vol, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{ContainerPath: "/linked/", HostPath: link, MountOptions: []string{"noexec"}},
		{ContainerPath: "/rro", HostPath: vol, Readonly: true, RecursiveReadOnly: true},
	}
	o.RecursiveReadOnlyMounts = true
	s := mustSpec(t, o)

	want := map[string]specs.Mount{
		"/proc":            {Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		"/sys":             {Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		"/sys/fs/cgroup":   {Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		"/dev/shm":         {Destination: "/dev/shm", Type: "bind", Source: o.ShmPath, Options: []string{"rbind", "rprivate", "rw", "nosuid", "noexec", "nodev"}},
		"/etc/hosts":       {Destination: "/etc/hosts", Type: "bind", Source: o.HostsPath, Options: []string{"rbind", "rprivate", "rw", "nosuid", "nodev", "noexec"}},
		"/etc/hostname":    {Destination: "/etc/hostname", Type: "bind", Source: o.HostnamePath, Options: []string{"rbind", "rprivate", "ro", "nosuid", "nodev", "noexec"}},
		"/etc/resolv.conf": {Destination: "/etc/resolv.conf", Type: "bind", Source: o.ResolvPath, Options: []string{"rbind", "rprivate", "ro", "nosuid", "nodev", "noexec"}},
		"/data":            {Destination: "/data", Type: "bind", Source: vol, Options: []string{"rbind", "rprivate", "ro"}},
		"/data/deep/er":    {Destination: "/data/deep/er", Type: "bind", Source: vol, Options: []string{"rbind", "rprivate", "rw"}},
		"/slave":           {Destination: "/slave", Type: "bind", Source: vol, Options: []string{"rbind", "rslave", "rw"}},
		"/linked":          {Destination: "/linked", Type: "bind", Source: vol, Options: []string{"rbind", "rprivate", "rw", "noexec"}},
		"/rro":             {Destination: "/rro", Type: "bind", Source: vol, Options: []string{"rbind", "rprivate", "ro", "rro"}},
	}
	for dst, w := range want {
		got := mountAt(s, dst)
		if got == nil {
			t.Errorf("no mount at %s", dst)
			continue
		}
		if !reflect.DeepEqual(*got, w) {
			t.Errorf("mount %s = %+v, want %+v", dst, *got, w)
		}
	}
	for _, dst := range []string{"/dev", "/dev/pts", "/dev/mqueue"} {
		if mountAt(s, dst) == nil {
			t.Errorf("no mount at %s", dst)
		}
	}
	// One mount per destination, and parents before children.
	seen := map[string]int{}
	for i, m := range s.Mounts {
		if _, dup := seen[m.Destination]; dup {
			t.Errorf("two mounts at %s", m.Destination)
		}
		seen[m.Destination] = i
	}
	if seen["/data"] > seen["/data/deep/er"] {
		t.Errorf("/data/deep/er (%d) is mounted before /data (%d)", seen["/data/deep/er"], seen["/data"])
	}
	if s.Linux.RootfsPropagation != "rslave" {
		t.Errorf("rootfsPropagation %q, want rslave", s.Linux.RootfsPropagation)
	}

	// Bidirectional wins over host-to-container, in whichever order they come.
	o.Config.Mounts = append([]*runtimeapi.Mount{{ContainerPath: "/shared", HostPath: vol,
		Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}}, o.Config.Mounts...)
	s = mustSpec(t, o)
	if m := mountAt(s, "/shared"); m == nil || !contains(m.Options, "rshared") {
		t.Errorf("/shared = %+v", m)
	}
	if s.Linux.RootfsPropagation != "rshared" {
		t.Errorf("rootfsPropagation %q, want rshared", s.Linux.RootfsPropagation)
	}
}

func TestMountsReadonlyRootfsAndPrivateShm(t *testing.T) {
	o := testOptions(t)
	o.ShmPath = ""
	o.HostnamePath = ""
	o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true}
	s := mustSpec(t, o)
	if m := mountAt(s, "/etc/hosts"); m == nil || !contains(m.Options, "ro") {
		t.Errorf("/etc/hosts with a read-only rootfs = %+v", m)
	}
	if m := mountAt(s, "/dev/shm"); m == nil || m.Type != "tmpfs" {
		t.Errorf("/dev/shm without a pod shm = %+v", m)
	}
	if m := mountAt(s, "/etc/hostname"); m != nil {
		t.Errorf("/etc/hostname mounted without a pod file: %+v", m)
	}
	if s.Linux.RootfsPropagation != "" {
		t.Errorf("rootfsPropagation %q without propagating mounts", s.Linux.RootfsPropagation)
	}
}

func TestMountsOverrideDefaults(t *testing.T) {
	vol := t.TempDir()
	o := testOptions(t)
	o.Config.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/etc/hosts", HostPath: vol},
		{ContainerPath: "/dev", HostPath: vol},
		{ContainerPath: "/sys", HostPath: vol, Readonly: true},
	}
	s := mustSpec(t, o)
	for _, dst := range []string{"/etc/hosts", "/dev", "/sys"} {
		m := mountAt(s, dst)
		if m == nil || m.Source != vol || m.Type != "bind" {
			t.Errorf("%s = %+v, want the config's bind of %s", dst, m, vol)
		}
	}
	// A /dev of the config drops the default mounts under it (not the pod's /dev/shm).
	for _, dst := range []string{"/dev/pts", "/dev/mqueue"} {
		if m := mountAt(s, dst); m != nil {
			t.Errorf("default %s kept under the config's /dev: %+v", dst, m)
		}
	}
	if m := mountAt(s, "/dev/shm"); m == nil || m.Source != o.ShmPath {
		t.Errorf("/dev/shm = %+v", m)
	}
	n := 0
	for _, m := range s.Mounts {
		if m.Destination == "/etc/hosts" || m.Destination == "/sys" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d mounts at /etc/hosts and /sys, want 2", n)
	}
}

// A missing hostPath source is created as a directory, as containerd and CRI-O do (kubelet
// leaves it to the runtime for a hostPath volume with no type).
func TestMissingHostPathCreated(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "a", "b")
	o := testOptions(t)
	o.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: missing}}
	s := mustSpec(t, o)
	fi, err := os.Stat(missing)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755&^currentUmask() {
		t.Fatalf("host path after create: %v %v", fi, err)
	}
	if m := mountAt(s, "/data"); m == nil || m.Source != missing {
		t.Errorf("/data = %+v", m)
	}
}

func currentUmask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

func TestMountErrors(t *testing.T) {
	vol := t.TempDir()
	file := filepath.Join(vol, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(file, "sub") // cannot be created: its parent is a file
	tests := []struct {
		mount *runtimeapi.Mount
		want  string
	}{
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: missing},
			`config.mounts[1].host_path "` + missing + `": not a directory`},
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: filepath.Join(vol, "never"), Propagation: 9}, `config.mounts[1].propagation 9 is not`},
		{&runtimeapi.Mount{ContainerPath: "rel", HostPath: vol}, `config.mounts[1].container_path "rel" is not an absolute path`},
		{&runtimeapi.Mount{ContainerPath: "/m"}, `config.mounts[1].host_path is empty`},
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: vol, Image: &runtimeapi.ImageSpec{Image: "busybox"}},
			`config.mounts[1].host_path "` + vol + `" and config.mounts[1].image.image "busybox" are both set`},
		{&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{}}, `config.mounts[1].image.image is empty`},
		{&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "busybox"}},
			`config.mounts[1].readonly is false for config.mounts[1].image.image "busybox": an image volume is read-only`},
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: vol, ImageSubPath: "data"}, `config.mounts[1].image_sub_path "data" is set but config.mounts[1].image.image is not`},
		{&runtimeapi.Mount{ContainerPath: "/", Image: &runtimeapi.ImageSpec{Image: "busybox"}}, `config.mounts[1].container_path "/": cannot mount over the root filesystem`},
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: vol, RecursiveReadOnly: true}, `config.mounts[1].recursive_read_only is set but readonly is not`},
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: vol, Readonly: true, RecursiveReadOnly: true,
			Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}, `config.mounts[1].recursive_read_only needs PRIVATE propagation`},
		// testOptions' row lacks the feature recursive_read_only_mounts.
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: vol, Readonly: true, RecursiveReadOnly: true},
			`config.mounts[1].recursive_read_only is set but the pod's runtime handler lacks feature recursive_read_only_mounts`},
		{&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "busybox"}, Readonly: true, RecursiveReadOnly: true},
			`config.mounts[1].recursive_read_only is set but the pod's runtime handler lacks feature recursive_read_only_mounts`},
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: vol, Propagation: 9}, `config.mounts[1].propagation 9 is not`},
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: vol, MountOptions: []string{"ro,exec"}}, `config.mounts[1].mount_options[0] "ro,exec" is not a mount option`},
		{&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "busybox"}, Readonly: true, MountOptions: []string{"noatime", "defaults"}},
			`config.mounts[1].mount_options[1] "defaults" would undo the image volume's nosuid, nodev or read-only mount of config.mounts[1].image.image "busybox"`},
		{&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "busybox"}, Readonly: true, MountOptions: []string{"suid"}}, `config.mounts[1].mount_options[0] "suid" would undo`},
		{&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "busybox"}, Readonly: true, MountOptions: []string{"dev"}}, `config.mounts[1].mount_options[0] "dev" would undo`},
		{&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "busybox"}, Readonly: true, MountOptions: []string{"rw"}}, `config.mounts[1].mount_options[0] "rw" would undo`},
		// No SELinux and strict_selinux (strict below): selinux_relabel is refused, not dropped.
		{&runtimeapi.Mount{ContainerPath: "/m", HostPath: filepath.Join(vol, "never"), SelinuxRelabel: true},
			`config.mounts[1].selinux_relabel is set for config.mounts[1].host_path "` + filepath.Join(vol, "never") + `": SELinux is not enabled on this node`},
		{&runtimeapi.Mount{ContainerPath: "/m", Image: &runtimeapi.ImageSpec{Image: "busybox"}, Readonly: true, SelinuxRelabel: true},
			`config.mounts[1].selinux_relabel is set for config.mounts[1].image.image "busybox": SELinux is not enabled on this node`},
	}
	for _, tt := range tests {
		o := testOptions(t)
		o.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/ok", HostPath: vol}, tt.mount}
		o.LSM.StrictSELinux = true
		_, err := ContainerSpec(o)
		wantInvalid(t, err, tt.want)
	}
	// Not strict (the default): the mount is made without relabeling, as containerd does;
	// critest asks for selinux_relabel on every node.
	o := testOptions(t)
	o.Config.Mounts = []*runtimeapi.Mount{{ContainerPath: "/m", HostPath: vol, SelinuxRelabel: true}}
	spec, err := ContainerSpec(o)
	if err != nil {
		t.Fatalf("selinux_relabel without SELinux, not strict: %v", err)
	}
	if !slices.ContainsFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == "/m" && m.Source == vol }) {
		t.Errorf("mount /m missing: %+v", spec.Mounts)
	}
	// The missing host path of a mount refused for another reason is not created.
	if _, err := os.Stat(filepath.Join(vol, "never")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host path of a refused mount was created: %v", err)
	}
}

// A recursive_read_only mount is made only where the pod's row has the feature, and then
// with ro beside rro: a runtime that does not know rro takes it for mount data, which a
// bind ignores, and would otherwise mount the volume read-write.
func TestRecursiveReadOnlyMounts(t *testing.T) {
	vol := t.TempDir()
	o := testOptions(t)
	o.Config.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/plain", HostPath: vol, Readonly: true},
		{ContainerPath: "/rro", HostPath: vol, Readonly: true, RecursiveReadOnly: true},
	}
	_, err := ContainerSpec(o)
	wantInvalid(t, err, `config.mounts[1].recursive_read_only is set but the pod's runtime handler lacks feature recursive_read_only_mounts`)

	o.RecursiveReadOnlyMounts = true
	m := mountAt(mustSpec(t, o), "/rro")
	if m == nil || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "rro") || slices.Contains(m.Options, "rw") {
		t.Errorf("/rro = %+v, want ro and rro", m)
	}
	if sys := SysMount("ro", true); !slices.Contains(sys.Options, "ro") || !slices.Contains(sys.Options, "rro") {
		t.Errorf("node's /sys = %+v, want ro and rro", sys)
	}
}

// An image volume binds the host path the container manager mounted for it, read-only,
// nosuid, nodev and noexec, whatever readonly says; mount_options add to those.
func TestImageMounts(t *testing.T) {
	vol, sub := t.TempDir(), t.TempDir()
	o := testOptions(t)
	o.Config.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/vol", Image: &runtimeapi.ImageSpec{Image: "registry.test/data:1"}, Readonly: true},
		{ContainerPath: "/sub/", Image: &runtimeapi.ImageSpec{Image: "sha256:0123"}, ImageSubPath: "data", Readonly: true, MountOptions: []string{"noatime"}},
		{ContainerPath: "/vol/rro", Image: &runtimeapi.ImageSpec{Image: "registry.test/data:1"}, Readonly: true, RecursiveReadOnly: true},
	}
	o.ImageVolumes = map[int]string{0: vol, 1: sub, 2: vol}
	o.RecursiveReadOnlyMounts = true
	s := mustSpec(t, o)
	for dst, w := range map[string]specs.Mount{
		"/vol":     {Destination: "/vol", Type: "bind", Source: vol, Options: []string{"rbind", "rprivate", "ro", "nosuid", "nodev"}},
		"/sub":     {Destination: "/sub", Type: "bind", Source: sub, Options: []string{"rbind", "rprivate", "ro", "nosuid", "nodev", "noatime"}},
		"/vol/rro": {Destination: "/vol/rro", Type: "bind", Source: vol, Options: []string{"rbind", "rprivate", "ro", "rro", "nosuid", "nodev"}},
	} {
		if got := mountAt(s, dst); got == nil || !reflect.DeepEqual(*got, w) {
			t.Errorf("mount %s = %+v, want %+v", dst, got, w)
		}
	}
	// Not mounted by the manager: a bug, never a bind of nothing.
	o.ImageVolumes = map[int]string{0: vol, 2: vol}
	if _, err := ContainerSpec(o); err == nil || !strings.Contains(err.Error(), `config.mounts[1].image.image "sha256:0123": the image is not mounted`) {
		t.Errorf("image mount without a volume: %v", err)
	}
}

func TestDevices(t *testing.T) {
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skip("no /dev/null")
	}
	o := testOptions(t)
	o.Config.Devices = []*runtimeapi.Device{
		{HostPath: "/dev/null", ContainerPath: "/dev/mynull", Permissions: "rw"},
		{HostPath: "/dev/zero"},
	}
	s := mustSpec(t, o)
	if len(s.Linux.Devices) != 2 {
		t.Fatalf("devices = %+v", s.Linux.Devices)
	}
	d := s.Linux.Devices[0]
	if d.Path != "/dev/mynull" || d.Type != "c" || d.Major != 1 || d.Minor != 3 || d.FileMode == nil || d.FileMode.Perm() == 0 {
		t.Errorf("device = %+v", d)
	}
	if z := s.Linux.Devices[1]; z.Path != "/dev/zero" || z.Major != 1 || z.Minor != 5 {
		t.Errorf("device = %+v", z)
	}
	rules := s.Linux.Resources.Devices
	if len(rules) == 0 || rules[0].Allow || rules[0].Access != "rwm" || rules[0].Major != nil {
		t.Fatalf("first device rule is not deny-all: %+v", rules)
	}
	hasRule := func(major, minor int64, access string) bool {
		return slices.ContainsFunc(rules, func(r specs.LinuxDeviceCgroup) bool {
			return r.Allow && r.Type == "c" && r.Major != nil && *r.Major == major && r.Minor != nil && *r.Minor == minor && r.Access == access
		})
	}
	if !hasRule(1, 3, "rw") || !hasRule(1, 5, "rwm") {
		t.Errorf("no allow rules for the config's devices: %+v", rules)
	}
	if !hasRule(1, 9, "rwm") || !hasRule(5, 2, "rwm") {
		t.Errorf("no allow rules for urandom and ptmx: %+v", rules)
	}
	if hasRule(1, 1, "rwm") {
		t.Error("/dev/mem allowed to an unprivileged container")
	}

	for _, tt := range []struct {
		dev  *runtimeapi.Device
		want string
	}{
		{&runtimeapi.Device{HostPath: "/dev/nonexistent-device", ContainerPath: "/dev/x"},
			`config.devices[0].host_path "/dev/nonexistent-device": no such file or directory`},
		{&runtimeapi.Device{HostPath: "/dev/null", ContainerPath: "/dev/x", Permissions: "rwx"},
			`config.devices[0].permissions "rwx" is not a combination of r, w and m`},
		{&runtimeapi.Device{HostPath: "/dev/null", ContainerPath: "x"}, `config.devices[0].container_path "x" is not an absolute path`},
		{&runtimeapi.Device{HostPath: o.HostsPath + "-not-there"}, `config.devices[0].host_path`},
	} {
		o := testOptions(t)
		o.Config.Devices = []*runtimeapi.Device{tt.dev}
		_, err := ContainerSpec(o)
		wantInvalid(t, err, tt.want)
	}
	// A regular file is not a device.
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o = testOptions(t)
	o.Config.Devices = []*runtimeapi.Device{{HostPath: f, ContainerPath: "/dev/f"}}
	_, err := ContainerSpec(o)
	wantInvalid(t, err, `config.devices[0].host_path "`+f+`": not a device node`)
}

// A directory host path gives every device under it, renamed under the container path.
func TestDeviceDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "sub", "mynull"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Skipf("mknod needs root: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t)
	o.Config.Devices = []*runtimeapi.Device{{HostPath: dir, ContainerPath: "/dev/stuff", Permissions: "r"}}
	s := mustSpec(t, o)
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/stuff/sub/mynull" || s.Linux.Devices[0].Minor != 3 {
		t.Errorf("devices = %+v", s.Linux.Devices)
	}
}

func TestPrivileged(t *testing.T) {
	o := testOptions(t)
	o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		Privileged: true, NoNewPrivs: true, MaskedPaths: []string{"/proc/kcore"},
		Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	o.SandboxConfig.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
	// A config device wins over the host device at the same path.
	o.Config.Devices = []*runtimeapi.Device{{HostPath: "/dev/zero", ContainerPath: "/dev/full"}}
	s := mustSpec(t, o)
	var full []specs.LinuxDevice
	for _, d := range s.Linux.Devices {
		if d.Path == "/dev/full" {
			full = append(full, d)
		}
	}
	if len(full) != 1 || full[0].Minor != 5 {
		t.Errorf("devices at /dev/full = %+v, want only the config's (1:5)", full)
	}
	if s.Process.NoNewPrivileges {
		t.Error("noNewPrivileges on a privileged container")
	}
	if s.Linux.MaskedPaths != nil || s.Linux.ReadonlyPaths != nil {
		t.Errorf("masked %v readonly %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	if s.Linux.Seccomp != nil {
		t.Error("seccomp on a privileged container")
	}
	for _, dst := range []string{"/sys", "/sys/fs/cgroup"} {
		if m := mountAt(s, dst); m == nil || contains(m.Options, "ro") || !contains(m.Options, "rw") {
			t.Errorf("%s = %+v, want rw", dst, m)
		}
	}
	if r := s.Linux.Resources.Devices; len(r) != 1 || !r[0].Allow || r[0].Access != "rwm" || r[0].Type != "" {
		t.Errorf("device rules = %+v, want allow all", r)
	}
	if !slices.ContainsFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/null" && d.Major == 1 && d.Minor == 3 }) {
		t.Errorf("host devices missing /dev/null: %d devices", len(s.Linux.Devices))
	}
	if slices.ContainsFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return strings.HasPrefix(d.Path, "/dev/pts/") }) {
		t.Error("host pts devices given to the container")
	}
}

func TestMaskedAndReadonlyPaths(t *testing.T) {
	userns := &IDMappings{UIDs: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}},
		GIDs: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}}
	tests := []struct {
		name             string
		masked, readonly []string
		ids              *IDMappings
		wantM, wantR     []string
	}{
		{"defaults", nil, nil, nil, DefaultMaskedPaths, DefaultReadonlyPaths},
		// kubelet's procMount: Unmasked sends two empty lists; only allowed with a user
		// namespace (hostUsers: false).
		{"unmasked proc mount", []string{}, []string{}, userns, nil, nil},
		{"empty lists without a user namespace", []string{}, []string{}, nil, DefaultMaskedPaths, DefaultReadonlyPaths},
		{"kubelet's default in a user namespace", []string{"/proc/kcore"}, []string{"/proc/sys"}, userns, []string{"/proc/kcore"}, []string{"/proc/sys"}},
		{"custom", []string{"/proc/x"}, nil, nil, []string{"/proc/x"}, DefaultReadonlyPaths},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t)
			o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{MaskedPaths: tt.masked, ReadonlyPaths: tt.readonly}
			// As the daemon gets it: through protobuf, which delivers an empty list as nil.
			b, err := proto.Marshal(o.Config)
			if err != nil {
				t.Fatal(err)
			}
			o.Config = &runtimeapi.ContainerConfig{}
			if err := proto.Unmarshal(b, o.Config); err != nil {
				t.Fatal(err)
			}
			o.IDMappings = tt.ids
			s := mustSpec(t, o)
			if !reflect.DeepEqual(s.Linux.MaskedPaths, tt.wantM) || !reflect.DeepEqual(s.Linux.ReadonlyPaths, tt.wantR) {
				t.Errorf("masked %q readonly %q, want %q %q", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths, tt.wantM, tt.wantR)
			}
			if len(s.Linux.MaskedPaths) > 0 {
				old := s.Linux.MaskedPaths[0]
				s.Linux.MaskedPaths[0] = "/changed"
				if slices.Contains(DefaultMaskedPaths, "/changed") {
					t.Error("masked paths are not a copy")
				}
				s.Linux.MaskedPaths[0] = old
			}
		})
	}
}

func TestSeccomp(t *testing.T) {
	dir := t.TempDir()
	profile := filepath.Join(dir, "profile.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_LOG","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.json")
	if err := os.WriteFile(garbage, []byte(`{not json`), 0o644); err != nil {
		t.Fatal(err)
	}
	withSeccomp := func(p *runtimeapi.SecurityProfile, path string, add ...string) ContainerOptions {
		o := testOptions(t)
		o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
			Seccomp: p, SeccompProfilePath: path, Capabilities: &runtimeapi.Capability{AddCapabilities: add}}
		return o
	}
	allows := func(s *specs.LinuxSeccomp, name string) bool {
		return slices.ContainsFunc(s.Syscalls, func(c specs.LinuxSyscall) bool {
			return c.Action == specs.ActAllow && slices.Contains(c.Names, name) && len(c.Args) == 0
		})
	}

	s := mustSpec(t, withSeccomp(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, ""))
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActErrno || !allows(s.Linux.Seccomp, "read") {
		t.Fatalf("runtime default = %+v", s.Linux.Seccomp)
	}
	if allows(s.Linux.Seccomp, "mount") {
		t.Error("runtime default allows mount without CAP_SYS_ADMIN")
	}
	// The default profile follows the capabilities.
	s = mustSpec(t, withSeccomp(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, "", "SYS_ADMIN"))
	if s.Linux.Seccomp == nil || !allows(s.Linux.Seccomp, "mount") {
		t.Error("runtime default with CAP_SYS_ADMIN does not allow mount")
	}
	// The deprecated path field.
	if s := mustSpec(t, withSeccomp(nil, "runtime/default")); s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActErrno {
		t.Errorf("seccomp_profile_path runtime/default = %+v", s.Linux.Seccomp)
	}

	for name, o := range map[string]ContainerOptions{
		"unset":           withSeccomp(nil, ""),
		"unconfined":      withSeccomp(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, ""),
		"path unconfined": withSeccomp(nil, "unconfined"),
	} {
		if s := mustSpec(t, o); s.Linux.Seccomp != nil {
			t.Errorf("%s: seccomp = %+v", name, s.Linux.Seccomp)
		}
	}

	s = mustSpec(t, withSeccomp(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: profile}, ""))
	if sc := s.Linux.Seccomp; sc == nil || sc.DefaultAction != specs.ActLog || len(sc.Syscalls) != 1 || sc.Syscalls[0].Names[0] != "mkdir" {
		t.Errorf("localhost = %+v", sc)
	}
	s = mustSpec(t, withSeccomp(nil, "localhost/"+profile))
	if sc := s.Linux.Seccomp; sc == nil || sc.DefaultAction != specs.ActLog {
		t.Errorf("localhost path = %+v", sc)
	}

	missing := filepath.Join(dir, "missing.json")
	for _, tt := range []struct {
		o    ContainerOptions
		want string
	}{
		{withSeccomp(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: missing}, ""),
			`config.linux.security_context.seccomp.localhost_ref "` + missing + `": no such file or directory`},
		{withSeccomp(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: garbage}, ""),
			`config.linux.security_context.seccomp.localhost_ref "` + garbage + `": `},
		{withSeccomp(&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "rel.json"}, ""),
			`localhost_ref "rel.json" is not an absolute path`},
		{withSeccomp(&runtimeapi.SecurityProfile{ProfileType: 8}, ""), `config.linux.security_context.seccomp.profile_type 8 is not`},
		{withSeccomp(nil, "bogus"), `config.linux.security_context.seccomp_profile_path "bogus" is not`},
	} {
		_, err := ContainerSpec(tt.o)
		wantInvalid(t, err, tt.want)
	}
}

func TestNamespaces(t *testing.T) {
	ns := func(pairs ...string) []specs.LinuxNamespace {
		var out []specs.LinuxNamespace
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, specs.LinuxNamespace{Type: specs.LinuxNamespaceType(pairs[i]), Path: pairs[i+1]})
		}
		return out
	}
	tests := []struct {
		name string
		set  func(*ContainerOptions)
		want []specs.LinuxNamespace
	}{
		{"pod namespaces", func(o *ContainerOptions) {},
			ns("pid", "", "network", "/run/rtshimd/netns/sb1", "ipc", "/run/rtshimd/ipcns/sb1", "uts", "/run/rtshimd/utsns/sb1", "mount", "")},
		{"shared pid", func(o *ContainerOptions) { o.PIDNS = "/proc/42/ns/pid" },
			ns("pid", "/proc/42/ns/pid", "network", "/run/rtshimd/netns/sb1", "ipc", "/run/rtshimd/ipcns/sb1", "uts", "/run/rtshimd/utsns/sb1", "mount", "")},
		{"host namespaces", func(o *ContainerOptions) { o.HostNetwork, o.HostIPC, o.HostPID = true, true, true },
			ns("mount", "")},
		{"host network only", func(o *ContainerOptions) { o.HostNetwork = true },
			ns("pid", "", "ipc", "/run/rtshimd/ipcns/sb1", "mount", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t)
			tt.set(&o)
			want := tt.want
			if cgroup2() {
				want = append(want, specs.LinuxNamespace{Type: specs.CgroupNamespace})
			}
			if got := mustSpec(t, o).Linux.Namespaces; !reflect.DeepEqual(got, want) {
				t.Errorf("namespaces = %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestResources(t *testing.T) {
	o := testOptions(t)
	o.Config.Linux.Resources = &runtimeapi.LinuxContainerResources{
		CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, CpusetCpus: "0-1", CpusetMems: "0",
		MemoryLimitInBytes: 64 << 20,
		HugepageLimits:     []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}},
		Unified:            map[string]string{"memory.high": "50000000"},
	}
	// The conversion itself; the spec then holds what the node's controllers allow.
	r, err := Resources(o.Config.Linux.Resources)
	if err != nil {
		t.Fatal(err)
	}
	if r.CPU == nil || r.CPU.Shares == nil || *r.CPU.Shares != 512 || r.CPU.Period == nil || *r.CPU.Period != 100000 ||
		r.CPU.Quota == nil || *r.CPU.Quota != 50000 || r.CPU.Cpus != "0-1" || r.CPU.Mems != "0" {
		t.Errorf("cpu = %+v", r.CPU)
	}
	if r.Memory == nil || r.Memory.Limit == nil || *r.Memory.Limit != 64<<20 || r.Memory.Swap != nil {
		t.Errorf("memory = %+v", r.Memory)
	}
	if !reflect.DeepEqual(r.HugepageLimits, []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 4 << 20}}) {
		t.Errorf("hugepages = %+v", r.HugepageLimits)
	}
	if !reflect.DeepEqual(r.Unified, map[string]string{"memory.high": "50000000"}) {
		t.Errorf("unified = %v", r.Unified)
	}
	inSpec := mustSpec(t, o).Linux.Resources
	if !cgcontrollers.Default().Available(o.CgroupsPath)["hugetlb"] && inSpec.HugepageLimits != nil {
		t.Errorf("hugepage limits in the spec on a node without hugetlb: %+v", inSpec.HugepageLimits)
	}
	if inSpec.Memory == nil || *inSpec.Memory.Limit != 64<<20 {
		t.Errorf("memory limit lost from the spec: %+v", inSpec.Memory)
	}

	o.Config.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20, MemorySwapLimitInBytes: 2 << 20}
	r = mustSpec(t, o).Linux.Resources
	if r.CPU != nil {
		t.Errorf("cpu = %+v from zero values", r.CPU)
	}
	if r.Memory == nil || r.Memory.Swap == nil || *r.Memory.Swap != 2<<20 {
		t.Errorf("memory = %+v", r.Memory)
	}

	o.Config.Linux.Resources = nil
	r = mustSpec(t, o).Linux.Resources
	if r.CPU != nil || r.Memory != nil || r.HugepageLimits != nil || r.Unified != nil {
		t.Errorf("resources from nothing = %+v", r)
	}

	for _, tt := range []struct {
		res  *runtimeapi.LinuxContainerResources
		want string
	}{
		{&runtimeapi.LinuxContainerResources{CpuShares: -1}, "config.linux.resources.cpu_shares -1 is negative"},
		{&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -5}, "config.linux.resources.memory_limit_in_bytes -5 is negative"},
		{&runtimeapi.LinuxContainerResources{CpuQuota: -2}, "config.linux.resources.cpu_quota -2"},
		{&runtimeapi.LinuxContainerResources{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "huge"}}},
			`config.linux.resources.hugepage_limits[0].page_size "huge"`},
		{&runtimeapi.LinuxContainerResources{OomScoreAdj: 1001}, "config.linux.resources.oom_score_adj 1001"},
	} {
		o.Config.Linux.Resources = tt.res
		_, err := ContainerSpec(o)
		wantInvalid(t, err, tt.want)
	}
}

func TestOOMScoreAdjClamp(t *testing.T) {
	tests := []struct{ req, min, want int }{
		{-998, -500, -500},
		{500, -500, 500},
		{-998, -999, -998},
		{0, 0, 0},
		{-1000, 100, 100},
	}
	for _, tt := range tests {
		o := testOptions(t)
		o.OOMScoreAdjMin = tt.min
		o.Config.Linux.Resources = &runtimeapi.LinuxContainerResources{OomScoreAdj: int64(tt.req)}
		s := mustSpec(t, o)
		if s.Process.OOMScoreAdj == nil || *s.Process.OOMScoreAdj != tt.want {
			t.Errorf("oom_score_adj %d with min %d = %v, want %d", tt.req, tt.min, s.Process.OOMScoreAdj, tt.want)
		}
	}
}

func TestContainerSpecUserErrors(t *testing.T) {
	o := testOptions(t)
	o.Image.User = "nobody-here"
	_, err := ContainerSpec(o)
	wantInvalid(t, err, `image USER "nobody-here": no user "nobody-here"`)

	o = testOptions(t)
	o.Config = nil
	_, err = ContainerSpec(o)
	wantInvalid(t, err, "config is required")
}

// A pod user namespace reaches the spec (joined by path, with its mappings), and a
// mount's ID mappings are taken only as the pod's.
func TestUserNamespaceSpec(t *testing.T) {
	pod := &IDMappings{UIDs: []specs.LinuxIDMapping{{HostID: 200000, Size: 65536}}, GIDs: []specs.LinuxIDMapping{{HostID: 300000, Size: 65536}}}
	o := testOptions(t)
	o.UserNS, o.IDMappings = "/run/pod/ns/user", pod
	spec := mustSpec(t, o)
	if !slices.Contains(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: "/run/pod/ns/user"}) {
		t.Errorf("namespaces %v lack the pod's user namespace", spec.Linux.Namespaces)
	}
	if !slices.Equal(spec.Linux.UIDMappings, pod.UIDs) || !slices.Equal(spec.Linux.GIDMappings, pod.GIDs) {
		t.Errorf("mappings %v %v", spec.Linux.UIDMappings, spec.Linux.GIDMappings)
	}

	uids := []*runtimeapi.IDMapping{{HostId: 200000, Length: 65536}}
	gids := []*runtimeapi.IDMapping{{HostId: 300000, Length: 65536}}
	mount := func(u, g []*runtimeapi.IDMapping) []*runtimeapi.Mount {
		return []*runtimeapi.Mount{{ContainerPath: "/vol", HostPath: t.TempDir(), UidMappings: u, GidMappings: g}}
	}
	o.Config.Mounts = mount(uids, gids)
	mustSpec(t, o)
	o.Config.Mounts = mount(gids, gids)
	_, err := ContainerSpec(o)
	wantInvalid(t, err, "config.mounts[0].uidMappings")
	o.Config.Mounts = mount(uids, nil)
	_, err = ContainerSpec(o)
	wantInvalid(t, err, "uidMappings and gidMappings go together")
	o.UserNS, o.IDMappings = "", nil
	o.Config.Mounts = mount(uids, gids)
	_, err = ContainerSpec(o)
	wantInvalid(t, err, "needs a pod user namespace")
}

// /sys is a sysfs of the container's own unless it is in a pod user namespace on the node's
// network, where no sysfs can be mounted: then the node's, recursively read-only, also for
// a privileged container.
func TestSysMount(t *testing.T) {
	pod := &IDMappings{UIDs: []specs.LinuxIDMapping{{HostID: 200000, Size: 65536}}, GIDs: []specs.LinuxIDMapping{{HostID: 200000, Size: 65536}}}
	nodeSys := specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "ro", "rro", "nosuid", "noexec", "nodev"}}
	for _, c := range []struct {
		name             string
		userns, hostNet  bool
		privileged       bool
		wantType, wantRO string
	}{
		{"pod network", false, false, false, "sysfs", "ro"},
		{"host network", false, true, false, "sysfs", "ro"},
		{"privileged on host network", false, true, true, "sysfs", "rw"},
		{"user namespace", true, false, false, "sysfs", "ro"},
		{"user namespace on host network", true, true, false, "bind", "rro"},
		{"privileged, user namespace on host network", true, true, true, "bind", "rro"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions(t)
			if c.userns {
				o.UserNS, o.IDMappings = "/run/pod/ns/user", pod
			}
			o.HostNetwork = c.hostNet
			if c.privileged {
				o.SandboxConfig.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
				o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{Privileged: true}
			}
			sys := mountAt(mustSpec(t, o), "/sys")
			if sys == nil || sys.Type != c.wantType || !slices.Contains(sys.Options, c.wantRO) {
				t.Fatalf("/sys = %+v, want %s with %s", sys, c.wantType, c.wantRO)
			}
			if c.wantType == "bind" && !reflect.DeepEqual(*sys, nodeSys) {
				t.Errorf("/sys = %+v, want %+v", *sys, nodeSys)
			}
		})
	}
}

// The pod's size kubelet sends (linux.resources of the pod config) reaches every
// container's spec under containerd's sandbox sizing names, which Kata reads to size its
// VM; a container's own annotations cannot set them.
func TestSandboxSizingAnnotations(t *testing.T) {
	o := testOptions(t)
	for _, k := range []string{AnnotationSandboxCPUPeriod, AnnotationSandboxCPUQuota, AnnotationSandboxCPUShares, AnnotationSandboxMemory} {
		if v, ok := mustSpec(t, o).Annotations[k]; ok {
			t.Errorf("%s = %q for a pod config without resources", k, v)
		}
	}
	o.SandboxConfig.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 150000, CpuShares: 1536, MemoryLimitInBytes: 256 << 20}
	o.Config.Annotations = map[string]string{AnnotationSandboxMemory: "1"}
	got := mustSpec(t, o).Annotations
	for k, want := range map[string]string{AnnotationSandboxCPUPeriod: "100000", AnnotationSandboxCPUQuota: "150000",
		AnnotationSandboxCPUShares: "1536", AnnotationSandboxMemory: "268435456"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
}

// A pod annotation reaches a container's spec only where the row's pod_annotations match
// its key (path.Match, as containerd); rtshimd's own keys and the container's own
// annotation of the same key win over the pod's.
func TestPodAnnotations(t *testing.T) {
	o := testOptions(t)
	o.SandboxConfig.Annotations = map[string]string{
		"io.katacontainers.config.hypervisor.default_vcpus": "2",
		"io.katacontainers.config.hypervisor.kernel_params": "quiet",
		"example.com/shared":               "from the pod",
		"example.com/unmatched":            "no",
		"io.kubernetes.cri.sandbox-name":   "another pod",
		"io.kubernetes.cri.sandbox-memory": "1",
		"io.kubernetes.cri-o.SandboxID":    "another",
	}
	o.Config.Annotations = map[string]string{"example.com/shared": "from the container"}
	if got := mustSpec(t, o).Annotations; got["io.katacontainers.config.hypervisor.default_vcpus"] != "" || got["example.com/unmatched"] != "" {
		t.Errorf("pod annotations passed without pod_annotations: %v", got)
	}

	o.PodAnnotations = []string{"io.katacontainers.*", "example.com/shared", "io.kubernetes.cri*"}
	got := mustSpec(t, o).Annotations
	for k, want := range map[string]string{
		"io.katacontainers.config.hypervisor.default_vcpus": "2",
		"io.katacontainers.config.hypervisor.kernel_params": "quiet",
		"example.com/shared":    "from the container",
		AnnotationSandboxName:   "pod",
		AnnotationCRIOSandboxID: "sb1",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	for _, k := range []string{"example.com/unmatched", AnnotationSandboxMemory} {
		if v, ok := got[k]; ok {
			t.Errorf("%s = %q passed, want it absent", k, v)
		}
	}

	passed, reserved := PassedPodAnnotations(o.SandboxConfig, o.PodAnnotations)
	if len(passed) != 3 || passed["example.com/shared"] != "from the pod" {
		t.Errorf("passed = %v, want the kata keys and example.com/shared", passed)
	}
	if want := []string{"io.kubernetes.cri-o.SandboxID", "io.kubernetes.cri.sandbox-memory", "io.kubernetes.cri.sandbox-name"}; !slices.Equal(reserved, want) {
		t.Errorf("reserved = %q, want %q", reserved, want)
	}
}

// CRIU's and the runtime's annotations (org.criu.config names CRIU's configuration file
// at restore; crun reads run.oci.*) are not passed by a glob, "*" included: only a row
// whose pod_annotations name the key itself passes one, to the container's spec and to
// the sandbox container's (AddPodAnnotations) alike.
func TestPodAnnotationsCRIUExactOnly(t *testing.T) {
	o := testOptions(t)
	o.SandboxConfig.Annotations = map[string]string{
		"org.criu.config":               "/var/lib/kubelet/pods/x/volumes/criu.conf",
		"run.oci.handler":               "krun",
		"io.katacontainers.config.path": "kata",
	}
	o.PodAnnotations = []string{"*", "org.criu.*", "run.oci.handle?"}
	got := mustSpec(t, o).Annotations
	for _, k := range []string{"org.criu.config", "run.oci.handler"} {
		if v, ok := got[k]; ok {
			t.Errorf("%s = %q passed by a glob, want it absent", k, v)
		}
	}
	if got["io.katacontainers.config.path"] != "kata" {
		t.Errorf("io.katacontainers.config.path = %q, want it passed by \"*\"", got["io.katacontainers.config.path"])
	}
	sandbox := map[string]string{}
	AddPodAnnotations(sandbox, o.SandboxConfig, o.PodAnnotations)
	if _, ok := sandbox["org.criu.config"]; ok {
		t.Errorf("sandbox annotations carry org.criu.config by a glob: %v", sandbox)
	}
	_, reserved := PassedPodAnnotations(o.SandboxConfig, o.PodAnnotations)
	if want := []string{"org.criu.config", "run.oci.handler"}; !slices.Equal(reserved, want) {
		t.Errorf("reserved = %q, want %q", reserved, want)
	}

	o.PodAnnotations = []string{"*", "org.criu.config"}
	got = mustSpec(t, o).Annotations
	if got["org.criu.config"] != "/var/lib/kubelet/pods/x/volumes/criu.conf" {
		t.Errorf("org.criu.config = %q with the key named exactly, want it passed", got["org.criu.config"])
	}
	if v, ok := got["run.oci.handler"]; ok {
		t.Errorf("run.oci.handler = %q passed, want it absent: only org.criu.config is named", v)
	}
	sandbox = map[string]string{}
	AddPodAnnotations(sandbox, o.SandboxConfig, o.PodAnnotations)
	if sandbox["org.criu.config"] == "" {
		t.Errorf("sandbox annotations lack org.criu.config named exactly: %v", sandbox)
	}
}

// A privileged container on a row with privileged_without_host_devices gets only its
// config's devices and the default device rules, as containerd gives it; without, all of
// the host's and allow-all.
func TestPrivilegedWithoutHostDevices(t *testing.T) {
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skip("no /dev/null")
	}
	o := testOptions(t)
	o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{Privileged: true}
	o.SandboxConfig.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
	o.Config.Devices = []*runtimeapi.Device{{HostPath: "/dev/zero", ContainerPath: "/dev/myzero", Permissions: "r"}}
	host := mustSpec(t, o)
	if !slices.ContainsFunc(host.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/null" }) {
		t.Fatalf("privileged container without the row's setting lacks the host's /dev/null: %d devices", len(host.Linux.Devices))
	}
	if r := host.Linux.Resources.Devices; len(r) != 1 || !r[0].Allow {
		t.Errorf("device rules = %+v, want allow all", r)
	}

	o.PrivilegedWithoutHostDevices = true
	s := mustSpec(t, o)
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/myzero" {
		t.Errorf("devices = %+v, want only the config's /dev/myzero", s.Linux.Devices)
	}
	rules := s.Linux.Resources.Devices
	if len(rules) < 2 || rules[0].Allow || rules[0].Access != "rwm" || rules[0].Major != nil {
		t.Fatalf("device rules = %+v, want deny-all first", rules)
	}
	if !reflect.DeepEqual(rules[:len(rules)-1], defaultDeviceRules()) {
		t.Errorf("device rules = %+v, want the defaults and the config device's", rules)
	}
	if last := rules[len(rules)-1]; !last.Allow || last.Access != "r" || *last.Major != 1 || *last.Minor != 5 {
		t.Errorf("config device's rule = %+v, want allow r on 1:5", last)
	}
	// Privileged otherwise: capabilities, no masked paths, no seccomp.
	if s.Linux.MaskedPaths != nil || s.Linux.Seccomp != nil || !slices.Contains(s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN") {
		t.Errorf("masked %v seccomp %v caps %v: want a privileged container but for its devices", s.Linux.MaskedPaths, s.Linux.Seccomp, s.Process.Capabilities.Bounding)
	}

	// An unprivileged container is the same either way.
	o = testOptions(t)
	plain := mustSpec(t, o)
	o.PrivilegedWithoutHostDevices = true
	if got := mustSpec(t, o); !reflect.DeepEqual(got.Linux.Devices, plain.Linux.Devices) || !reflect.DeepEqual(got.Linux.Resources.Devices, plain.Linux.Resources.Devices) {
		t.Errorf("unprivileged container's devices changed by the row's setting")
	}
}

// device_ownership_from_security_context: the config's devices are owned by run_as_user and
// run_as_group (0 where unset) instead of the host node's owner; off, the node's owner.
func TestDeviceOwnershipFromSecurityContext(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/dev/zero", &st); err != nil {
		t.Skip("no /dev/zero")
	}
	owner := func(s *specs.Spec) (uint32, uint32) {
		for _, d := range s.Linux.Devices {
			if d.Path == "/dev/myzero" {
				return *d.UID, *d.GID
			}
		}
		t.Fatalf("no /dev/myzero in %+v", s.Linux.Devices)
		return 0, 0
	}
	o := testOptions(t)
	o.Config.Devices = []*runtimeapi.Device{{HostPath: "/dev/zero", ContainerPath: "/dev/myzero", Permissions: "rw"}}
	o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		RunAsUser: &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 2000}}
	if u, g := owner(mustSpec(t, o)); u != st.Uid || g != st.Gid {
		t.Errorf("off: owner %d:%d, want the node's %d:%d", u, g, st.Uid, st.Gid)
	}
	o.DeviceOwnershipFromSecurityContext = true
	if u, g := owner(mustSpec(t, o)); u != 1000 || g != 2000 {
		t.Errorf("on: owner %d:%d, want 1000:2000", u, g)
	}
	o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 1000}}
	if u, g := owner(mustSpec(t, o)); u != 1000 || g != 0 {
		t.Errorf("on, no run_as_group: owner %d:%d, want 1000:0", u, g)
	}
}

// The row's default_ulimits are the process's rlimits; none, none.
func TestRlimits(t *testing.T) {
	o := testOptions(t)
	if s := mustSpec(t, o); s.Process.Rlimits != nil {
		t.Errorf("rlimits without a row setting: %+v", s.Process.Rlimits)
	}
	o.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1000, Hard: 2000}}
	if s := mustSpec(t, o); !reflect.DeepEqual(s.Process.Rlimits, o.Rlimits) {
		t.Errorf("rlimits %+v, want %+v", s.Process.Rlimits, o.Rlimits)
	}
}

// A row's seccomp_profile is what RuntimeDefault means on it; Unconfined stays unconfined;
// a profile that cannot be read names the field and the file.
func TestRowSeccompProfile(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "seccomp.json")
	if err := os.WriteFile(prof, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t)
	o.SeccompProfile = prof
	o.Config.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}
	s := mustSpec(t, o)
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActAllow || len(s.Linux.Seccomp.Syscalls) != 1 || !slices.Contains(s.Linux.Seccomp.Syscalls[0].Names, "mkdirat") {
		t.Errorf("RuntimeDefault on a row with a seccomp_profile: %+v", s.Linux.Seccomp)
	}
	o.Config.Linux.SecurityContext.Seccomp.ProfileType = runtimeapi.SecurityProfile_Unconfined
	if s := mustSpec(t, o); s.Linux.Seccomp != nil {
		t.Errorf("Unconfined on such a row: %+v", s.Linux.Seccomp)
	}
	o.Config.Linux.SecurityContext.Seccomp.ProfileType = runtimeapi.SecurityProfile_RuntimeDefault
	o.SeccompProfile = prof + ".gone"
	if _, err := ContainerSpec(o); err == nil || !strings.Contains(err.Error(), "config.linux.security_context.seccomp: RuntimeDefault is the handler's seccomp_profile") || !strings.Contains(err.Error(), ".gone") {
		t.Errorf("a profile gone since the config was loaded: %v", err)
	}
	if p, err := SandboxSeccomp(&runtimeapi.LinuxSandboxSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}, prof); err != nil || p == nil || p.DefaultAction != specs.ActAllow {
		t.Errorf("the sandbox container's RuntimeDefault on such a row: %+v, %v", p, err)
	}
}
