package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/config"
)

// Which policy a pull gets: a namespace's own file when there is one, the node's
// otherwise; a name that could leave the directory is refused; a policy that asks for
// nothing is told apart from one that asks for a signature anywhere a pull can reach.
func TestPolicyFor(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "policy.json")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(node, `{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker-daemon": {"": [{"type": "reject"}]}}}`)
	nsDir := filepath.Join(dir, "ns")
	if err := os.Mkdir(nsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(nsDir, "strict.json"), `{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {"example.com": [{"type": "reject"}]}}}`)
	c, err := newSigConfig(config.Image{SignaturePolicy: node, SignaturePolicyDir: nsDir})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns, path string
		anything bool
	}{
		{"", node, true}, // docker-daemon's scope is no pull's
		{"default", node, true},
		{"strict", filepath.Join(nsDir, "strict.json"), false},
	} {
		path, p, err := c.policyFor(tc.ns)
		if err != nil || path != tc.path || acceptsAnything(p) != tc.anything {
			t.Errorf("namespace %q: %s (%v), accepts anything %v; want %s, %v", tc.ns, path, err, acceptsAnything(p), tc.path, tc.anything)
		}
	}
	if _, _, err := c.policyFor("../ns/strict"); err == nil || !strings.Contains(err.Error(), "sandbox_config.metadata.namespace") {
		t.Errorf("a namespace that is not a name: %v", err)
	}
	write(node, "{")
	if _, err := newSigConfig(config.Image{SignaturePolicy: node}); err == nil || !strings.Contains(err.Error(), "image.signature_policy "+node) {
		t.Errorf("a policy that does not parse: %v, want an error naming the key and the file", err)
	}
	if _, _, err := c.policyFor(""); err == nil || !strings.Contains(err.Error(), node) {
		t.Errorf("a policy broken after the start: %v, want the pull's error naming it", err)
	}
	if _, err := newSigConfig(config.Image{SignaturePolicyDir: node}); err == nil || !strings.Contains(err.Error(), "image.signature_policy_dir") {
		t.Errorf("signature_policy_dir a file: %v", err)
	}
}
