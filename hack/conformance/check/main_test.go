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
func runCheck(t *testing.T, expected []string, exceptions string, specs []specReport, partial bool) (bool, string) {
	return runWith(t, expected, exceptions, specs, options{partial: partial}, func(*run) {})
}

// runWith is runCheck with options and a change to the run read from the report.
func runWith(t *testing.T, expected []string, exceptions string, specs []specReport, o options, change func(*run), extra ...specReport) (bool, string) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "exceptions.txt"), exceptions)
	writeFile(t, filepath.Join(dir, "runc.txt"), "# header\n"+strings.Join(expected, "\n")+"\n")
	data, err := json.Marshal([]report{{SpecReports: append(append(specs, specReport{LeafNodeType: "SynchronizedBeforeSuite", State: "passed"}), extra...)}})
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
	got, err := readReport(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	change(&got)
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	o.verbose, o.listPath, o.resultsPath = true, filepath.Join(dir, "runc.txt"), filepath.Join(dir, "results")
	ok := check(out, "critest", "runc", got, list, forHandler(ex, "runc"), o)
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

	ok, out := runCheck(t, expected, exc, []specReport{
		spec("a", "passed", ""), spec("b", "passed", ""), spec("known bad", "failed", "boom"),
		spec("wobbly", "failed", "slow"), spec("feature x", "skipped", "no feature"),
		spec("benchmark of y", "skipped", ""),
	}, false)
	if !ok || !strings.Contains(out, "runc: 2 passed, 2 failed, 1 skipped") {
		t.Errorf("all as expected: ok=%v\n%s", ok, out)
	}

	ok, out = runCheck(t, expected, exc, []specReport{spec("a", "passed", ""), spec("b", "failed", "wrong answer\nmore")}, false)
	if ok || !strings.Contains(out, "FAIL [k8s.io] Area b\n      failed: wrong answer") {
		t.Errorf("an expected spec failing must fail, named: ok=%v\n%s", ok, out)
	}

	ok, out = runCheck(t, expected, exc, []specReport{spec("a", "passed", ""), spec("b", "passed", ""), spec("new", "passed", ""), spec("known bad", "passed", "")}, false)
	if !ok || !strings.Contains(out, "newly passing: raise the list: [k8s.io] Area new") ||
		!strings.Contains(out, "newly passing: raise the list: [k8s.io] Area known bad\n      (and drop exceptions.txt:1") {
		t.Errorf("newly passing specs are reported, not failed: ok=%v\n%s", ok, out)
	}

	ok, out = runCheck(t, expected, exc, []specReport{spec("a", "passed", ""), spec("b", "passed", ""), spec("other", "failed", "x")}, false)
	if ok || !strings.Contains(out, "not in any list") {
		t.Errorf("a failure no list explains (another handler's entry) must fail: ok=%v\n%s", ok, out)
	}

	ok, out = runCheck(t, expected, exc, []specReport{spec("a", "passed", "")}, false)
	if ok || !strings.Contains(out, "[k8s.io] Area b (expected to pass, not in the report") {
		t.Errorf("an expected spec missing from the report must fail: ok=%v\n%s", ok, out)
	}
	if ok, out = runCheck(t, expected, exc, []specReport{spec("a", "passed", ""), spec("b", "skipped", "")}, true); !ok {
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

// The holes a review found: each once let a broken run pass.
func TestCheckHoles(t *testing.T) {
	const exc = "runc skipped Area feature.* # the node lacks it\n" +
		"runc fail [k8s.io] Area known bad # the reason\n"
	expected := []string{"[k8s.io] Area a", "[k8s.io] Area b"}
	good := []specReport{spec("a", "passed", ""), spec("b", "passed", "")}

	// A spec listed as skipped by the suite that runs and fails.
	ok, out := runCheck(t, expected, exc, append(good, spec("feature x", "failed", "boom")), false)
	if ok || !strings.Contains(out, "says the suite skips it, but it ran and failed") {
		t.Errorf("a skipped entry that ran and failed must fail: ok=%v\n%s", ok, out)
	}
	// A run-time skip no entry names.
	ok, out = runCheck(t, expected, exc, append(good, spec("other", "skipped", "no such thing")), false)
	if ok || !strings.Contains(out, "skipped by the suite at run time, in no list") {
		t.Errorf("an unlisted run-time skip must fail: ok=%v\n%s", ok, out)
	}
	// A failed suite node (ReportAfterSuite) with every spec passing.
	node := specReport{LeafNodeType: "ReportAfterSuite", State: "failed"}
	node.Failure.Message = "could not write the report"
	ok, out = runWith(t, expected, exc, good, options{}, func(*run) {}, node)
	if ok || !strings.Contains(out, "ReportAfterSuite failed: could not write the report") {
		t.Errorf("a failed suite node must fail: ok=%v\n%s", ok, out)
	}
	// The suite exited non-zero and no spec failed.
	ok, out = runWith(t, expected, exc, good, options{}, func(r *run) { r.exitCode = 1 })
	if ok || !strings.Contains(out, "exited 1, and no spec or suite node failed") {
		t.Errorf("a failed exit with no failing spec must fail: ok=%v\n%s", ok, out)
	}
	// ... but a non-zero exit explained by an expected failure is fine.
	if ok, out = runWith(t, expected, exc, append(good, spec("known bad", "failed", "x")), options{}, func(r *run) { r.exitCode = 1 }); !ok {
		t.Errorf("an exit explained by a listed failure: \n%s", out)
	}
	// A subset's selected spec that did not run (a dead ginkgo process).
	sel := map[string]bool{"[k8s.io] Area a": true, "[k8s.io] Area b": true, "[k8s.io] Area known bad": true}
	ok, out = runWith(t, expected, exc, []specReport{spec("a", "passed", ""), spec("b", "passed", "")}, options{partial: true}, func(r *run) { r.selected = sel })
	if ok || !strings.Contains(out, "[k8s.io] Area known bad (selected by the subset, did not run") {
		t.Errorf("a selected spec that did not run must fail: ok=%v\n%s", ok, out)
	}
	if ok, out = runWith(t, expected, exc, append(good, spec("known bad", "failed", "x")), options{partial: true}, func(r *run) { r.selected = sel }); !ok {
		t.Errorf("a subset whose specs all ran:\n%s", out)
	}
}

// A fail entry pinned to where its spec fails: failing elsewhere is a new reason.
func TestFailPinned(t *testing.T) {
	const exc = "runc fail [k8s.io] Area known bad @container.go:233|util.go:9 # the reason\n"
	at := func(s specReport, file string, line int) specReport {
		s.Failure.Location.FileName, s.Failure.Location.LineNumber = "/src/pkg/validate/"+file, line
		return s
	}
	good := []specReport{spec("a", "passed", "")}
	if ok, out := runCheck(t, []string{"[k8s.io] Area a"}, exc, append(good, at(spec("known bad", "failed", "x"), "container.go", 233)), false); !ok {
		t.Errorf("failing where pinned:\n%s", out)
	}
	if ok, out := runCheck(t, []string{"[k8s.io] Area a"}, exc, append(good, at(spec("known bad", "failed", "x"), "util.go", 9)), false); !ok {
		t.Errorf("failing at the second pinned place:\n%s", out)
	}
	ok, out := runCheck(t, []string{"[k8s.io] Area a"}, exc, append(good, at(spec("known bad", "failed", "other"), "image.go", 74)), false)
	if ok || !strings.Contains(out, "says it fails at container.go:233|util.go:9; it failed at image.go:74") {
		t.Errorf("failing elsewhere must fail: ok=%v\n%s", ok, out)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "exceptions.txt")
	writeFile(t, p, "runc fail [k8s.io] Area x @not a place # why\n")
	if _, err := readExceptions(p); err == nil || !strings.Contains(err.Error(), "exceptions.txt:1") {
		t.Errorf("a bad location: %v", err)
	}
}
