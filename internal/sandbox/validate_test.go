package sandbox

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

func validPod() *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web-0", Namespace: "default", Uid: "0b6b0d7e-1"},
		Hostname: "web-0.example",
	}
}

func withPort(pm *runtimeapi.PortMapping) func(*runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
	return func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
		c.PortMappings = []*runtimeapi.PortMapping{pm}
		return c
	}
}

func withSysctls(s map[string]string) func(*runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
	return func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
		c.Linux = &runtimeapi.LinuxPodSandboxConfig{Sysctls: s}
		return c
	}
}

func TestValidateCgroupParent(t *testing.T) {
	for _, c := range []struct {
		parent, driver, want string
	}{
		{"", "cgroupfs", ""},
		{"/kubepods/burstable/pod1", "cgroupfs", ""},
		{"kubepods/pod1", "cgroupfs", "absolute"},
		{"/kubepods/../../system.slice", "cgroupfs", "'..'"},
		{"kubepods-burstable-pod1.slice", "systemd", ""},
		{"../x.slice", "systemd", "'..'"},
	} {
		err := validateCgroupParent(c.parent, c.driver)
		if c.want == "" {
			if err != nil {
				t.Errorf("%q (%s): %v", c.parent, c.driver, err)
			}
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "config.linux.cgroup_parent") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q (%s): %v, want InvalidArgument naming the field and %s", c.parent, c.driver, err, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig
		field  string // "" means valid
	}{
		{"valid", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { return c }, ""},
		{"valid without hostname", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Hostname = ""; return c }, ""},
		{"nil config", func(*runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { return nil }, "config is required"},
		{"no metadata", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata = nil; return c }, "config.metadata is required"},
		{"empty name", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Name = ""; return c }, "config.metadata.name"},
		{"empty namespace", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Namespace = ""; return c }, "config.metadata.namespace"},
		{"empty uid", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Uid = ""; return c }, "config.metadata.uid"},
		{"underscore in name", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Name = "a_b"; return c }, "config.metadata.name"},
		{"slash in uid", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Metadata.Uid = "../x"; return c }, "config.metadata.uid"},
		{"FQDN hostname ending with a dot", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Hostname = "web-0.t.ns.svc."
			return c
		}, ""},
		{"hostname with an empty label", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Hostname = "a..b"; return c }, "config.hostname"},
		{"hostname that is only a dot", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Hostname = "."; return c }, "config.hostname"},
		{"upper-case hostname", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Hostname = "Web"; return c }, "config.hostname"},
		{"hostname with space", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig { c.Hostname = "a b"; return c }, "config.hostname"},
		{"hostname too long", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Hostname = strings.Repeat("a", 65)
			return c
		}, "config.hostname"},
		{"pid TARGET", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "x"},
			}}
			return c
		}, "namespace_options.pid TARGET"},
		{"run_as_group without run_as_user", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				RunAsGroup: &runtimeapi.Int64Value{Value: 1000},
			}}
			return c
		}, "config.linux.security_context.run_as_group 1000 is set without run_as_user"},
		{"run_as_group with run_as_user", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				RunAsUser: &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 1000},
			}}
			return c
		}, ""},
		{"relative log_directory", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.LogDirectory = "var/log/pods/x"
			return c
		}, "config.log_directory"},
		{"absolute log_directory", func(c *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
			c.LogDirectory = "/var/log/pods/x"
			return c
		}, ""},
		{"valid port mapping", withPort(&runtimeapi.PortMapping{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353, HostIp: "127.0.0.1"}), ""},
		{"container_port 0", withPort(&runtimeapi.PortMapping{ContainerPort: 0, HostPort: 80}), "config.port_mappings[0].container_port 0"},
		{"container_port too big", withPort(&runtimeapi.PortMapping{ContainerPort: 70000}), "container_port 70000"},
		{"host_port negative", withPort(&runtimeapi.PortMapping{ContainerPort: 80, HostPort: -1}), "host_port -1"},
		{"host_port too big", withPort(&runtimeapi.PortMapping{ContainerPort: 80, HostPort: 65536}), "host_port 65536"},
		{"unknown protocol", withPort(&runtimeapi.PortMapping{ContainerPort: 80, Protocol: 7}), "protocol 7"},
		{"bad host_ip", withPort(&runtimeapi.PortMapping{ContainerPort: 80, HostIp: "nope"}), "host_ip"},
		{"valid sysctls", withSysctls(map[string]string{"net.ipv4.ip_unprivileged_port_start": "0", "kernel.shm_rmid_forced": "1", "net/ipv4/conf/eth0/forwarding": "1"}), ""},
		{"sysctl with space", withSysctls(map[string]string{"net.ipv4 x": "1"}), "config.linux.sysctls"},
		{"sysctl climbing", withSysctls(map[string]string{"../../etc/passwd": "1"}), "config.linux.sysctls"},
		{"sysctl value with newline", withSysctls(map[string]string{"kernel.msgmax": "1\n2"}), "config.linux.sysctls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validate(tt.mutate(validPod()))
			if tt.field == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("validate = %v, want ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("validate = %q, want it to name %q", err, tt.field)
			}
		})
	}
}
