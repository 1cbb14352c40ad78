// Package docs holds the project's documentation; its tests keep DESIGN.md's map of
// packages, names and import arrows, in line with the source tree.
package docs

import (
	"io/fs"
	"os"
	"os/exec"
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

// The floors' diagram in DESIGN.md (the first code block under "## Packages") says what each
// floor imports among the floors; go list must agree both ways, and no arrow may point up
// (to a floor drawn above its importer).
func TestDesignMapArrows(t *testing.T) {
	design, err := os.ReadFile("DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	drawn, order := designArrows(t, string(design))
	floors := map[string]bool{}
	for _, p := range order {
		floors[p] = true
	}
	if len(order) < 10 {
		t.Fatalf("read only %d floors from DESIGN.md's diagram", len(order))
	}

	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the imports with")
	}
	cmd := exec.Command(goBin, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./cmd/...", "./internal/...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/rtshimd/rtshimd/"
	real := map[string]map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		from := strings.TrimPrefix(f[0], mod)
		if !floors[from] {
			continue
		}
		real[from] = map[string]bool{}
		for _, imp := range f[1:] {
			if to := strings.TrimPrefix(imp, mod); floors[to] {
				real[from][to] = true
			}
		}
	}

	pos := map[string]int{}
	for i, p := range order {
		pos[p] = i
	}
	for _, from := range order {
		if real[from] == nil {
			t.Errorf("DESIGN.md draws %s, which go list does not know", from)
			continue
		}
		for to := range drawn[from] {
			if !real[from][to] {
				t.Errorf("DESIGN.md draws %s → %s, but %s does not import it", from, to, from)
			}
			if pos[to] <= pos[from] {
				t.Errorf("DESIGN.md's arrow %s → %s points up: %s is drawn above its importer", from, to, to)
			}
		}
		for to := range real[from] {
			if !drawn[from][to] {
				t.Errorf("%s imports %s, and DESIGN.md's diagram does not draw it: add it to %s's line", from, to, from)
			}
		}
	}
}

// designArrows reads the diagram: "pkg → a, b," lines, continued on lines that start with
// spaces; order is the floors top to bottom.
func designArrows(t *testing.T, design string) (map[string]map[string]bool, []string) {
	t.Helper()
	sec := strings.Index(design, "## Packages")
	if sec < 0 {
		t.Fatal("DESIGN.md has no ## Packages section")
	}
	body := design[sec:]
	a := strings.Index(body, "```\n")
	if a < 0 {
		t.Fatal("no code block under ## Packages")
	}
	body = body[a+4:]
	b := strings.Index(body, "```")
	if b < 0 {
		t.Fatal("the diagram's code block is not closed")
	}
	drawn := map[string]map[string]bool{}
	var order []string
	cur := ""
	add := func(list string) {
		for _, to := range strings.Split(list, ",") {
			if to = strings.TrimSpace(to); to != "" {
				drawn[cur][to] = true
			}
		}
	}
	for _, line := range strings.Split(body[:b], "\n") {
		switch {
		case strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, " "):
			if cur == "" {
				t.Fatalf("diagram line %q continues nothing", line)
			}
			add(line)
		default:
			from, list, ok := strings.Cut(line, "→")
			if !ok {
				t.Fatalf("diagram line %q has no →", line)
			}
			cur = strings.TrimSpace(from)
			if drawn[cur] != nil {
				t.Fatalf("diagram draws %s twice", cur)
			}
			drawn[cur] = map[string]bool{}
			order = append(order, cur)
			add(list)
		}
	}
	return drawn, order
}
