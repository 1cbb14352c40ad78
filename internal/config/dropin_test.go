package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeConfig writes main as DIR/config.toml and each drop-in (name: text) into
// DIR/config.d; it returns the main file's path.
func writeConfig(t *testing.T, main string, dropIns map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	if dropIns != nil {
		if err := os.MkdirAll(DropInDir(path), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range dropIns {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(DropInDir(path), name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(DropInDir(path), name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// Drop-ins merge in name order over the main file: a new handler row, one key of an
// existing row changed (the rest of the row kept), a later file over an earlier one, an
// array replaced; other files ignored.
func TestDropInsMerge(t *testing.T) {
	main := "log_level = \"info\"\n" + base + `
[image]
pull_progress_timeout = "3m"
[[image.registries]]
prefix = "docker.io"
location = "mirror-a.example"
`
	path := writeConfig(t, main, map[string]string{
		"20-later.toml": "log_level = \"debug\"\n",
		"10-kata.toml": `log_level = "warn"
[handlers.kata]
runtime_type = "shim-v2"
runtime_path = "/usr/bin/containerd-shim-kata-v2"
[handlers.runc]
runtime_args = ["--debug"]
[[image.registries]]
prefix = "docker.io"
location = "mirror-b.example"
`,
		"README":        "not toml = [",
		"30-dir.toml/x": "",
	})
	only, err := Parse("config.toml", []byte(main))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d := DropInDir(path)
	if want := []string{filepath.Join(d, "10-kata.toml"), filepath.Join(d, "20-later.toml")}; !reflect.DeepEqual(c.DropIns, want) {
		t.Errorf("DropIns = %v, want %v", c.DropIns, want)
	}
	if c.LogLevel != "debug" {
		t.Errorf("log_level = %q, want the last drop-in's", c.LogLevel)
	}
	if k := c.Handlers["kata"]; k == nil || k.RuntimePath != "/usr/bin/containerd-shim-kata-v2" || k.RuntimeType != "shim-v2" {
		t.Errorf("the drop-in's row: %+v", k)
	}
	if r := c.Handlers["runc"]; r == nil || r.RuntimePath != "/usr/sbin/runc" || !reflect.DeepEqual(r.RuntimeArgs, []string{"--debug"}) {
		t.Errorf("runc's row merged key by key: %+v", r)
	}
	if len(c.Image.Registries) != 1 || c.Image.Registries[0].Location != "mirror-b.example" {
		t.Errorf("registries = %+v, want the drop-in's array in place of the main file's", c.Image.Registries)
	}
	if c.Image.PullProgressTimeout.String() != "3m0s" {
		t.Errorf("a key no drop-in sets keeps the main file's value: %v", c.Image.PullProgressTimeout)
	}
	if c.Hash == only.Hash || c.Path != path {
		t.Errorf("hash %s (main alone %s), path %s", c.Hash, only.Hash, c.Path)
	}
	// Without drop-ins the hash is the file's, as before.
	if c2, err := Load(writeConfig(t, main, nil)); err != nil || c2.Hash != only.Hash || len(c2.DropIns) != 0 {
		t.Errorf("no config.d: %v, hash %s want %s, drop-ins %v", err, c2.Hash, only.Hash, c2.DropIns)
	}
}

// A mistake in a drop-in is reported with the drop-in's name and line; one in the main
// file with the main file's, whatever the drop-ins set around it.
func TestDropInErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		main    string
		dropIns map[string]string
		want    string // the error's prefix, relative to the config dir
		has     string
	}{
		{"unknown key", base, map[string]string{"10-a.toml": "\n[handlers.runc]\nruntime_pth = \"/x\"\n"},
			"config.d/10-a.toml:3: unknown key \"handlers.runc.runtime_pth\"", ""},
		{"syntax", base, map[string]string{"10-a.toml": "log_level = = 1\n"}, "config.d/10-a.toml:1: ", "expected value"},
		{"bad value", base, map[string]string{"10-a.toml": "log_level = \"info\"\ncgroup_driver = \"nope\"\n"},
			"config.d/10-a.toml:2: cgroup_driver must be", ""},
		{"row completed by no file", base, map[string]string{"10-a.toml": "[handlers.crun]\nsandbox = \"shared\"\n"},
			"config.d/10-a.toml:1: handler \"crun\": runtime_path is required", ""},
		{"main file's own mistake", "cgroup_driver = \"nope\"\n" + base, map[string]string{"10-a.toml": "log_level = \"info\"\n"},
			"config.toml:1: cgroup_driver must be", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.main, tc.dropIns)
			_, err := Load(path)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := strings.TrimPrefix(err.Error(), filepath.Dir(path)+"/")
			if !strings.HasPrefix(msg, tc.want) || !strings.Contains(msg, tc.has) {
				t.Errorf("error %q, want prefix %q containing %q", msg, tc.want, tc.has)
			}
		})
	}
}

// A drop-in, or config.d, that a user other than root could write is refused, naming the
// file, and so is a drop-in that is a symlink leaving config.d: a drop-in can name any
// binary to run as root. A symlink inside config.d is read.
func TestDropInsTrusted(t *testing.T) {
	good := "log_level = \"debug\"\n"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the file the error must name
		want  []string
	}{
		{"writable by others", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, "10-a.toml")
			chmod(t, f, 0o666)
			return f
		}, []string{"config drop-in ", "has mode 0666, writable by group or others: refused"}},
		{"writable by group", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, "10-a.toml")
			chmod(t, f, 0o664)
			return f
		}, []string{"has mode 0664, writable by group or others: refused"}},
		{"owned by another user", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, "10-a.toml")
			chown(t, f, 65534)
			return f
		}, []string{"is owned by uid 65534, not root: refused"}},
		{"directory writable by others", func(t *testing.T, dir string) string {
			chmod(t, dir, 0o777)
			return dir
		}, []string{"config drop-in directory ", "has mode 0777"}},
		{"directory owned by another user", func(t *testing.T, dir string) string {
			chown(t, dir, 65534)
			return dir
		}, []string{"config drop-in directory ", "is owned by uid 65534, not root: refused"}},
		{"symlink leaving config.d", func(t *testing.T, dir string) string {
			outside := filepath.Join(t.TempDir(), "evil.toml")
			if err := os.WriteFile(outside, []byte(good), 0o644); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, "20-link.toml")
			if err := os.Symlink(outside, f); err != nil {
				t.Fatal(err)
			}
			return f
		}, []string{"is a symlink to ", "outside "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, base, map[string]string{"10-a.toml": good})
			named := tc.setup(t, DropInDir(path))
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), named) {
				t.Fatalf("Load: %v, want an error naming %s", err, named)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load: %v, want it to say %q", err, w)
				}
			}
		})
	}

	path := writeConfig(t, base, map[string]string{"sub/a.conf": good})
	if err := os.Symlink(filepath.Join(DropInDir(path), "sub", "a.conf"), filepath.Join(DropInDir(path), "10-in.toml")); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(path); err != nil || c.LogLevel != "debug" {
		t.Errorf("symlink inside config.d: %v (log_level %v), want it read", err, c)
	}
}

func chmod(t *testing.T, name string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(name, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, name string, uid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	if err := os.Chown(name, uid, -1); err != nil {
		t.Fatal(err)
	}
}
