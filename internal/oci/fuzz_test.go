package oci

import (
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// FuzzContainerSpec: any CRI container config (any protobuf bytes) gives a spec or an
// InvalidArgument error that names what is wrong, never a panic. Host paths are kept under
// a temporary directory, since the builder creates a hostPath volume's missing directory.
func FuzzContainerSpec(f *testing.F) {
	for _, c := range []*runtimeapi.ContainerConfig{
		{Metadata: &runtimeapi.ContainerMetadata{Name: "a"}, Image: &runtimeapi.ImageSpec{Image: "i"}, Command: []string{"sh"}},
		{
			Metadata: &runtimeapi.ContainerMetadata{Name: "b"}, Image: &runtimeapi.ImageSpec{Image: "i"}, Args: []string{"x"},
			Envs:    []*runtimeapi.KeyValue{{Key: "A", Value: []byte("1")}},
			Mounts:  []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/vol", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}},
			Devices: []*runtimeapi.Device{{ContainerPath: "/dev/x", HostPath: "/dev/null", Permissions: "rw"}},
			Linux: &runtimeapi.LinuxContainerConfig{
				Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 1 << 26, CpuQuota: 50000, CpuPeriod: 100000, HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 1 << 21}}},
				SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
					RunAsUser: &runtimeapi.Int64Value{Value: 1000}, Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"ALL"}},
					Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, MaskedPaths: []string{"/proc/kcore"},
				},
			},
		},
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := &runtimeapi.ContainerConfig{}
		if err := proto.Unmarshal(data, cfg); err != nil {
			return
		}
		scratch := t.TempDir()
		for _, m := range cfg.GetMounts() {
			if m != nil && m.HostPath != "" {
				m.HostPath = filepath.Join(scratch, filepath.Clean("/"+m.HostPath))
			}
		}
		o := testOptions(t)
		o.Config = cfg
		spec, err := ContainerSpec(o)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) || err.Error() == "" {
				t.Fatalf("error %v is not an InvalidArgument that says why", err)
			}
			return
		}
		if spec == nil || spec.Process == nil || spec.Linux == nil || len(spec.Process.Args) == 0 {
			t.Fatalf("no error, and spec %+v is not runnable", spec)
		}
	})
}
