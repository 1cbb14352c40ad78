package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func spec(leaf, state, msg string) specReport {
	s := specReport{ContainerHierarchyTexts: []string{"[k8s.io] Area"}, LeafNodeText: leaf, LeafNodeType: "It", State: state}
	s.Failure.Message = msg
	return s
}

// run checks specs against an expected list and exceptions and returns the verdict and
// what was printed.
func run(t *testing.T, expected []string, exceptions string, specs []specReport, partial bool) (bool, string) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "exceptions.txt"), exceptions)
	writeFile(t, filepath.Join(dir, "runc.txt"), "# header\n"+strings.Join(expected, "\n")+"\n")
	data, err := json.Marshal([]report{{SpecReports: append(specs, specReport{LeafNodeType: "SynchronizedBeforeSuite", State: "passed"})}})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "r.json"), string(data))
	ex, err := readExceptions(filepath.Join(dir, "exceptions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := readList(filepath.Join(dir, "runc.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got, rt, err := readReport(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	ok := check(out, "critest", "runc", got, rt, list, forHandler(ex, "runc"), partial, false, true, filepath.Join(dir, "runc.txt"), filepath.Join(dir, "results"))
	out.Close()
	b, _ := os.ReadFile(filepath.Join(dir, "out"))
	return ok, string(b)
}

func TestCheck(t *testing.T) {
	const exc = "runc fail [k8s.io] Area known bad # the reason\n" +
		"runc flaky [k8s.io] Area wobbly # timing\n" +
		"runc skipped Area feature.* # the node lacks it\n" +
		"runsc fail [k8s.io] Area other # not this handler\n"
	expected := []string{"[k8s.io] Area a", "[k8s.io] Area b"}

	ok, out := run(t, expected, exc, []specReport{
		spec("a", "passed", ""), spec("b", "passed", ""), spec("known bad", "failed", "boom"),
		spec("wobbly", "failed", "slow"), spec("feature x", "skipped", "no feature"),
		spec("benchmark of y", "skipped", ""),
	}, false)
	if !ok || !strings.Contains(out, "runc: 2 passed, 2 failed, 1 skipped") {
		t.Errorf("all as expected: ok=%v\n%s", ok, out)
	}

	ok, out = run(t, expected, exc, []specReport{spec("a", "passed", ""), spec("b", "failed", "wrong answer\nmore")}, false)
	if ok || !strings.Contains(out, "FAIL [k8s.io] Area b\n      failed: wrong answer") {
		t.Errorf("an expected spec failing must fail, named: ok=%v\n%s", ok, out)
	}

	ok, out = run(t, expected, exc, []specReport{spec("a", "passed", ""), spec("b", "passed", ""), spec("new", "passed", ""), spec("known bad", "passed", "")}, false)
	if !ok || !strings.Contains(out, "newly passing: raise the list: [k8s.io] Area new") ||
		!strings.Contains(out, "newly passing: raise the list: [k8s.io] Area known bad\n      (and drop exceptions.txt:1") {
		t.Errorf("newly passing specs are reported, not failed: ok=%v\n%s", ok, out)
	}

	ok, out = run(t, expected, exc, []specReport{spec("a", "passed", ""), spec("b", "passed", ""), spec("other", "failed", "x")}, false)
	if ok || !strings.Contains(out, "not in any list") {
		t.Errorf("a failure no list explains (another handler's entry) must fail: ok=%v\n%s", ok, out)
	}

	ok, out = run(t, expected, exc, []specReport{spec("a", "passed", "")}, false)
	if ok || !strings.Contains(out, "[k8s.io] Area b (expected to pass, not in the report") {
		t.Errorf("an expected spec missing from the report must fail: ok=%v\n%s", ok, out)
	}
	if ok, out = run(t, expected, exc, []specReport{spec("a", "passed", ""), spec("b", "skipped", "")}, true); !ok {
		t.Errorf("a focused run ignores expected specs left out by its filter:\n%s", out)
	}
}

func TestExceptions(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "exceptions.txt")
	writeFile(t, p, "# comment\n\nrunc,runsc skip Networking .*port \\[Conformance\\] # slow\nrunsc skip OOM # no per-container OOM\n")
	ex, err := readExceptions(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ex) != 2 || !ex[0].handlers["runc"] || !ex[0].handlers["runsc"] || ex[1].line != 4 {
		t.Fatalf("parsed %+v", ex)
	}
	if !ex[0].matches("[k8s.io] Networking should support port [Conformance]") {
		t.Error("skip entries are regular expressions")
	}
	for _, bad := range []string{"runc fail some spec\n", "runc broken some spec # why\n", "runc skip ( # why\n", "runc fail # why\n"} {
		writeFile(t, p, bad)
		if _, err := readExceptions(p); err == nil || !strings.Contains(err.Error(), "exceptions.txt:1") {
			t.Errorf("%q: want an error naming the line, got %v", bad, err)
		}
	}
}

// A node e2e report lists every spec the focus left out as skipped with no message: only
// those a skip exception names are kept (they were skipped by its regular expression).
func TestDropFiltered(t *testing.T) {
	exc := []exception{
		{kind: "skip", re: regexp.MustCompile(`waits long`)},
		{kind: "fail", spec: "[k8s.io] Area listed failure"},
	}
	got := dropFiltered([]specReport{
		spec("ran", "passed", ""),
		spec("left out by the focus", "skipped", ""),
		spec("listed failure", "skipped", ""),
		spec("waits long", "skipped", ""),
		spec("skipped by the suite", "skipped", "no such feature"),
	}, exc)
	var names []string
	for _, s := range got {
		names = append(names, s.LeafNodeText)
	}
	if want := "ran,waits long,skipped by the suite"; strings.Join(names, ",") != want {
		t.Errorf("kept %q, want %q", strings.Join(names, ","), want)
	}
}
