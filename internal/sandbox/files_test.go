package sandbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// nodeResolv is what resolvConf must return when the pod has no DNS config.
func nodeResolv(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("/etc/resolv.conf")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Skipf("cannot read node resolv.conf: %v", err)
	}
	return b
}

func TestResolvConf(t *testing.T) {
	tests := []struct {
		name string
		dns  *runtimeapi.DNSConfig
		want string
	}{
		{"servers only", &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10", "fd00::a"}},
			"nameserver 10.0.0.10\nnameserver fd00::a\n"},
		{"all", &runtimeapi.DNSConfig{
			Servers:  []string{"10.0.0.10"},
			Searches: []string{"default.svc.cluster.local", "svc.cluster.local"},
			Options:  []string{"ndots:5", "edns0"},
		}, "nameserver 10.0.0.10\nsearch default.svc.cluster.local svc.cluster.local\noptions ndots:5 edns0\n"},
		{"searches only", &runtimeapi.DNSConfig{Searches: []string{"example.com"}}, "search example.com\n"},
		{"options only", &runtimeapi.DNSConfig{Options: []string{"rotate"}}, "options rotate\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolvConf(tt.dns)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("resolvConf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResolvConfNodeDefault(t *testing.T) {
	want := nodeResolv(t)
	for _, dns := range []*runtimeapi.DNSConfig{nil, {}} {
		got, err := resolvConf(dns)
		if err != nil {
			t.Fatalf("resolvConf(%v): %v", dns, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("resolvConf(%v) = %q, want the node's %q", dns, got, want)
		}
	}
}

func TestResolvConfRejects(t *testing.T) {
	tests := []struct {
		dns   *runtimeapi.DNSConfig
		field string
	}{
		{&runtimeapi.DNSConfig{Servers: []string{"1.1.1.1", "2.2.2.2 3.3.3.3"}}, "dns_config.servers[1]"},
		{&runtimeapi.DNSConfig{Servers: []string{""}}, "dns_config.servers[0]"},
		{&runtimeapi.DNSConfig{Servers: []string{"1.1.1.1\nnameserver 6.6.6.6"}}, "dns_config.servers[0]"},
		{&runtimeapi.DNSConfig{Searches: []string{"a.com", "b.com", "c\tcom"}}, "dns_config.searches[2]"},
		{&runtimeapi.DNSConfig{Searches: []string{"a.com", ""}}, "dns_config.searches[1]"},
		{&runtimeapi.DNSConfig{Options: []string{"ndots:5 x"}}, "dns_config.options[0]"},
		{&runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Options: []string{"a", "b\n"}}, "dns_config.options[1]"},
	}
	for _, tt := range tests {
		got, err := resolvConf(tt.dns)
		if err == nil {
			t.Errorf("resolvConf(%v) = %q, want error naming %s", tt.dns, got, tt.field)
			continue
		}
		if !strings.HasPrefix(err.Error(), tt.field+" ") {
			t.Errorf("resolvConf(%v) error = %q, want it to name %s", tt.dns, err, tt.field)
		}
	}
}

func TestWritePodFiles(t *testing.T) {
	cfg := &runtimeapi.PodSandboxConfig{DnsConfig: &runtimeapi.DNSConfig{
		Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local"}, Options: []string{"ndots:5"},
	}}
	dir := t.TempDir()
	if err := writePodFiles(dir, "web-0", cfg, false); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read(HostnameFile); got != "web-0\n" {
		t.Errorf("hostname = %q", got)
	}
	if got, want := read(ResolvFile), "nameserver 10.96.0.10\nsearch ns.svc.cluster.local\noptions ndots:5\n"; got != want {
		t.Errorf("resolv.conf = %q, want %q", got, want)
	}
	hosts := read(HostsFile)
	for _, want := range []string{"127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n"} {
		if !strings.Contains(hosts, want) {
			t.Errorf("hosts = %q, want a line %q", hosts, want)
		}
	}
}

func TestWritePodFilesHostNetwork(t *testing.T) {
	node, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Skipf("no node /etc/hosts: %v", err)
	}
	dir := t.TempDir()
	if err := writePodFiles(dir, "node1", &runtimeapi.PodSandboxConfig{}, true); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, HostsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, node) {
		t.Errorf("hosts of a host-network pod = %q, want the node's %q", got, node)
	}
	resolv, err := os.ReadFile(filepath.Join(dir, ResolvFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := nodeResolv(t); !bytes.Equal(resolv, want) {
		t.Errorf("resolv.conf without dns_config = %q, want the node's %q", resolv, want)
	}
}

func TestWritePodFilesErrors(t *testing.T) {
	bad := &runtimeapi.PodSandboxConfig{DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"a b"}}}
	dir := t.TempDir()
	if err := writePodFiles(dir, "h", bad, false); err == nil || !strings.Contains(err.Error(), "dns_config.servers[0]") {
		t.Errorf("bad dns_config: err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ResolvFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("resolv.conf written despite bad dns_config: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if err := writePodFiles(missing, "h", &runtimeapi.PodSandboxConfig{}, false); err == nil || !strings.Contains(err.Error(), "write hostname") {
		t.Errorf("missing dir: err = %v, want a write hostname error", err)
	}
}

func TestMakeName(t *testing.T) {
	tests := []struct {
		md   *runtimeapi.PodSandboxMetadata
		want string
	}{
		{&runtimeapi.PodSandboxMetadata{Name: "web-0", Namespace: "default", Uid: "1234-abcd", Attempt: 3}, "web-0_default_1234-abcd_3"},
		{&runtimeapi.PodSandboxMetadata{Name: "a", Namespace: "b", Uid: "c"}, "a_b_c_0"},
	}
	for _, tt := range tests {
		if got := MakeName(tt.md); got != tt.want {
			t.Errorf("MakeName(%v) = %q, want %q", tt.md, got, tt.want)
		}
	}
}
