package shimopts

import (
	"strings"
	"testing"

	runcopts "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"google.golang.org/protobuf/proto"
)

func TestFor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		binary  string
		table   map[string]any
		systemd bool
		want    proto.Message
		err     string
	}{
		{"nothing", "/usr/bin/containerd-shim-runc-v2", nil, false, nil, ""},
		{"systemd only, any shim", "/usr/local/bin/containerd-shim-runsc-v1", nil, true, &runcopts.Options{SystemdCgroup: true}, ""},
		{"runc's", "/usr/bin/containerd-shim-runc-v2", map[string]any{"BinaryName": "/opt/runc", "IoUid": int64(1000), "NoPivotRoot": true}, true,
			&runcopts.Options{BinaryName: "/opt/runc", IoUid: 1000, NoPivotRoot: true, SystemdCgroup: true}, ""},
		{"gVisor's", "/usr/local/bin/containerd-shim-runsc-v1", map[string]any{"TypeUrl": "io.containerd.runsc.v1.options", "ConfigPath": "/etc/rtshimd/runsc.toml"}, true,
			&runtimeoptions.Options{TypeUrl: "io.containerd.runsc.v1.options", ConfigPath: "/etc/rtshimd/runsc.toml"}, ""},
		{"a body", "/usr/bin/containerd-shim-kata-v2", map[string]any{"ConfigBody": "[hypervisor.qemu]\n"}, false,
			&runtimeoptions.Options{ConfigBody: []byte("[hypervisor.qemu]\n")}, ""},
		{"unknown", "/usr/bin/containerd-shim-runc-v2", map[string]any{"BinaryNme": "x"}, false, nil, "BinaryNme is not an option of containerd.runc.v1.Options (NoPivotRoot, "},
		{"not exported", "/usr/bin/containerd-shim-runc-v2", map[string]any{"state": "x"}, false, nil, "state is not an option"},
		{"runc's on another shim", "/usr/bin/containerd-shim-kata-v2", map[string]any{"BinaryName": "x"}, false, nil, "BinaryName is not an option of runtimeoptions.v1.Options"},
		{"from a record (JSON numbers)", "/usr/bin/containerd-shim-runc-v2", map[string]any{"IoGid": float64(2000)}, false, &runcopts.Options{IoGid: 2000}, ""},
		{"wrong type", "/usr/bin/containerd-shim-runc-v2", map[string]any{"IoUid": "1000"}, false, nil, "IoUid: want a number"},
		{"out of range", "/usr/bin/containerd-shim-runc-v2", map[string]any{"IoUid": int64(-1)}, false, nil, "IoUid: want a number"},
		{"bool", "/usr/bin/containerd-shim-runc-v2", map[string]any{"NoPivotRoot": "yes"}, false, nil, "NoPivotRoot: want true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := For(tc.binary, tc.table, tc.systemd)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == nil) || got != nil && !proto.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
