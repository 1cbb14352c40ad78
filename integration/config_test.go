//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every mistake in a config file stops the daemon at start with "file:line: message",
// and `rtshimd config check` says the same without starting anything.
func TestConfigMistakes(t *testing.T) {
	const good = `default_handler = "runc"

[handlers.runc]
runtime_path = "/usr/sbin/runc"
`
	cases := []struct {
		name, text string
		line       int
		want       string
	}{
		{"syntax", "default_handler = \"runc\n[handlers.runc]\n", 1, "strings cannot contain newlines"},
		{"unknown top-level key", "sokcet = \"/run/x.sock\"\n" + good, 1, `unknown key "sokcet"`},
		{"unknown handler key", good + "runtime_pth = \"/usr/bin/x\"\n", 5, `unknown key "handlers.runc.runtime_pth"`},
		{"handler name not a DNS label", good + "\n[handlers.Fast_Runtime]\nruntime_path = \"/usr/sbin/runc\"\n", 6, `handler name "Fast_Runtime" is not a DNS-1123 label`},
		{"default handler missing", "default_handler = \"kata\"\n\n[handlers.runc]\nruntime_path = \"/usr/sbin/runc\"\n", 1, `default_handler "kata" is not a configured handler (configured: runc)`},
		{"relative runtime_path", "default_handler = \"runc\"\n[handlers.runc]\nruntime_path = \"runc\"\n", 3, `runtime_path must be an absolute path, got "runc"`},
		{"relative runtime_root", good + "runtime_root = \"state/runc\"\n", 5, `runtime_root must be an absolute path, got "state/runc"`},
		{"bad sandbox mode", good + "sandbox = \"vm\"\n", 5, `sandbox must be "namespaces" or "shared", got "vm"`},
		{"unknown runtime type", good + "runtime_type = \"vm\"\n", 5, `runtime_type must be one of oci, oci-sandbox, shim-v2, got "vm"`},
		{"bad overhead", good + "[handlers.runc.overhead]\nmemory = \"lots\"\n", 6, `"lots" is not a memory quantity`},
		{"wrong type", "default_handler = \"runc\"\n[handlers.runc]\nruntime_path = 42\n", 3, "runtime_path"},
		{"bad cgroup driver", "cgroup_driver = \"systemd-ish\"\n" + good, 1, `cgroup_driver must be "cgroupfs" or "systemd", got "systemd-ish"`},
		{"relative socket", "socket = \"rtshimd.sock\"\n" + good, 1, `socket must be an absolute path, got "rtshimd.sock"`},
		{"tracing endpoint not host:port", good + "[tracing]\nenabled = true\nendpoint = \"collector\"\n", 7, `tracing.endpoint "collector" is not host:port`},
		{"relative signature policy", good + "[image]\nsignature_policy = \"policy.json\"\n", 6, `image.signature_policy must be an absolute path, got "policy.json"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			prefix := path + ":" + itoa(tc.line) + ": "
			for _, args := range [][]string{{"config", "check", "--config", path}, {"--config", path}} {
				cmd := exec.Command(filepath.Join(binDir, "rtshimd"), args...)
				done := make(chan struct{})
				var out []byte
				var err error
				go func() { out, err = cmd.CombinedOutput(); close(done) }()
				select {
				case <-done:
				case <-time.After(60 * time.Second):
					_ = cmd.Process.Kill()
					t.Fatalf("rtshimd %v did not stop on a bad config", args)
				}
				if err == nil {
					t.Errorf("rtshimd %v accepted the config:\n%s", args, out)
					continue
				}
				msg := string(out)
				if !strings.Contains(msg, prefix) || !strings.Contains(msg, tc.want) {
					t.Errorf("rtshimd %v said:\n%s\nwant %q ... %q", args, msg, prefix, tc.want)
				}
			}
		})
	}

	t.Run("good config checks ok", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(binDir, "rtshimd"), "config", "default").Output()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err = exec.Command(filepath.Join(binDir, "rtshimd"), "config", "check", "--config", path).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ok (7 handlers, default \"runc\")") {
			t.Errorf("config check of the shipped default: %v\n%s", err, out)
		}
	})
}
