package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// The TOML examples of the README and docs/ are parts of the one commented reference,
// configs/config.toml. TestDocsExamples keeps them so: every ```toml block must parse with
// Parse, the daemon's own parser and validator, and a handler row shown both in an example
// and in the reference must say the same as the reference wherever the example sets a key.
//
// A block that is only some sections ([nri], [stats], ...) is checked as a whole file would
// be: Parse needs a handler table and default_handler, so a block without them gets a runc
// row and default_handler added around it (its own lines keep their numbers in errors). A
// block whose info string is "toml partial" is skipped; none needs to be today.

const (
	docsReadme    = "../../README.md"
	docsDir       = "../../docs"
	docsReference = "../../configs/config.toml"
)

func TestDocsExamples(t *testing.T) {
	ref, err := Load(docsReference)
	if err != nil {
		t.Fatalf("the reference does not parse: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{docsReadme}, files...)
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.ToSlash(f), "../../")
		n, problems := checkDocExamples(name, data, ref)
		checked += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	// The README's handler table alone is one block: finding none means the search broke.
	if checked == 0 {
		t.Fatalf("no ```toml block found in %s or %s/*.md", docsReadme, docsDir)
	}
	t.Logf("%d TOML examples checked against %s", checked, docsReference)
}

// TestDocsExamplesChecker feeds the checker examples that must fail, and one that must not,
// so that TestDocsExamples passing means the docs are right, not that the check is blind.
func TestDocsExamplesChecker(t *testing.T) {
	ref, err := Parse("ref.toml", []byte(`default_handler = "runc"
[handlers.runc]
runtime_path = "/usr/sbin/runc"
[handlers.gvisor]
runtime_type = "oci-sandbox"
runtime_path = "/usr/local/bin/runsc"
runtime_args = ["--oci-seccomp"]
[handlers.gvisor.overhead]
memory = "64Mi"
[handlers.gvisor.features]
host_pid = false
`))
	if err != nil {
		t.Fatal(err)
	}
	doc := "# x\n" + // line 1
		"```toml\n" + // 2
		"[nri]\n" + // 3: a section alone is fine
		"enable = false\n" + // 4
		"```\n" + // 5
		"```toml\n" + // 6
		"[stats]\n" + // 7
		"collection_period = \"10ms\"\n" + // 8: below 1s
		"```\n" + // 9
		"```toml partial\n" + // 10: skipped
		"runtime_path =\n" + // 11
		"```\n" + // 12
		"````markdown\n" + // 13: a fence inside another is text
		"```toml\n" + // 14
		"not = [toml\n" + // 15
		"```\n" + // 16
		"````\n" + // 17
		"```toml\n" + // 18
		"[handlers.gvisor]\n" + // 19
		"runtime_path = \"/usr/bin/runsc\"\n" + // 20: differs
		"runtime_args = [\"--network=host\"]\n" + // 21: differs
		"[handlers.gvisor.overhead]\n" + // 22
		"memory = \"64Mi\"\n" + // 23: same
		"[handlers.gvisor.features]\n" + // 24
		"host_network = true\n" + // 25: the reference declares none
		"[handlers.other]\n" + // 26: not in the reference: anything goes
		"runtime_path = \"/bin/other\"\n" + // 27
		"```\n" + // 28
		"```toml\n" + // 29
		"[handlers.runc]\n" + // 30
		"runtime_pth = \"/usr/sbin/runc\"\n" + // 31: unknown key
		"```\n" + // 32
		"```toml\n" + // 33
		"[handlers.runc]\n" + // 34
		"runtime_path = \"/usr/sbin/runc\"\n" + // 35
		"pod_annotations = [\"io.katacontainers.*\"]\n" + // 36: the reference has none
		"```\n" // 37
	n, problems := checkDocExamples("x.md", []byte(doc), ref)
	if n != 5 {
		t.Errorf("checked %d blocks, want 5 (the partial one and the nested one not)", n)
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{
		`x.md:8: stats.collection_period must be "0"`,
		`x.md:18: handler "gvisor": runtime_path is "/usr/bin/runsc", configs/config.toml has "/usr/local/bin/runsc"`,
		`x.md:18: handler "gvisor": runtime_type is "oci", configs/config.toml has "oci-sandbox"`,
		`x.md:18: handler "gvisor": runtime_args is ["--network=host"], configs/config.toml has ["--oci-seccomp"]`,
		`x.md:18: handler "gvisor": features.host_network is true, configs/config.toml does not declare it`,
		`x.md:31: unknown key "handlers.runc.runtime_pth"`,
		`x.md:33: handler "runc": pod_annotations is ["io.katacontainers.*"], configs/config.toml has []`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing problem %q; got:\n%s", want, got)
		}
	}
	if len(problems) != 7 {
		t.Errorf("got %d problems, want 7:\n%s", len(problems), got)
	}
}

// docBlock is a fenced code block whose info string starts with "toml".
type docBlock struct {
	line    int    // of the opening fence, 1-based
	partial bool   // info string "toml partial"
	text    []byte // the lines between the fences
}

var fenceOpen = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})[ \t]*([^`]*)$")

// tomlBlocks finds the fenced TOML blocks of a CommonMark document.
func tomlBlocks(md []byte) []docBlock {
	var (
		blocks []docBlock
		fence  string // the open fence, "" outside a block
		cur    *docBlock
		body   []string
	)
	for i, ln := range strings.Split(string(md), "\n") {
		if fence == "" {
			m := fenceOpen.FindStringSubmatch(ln)
			if m == nil {
				continue
			}
			fence = m[1]
			info := strings.Fields(m[2])
			if len(info) > 0 && info[0] == "toml" {
				cur = &docBlock{line: i + 1, partial: len(info) > 1 && info[1] == "partial"}
				body = nil
			}
			continue
		}
		t := strings.TrimLeft(ln, " ")
		if len(ln)-len(t) <= 3 && strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]+" \t") == "" {
			if cur != nil {
				cur.text = []byte(strings.Join(body, "\n") + "\n")
				blocks = append(blocks, *cur)
				cur = nil
			}
			fence = ""
			continue
		}
		if cur != nil {
			body = append(body, ln)
		}
	}
	return blocks
}

// checkDocExamples checks every TOML block of one document against the reference. It
// returns how many blocks it checked and each problem as "file:line: message".
func checkDocExamples(name string, md []byte, ref *Config) (int, []string) {
	var problems []string
	n := 0
	for _, b := range tomlBlocks(md) {
		if b.partial {
			continue
		}
		n++
		first := b.line + 1 // the block's first line in the document
		cfg, raw, err := parseExample(name, first, b.text)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		problems = append(problems, compareHandlers(fmt.Sprintf("%s:%d", name, b.line), cfg, raw, ref)...)
	}
	return n, problems
}

// parseExample parses one block with Parse, completed into a whole file if it lacks a
// handler table or default_handler. An error names the document's line where Parse named one.
func parseExample(name string, first int, text []byte) (*Config, map[string]any, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(text), &raw); err != nil {
		_, err := Parse(name, text)
		return nil, nil, docLine(err, name, first, 0, text)
	}
	prefix, suffix := "", ""
	handlers, _ := raw["handlers"].(map[string]any)
	if _, ok := raw["default_handler"]; !ok {
		def := "runc"
		if len(handlers) > 0 {
			names := make([]string, 0, len(handlers))
			for h := range handlers {
				names = append(names, h)
			}
			sort.Strings(names)
			def = names[0]
		}
		prefix = fmt.Sprintf("default_handler = %q\n", def)
	}
	if _, ok := raw["handlers"]; !ok {
		suffix = "\n[handlers.runc]\nruntime_path = \"/usr/sbin/runc\"\n"
	}
	cfg, err := Parse(name, []byte(prefix+string(text)+suffix))
	if err != nil {
		return nil, nil, docLine(err, name, first, strings.Count(prefix, "\n"), text)
	}
	return cfg, raw, nil
}

var parseLine = regexp.MustCompile(`^:(\d+): `)

// docLine turns Parse's "name:N: message" about a block into "name:LINE: message" about
// the document, where added lines were put before the block's text; a line of the
// completion (or no line) becomes the block's fence line.
func docLine(err error, name string, first, added int, text []byte) error {
	if err == nil {
		return fmt.Errorf("%s:%d: the block does not decode, yet Parse accepts it", name, first-1)
	}
	rest := strings.TrimPrefix(err.Error(), name)
	line := first - 1
	if m := parseLine.FindStringSubmatch(rest); m != nil {
		n, _ := strconv.Atoi(m[1])
		if n > added && n-added <= strings.Count(string(text), "\n") {
			line = first + n - added - 1
		}
		rest = rest[len(m[0]):]
	} else {
		rest = strings.TrimPrefix(rest, ": ")
	}
	return fmt.Errorf("%s:%d: %s", name, line, rest)
}

// compareHandlers checks each handler row of an example that the reference also has: the
// binary and the kind always (runtime_type as resolved, so a row that leaves out the
// reference's "oci-sandbox" is caught), the other keys where the example sets them.
func compareHandlers(at string, cfg *Config, raw map[string]any, ref *Config) []string {
	var problems []string
	rows, _ := raw["handlers"].(map[string]any)
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		want, ok := ref.Handlers[name]
		if !ok {
			continue
		}
		got := cfg.Handlers[name]
		set, _ := rows[name].(map[string]any)
		differ := func(key string, g, w any) {
			problems = append(problems, fmt.Sprintf("%s: handler %q: %s is %s, configs/config.toml has %s", at, name, key, show(g), show(w)))
		}
		if got.RuntimePath != want.RuntimePath {
			differ("runtime_path", got.RuntimePath, want.RuntimePath)
		}
		if got.RuntimeType != want.RuntimeType {
			differ("runtime_type", got.RuntimeType, want.RuntimeType)
		}
		if _, ok := set["runtime_root"]; ok && got.RuntimeRoot != want.RuntimeRoot {
			differ("runtime_root", got.RuntimeRoot, want.RuntimeRoot)
		}
		if _, ok := set["runtime_args"]; ok && !reflect.DeepEqual(got.RuntimeArgs, want.RuntimeArgs) {
			differ("runtime_args", got.RuntimeArgs, want.RuntimeArgs)
		}
		if _, ok := set["cni_conf_dir"]; ok && got.CNIConfDir != want.CNIConfDir {
			differ("cni_conf_dir", got.CNIConfDir, want.CNIConfDir)
		}
		if _, ok := set["cni_network"]; ok && got.CNINetwork != want.CNINetwork {
			differ("cni_network", got.CNINetwork, want.CNINetwork)
		}
		if _, ok := set["pod_annotations"]; ok && !reflect.DeepEqual(got.PodAnnotations, want.PodAnnotations) {
			differ("pod_annotations", got.PodAnnotations, want.PodAnnotations)
		}
		if _, ok := set["privileged_without_host_devices"]; ok && got.PrivilegedWithoutHostDevices != want.PrivilegedWithoutHostDevices {
			differ("privileged_without_host_devices", got.PrivilegedWithoutHostDevices, want.PrivilegedWithoutHostDevices)
		}
		if oh, ok := set["overhead"].(map[string]any); ok {
			if _, ok := oh["memory"]; ok && got.Overhead.MemoryBytes != want.Overhead.MemoryBytes {
				differ("overhead.memory", got.Overhead.Memory, want.Overhead.Memory)
			}
			if _, ok := oh["cpu"]; ok && got.Overhead.MilliCPU != want.Overhead.MilliCPU {
				differ("overhead.cpu", got.Overhead.CPU, want.Overhead.CPU)
			}
		}
		for _, f := range []struct {
			key       string
			got, want *bool
		}{
			{"host_network", got.Features.HostNetwork, want.Features.HostNetwork},
			{"host_pid", got.Features.HostPID, want.Features.HostPID},
			{"host_ipc", got.Features.HostIPC, want.Features.HostIPC},
			{"user_namespaces", got.Features.UserNamespaces, want.Features.UserNamespaces},
			{"recursive_read_only_mounts", got.Features.RecursiveReadOnlyMounts, want.Features.RecursiveReadOnlyMounts},
		} {
			switch {
			case f.got == nil:
			case f.want == nil:
				problems = append(problems, fmt.Sprintf("%s: handler %q: features.%s is %v, configs/config.toml does not declare it", at, name, f.key, *f.got))
			case *f.got != *f.want:
				differ("features."+f.key, *f.got, *f.want)
			}
		}
	}
	return problems
}

// show writes a value as TOML would: strings quoted, lists in brackets.
func show(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprint(v)
}
