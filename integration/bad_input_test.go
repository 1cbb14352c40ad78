//go:build integration

package integration

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Every invalid request gets InvalidArgument with a message naming the field and the
// value, and leaves nothing behind.
func TestBadSandboxRequests(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	cases := []struct {
		name   string
		mutate func(*runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig
		want   []string
	}{
		{"no config", func(*runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { return nil }, []string{"config is required"}},
		{"no metadata", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata = nil; return c }, []string{"config.metadata"}},
		{"empty name", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Name = ""; return c }, []string{"config.metadata.name"}},
		{"empty uid", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Uid = ""; return c }, []string{"config.metadata.uid"}},
		{"underscore in namespace", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Metadata.Namespace = "a_b"
			return c
		}, []string{"config.metadata.namespace", `"a_b"`}},
		{"bad hostname", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Hostname = "Not A Host!"
			return c
		}, []string{"config.hostname", `"Not A Host!"`}},
		{"pid target", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_TARGET
			return c
		}, []string{"namespace_options.pid", "TARGET"}},
		{"bad dns server", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.DnsConfig.Servers = []string{"10.0.0.1", "10.0.0.2 evil"}
			return c
		}, []string{"dns_config.servers[1]", `"10.0.0.2 evil"`}},
		{"relative log_directory", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.LogDirectory = "var/log/pods/x"
			return c
		}, []string{"config.log_directory", `"var/log/pods/x"`}},
		{"container_port out of range", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80}, {ContainerPort: 65536, HostPort: 8080}}
			return c
		}, []string{"config.port_mappings[1].container_port", "65536"}},
		{"host_port out of range", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: -8}}
			return c
		}, []string{"config.port_mappings[0].host_port", "-8"}},
		{"bad sysctl name", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux.Sysctls = map[string]string{"../../proc/sysrq-trigger": "b"}
			return c
		}, []string{"config.linux.sysctls", "sysrq-trigger"}},
		{"cgroup_parent climbing", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux.CgroupParent = "/rtshimd-test/../../escape"
			return c
		}, []string{"config.linux.cgroup_parent", "'..'"}},
		{"relative cgroup_parent", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux.CgroupParent = "rtshimd-test/pod"
			return c
		}, []string{"config.linux.cgroup_parent", "absolute"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.mutate(podConfig("bad", runtimeapi.NamespaceMode_CONTAINER))
			_, err := d.RS.RunPodSandbox(ctx, cfg, "runc")
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(status.Convert(err).Message(), w) {
					t.Errorf("error %q does not name %s", status.Convert(err).Message(), w)
				}
			}
			assertNoSandboxes(t, d)
		})
	}
	t.Run("empty id", func(t *testing.T) {
		_, err := d.RS.PodSandboxStatus(ctx, "", false)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "pod_sandbox_id") {
			t.Errorf("PodSandboxStatus(\"\"): %v", err)
		}
	})
	t.Run("unknown id", func(t *testing.T) {
		_, err := d.RS.PodSandboxStatus(ctx, "0123456789abcdef", false)
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("PodSandboxStatus(unknown): %v", err)
		}
	})
}

// RPCs not built answer Unimplemented, naming themselves.
func TestUnimplementedRPCsNameThemselves(t *testing.T) {
	d := newDaemon(t)
	err := d.RS.CheckpointPod(ctxT(t), &runtimeapi.CheckpointPodRequest{PodSandboxId: "x"})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "CheckpointPod") {
		t.Errorf("CheckpointPod: %v", err)
	}
}
