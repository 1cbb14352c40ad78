package sandbox

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/pkg/errdefs"
)

func validPod() *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web-0", Namespace: "default", Uid: "0b6b0d7e-1"},
		Hostname: "web-0.example",
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
