package config

import (
	"strings"
	"testing"
)

// FuzzParse: any bytes give a config or an error naming the file (file:line where there is
// one), never a panic; a config that parses re-validates.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", "default_handler = \"runc\"\n[handlers.runc]\nruntime_path = \"/usr/sbin/runc\"\n",
		"[handlers.x]\nruntime_type = \"shim-v2\"\nruntime_path = \"/bin/true\"\n[handlers.x.overhead]\nmemory = \"64Mi\"\ncpu = \"100m\"\n",
		"[network]\ncni_timeout = \"3s\"\n[nri]\nenable = false\n[[image.registries]]\nprefix = \"a\"\nlocation = \"b\"\n",
		"log_level = 7\n", "[handlers]\nx = 1\n", "cgroup_driver = \"systemd\"\n[cdi]\nspec_dirs = []\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if c == nil || c.Hash == "" {
			t.Fatalf("no config and no error")
		}
	})
}
