// Package docs holds the project's documentation; its test keeps DESIGN.md's map of
// packages in line with the source tree.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Every Go package of the daemon and its binaries (cmd/, internal/, configs) is
// named in DESIGN.md, so that the map a newcomer reads first has no blank spots; a
// package added without a line there fails here.
func TestDesignMapCoversEveryPackage(t *testing.T) {
	design, err := os.ReadFile("DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]bool{}
	for _, root := range []string{"cmd", "internal", "configs"} {
		err := filepath.WalkDir(filepath.Join("..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				rel, _ := filepath.Rel("..", filepath.Dir(path))
				pkgs[filepath.ToSlash(rel)] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages: is the test run from docs/?", len(pkgs))
	}
	var missing []string
	for p := range pkgs {
		// The name whole: "internal/kind" is not named by "internal/kind/ocicli".
		if !regexp.MustCompile(regexp.QuoteMeta(p) + `($|[^/\w-])`).Match(design) {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("DESIGN.md does not name these packages; add each to its map (## Packages) with what it holds:\n  %s", strings.Join(missing, "\n  "))
	}
}
