// Command check compares a critest run (a ginkgo JSON report) with the lists kept in
// conformance/expected/: <handler>.txt names the specs expected to pass on that handler,
// exceptions.txt every spec that is not, with the reason (README.md there).
//
//	check -handler runc -dir conformance/expected -report runc.json [-partial] [-update] [-v] [-results FILE]
//	check -handler runsc -dir conformance/expected -skip-regex
//
// It fails (exit 1) when a spec expected to pass did not pass (naming it and why), when a
// spec failed that no list explains, when a spec listed "skipped" ran and failed, when the
// suite skipped a spec at run time that no "skipped" entry names, when a suite node
// (BeforeSuite, AfterSuite, ReportAfterSuite, ...) failed, and when the suite's exit status
// (-exit-code) says it failed while no spec did (a dead ginkgo process, a failed report).
// A spec that passed but is not expected to is reported as "newly passing: raise the list"
// without failing. -skip-regex prints the regular expression of the handler's skip
// entries, for critest's -ginkgo.skip. -update rewrites <handler>.txt with the specs that
// passed (flaky ones left out). -partial (a focused run) ignores expected specs that did
// not run, except those -selected names: a subset's specs must all have run.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kinds of exception.
const (
	kindSkip  = "skip"  // not run: given to critest as -ginkgo.skip
	kindFail  = "fail"  // runs and is expected to fail
	kindFlaky = "flaky" // runs; passes or fails from run to run
	// critest skips it itself at run time (a feature the node or the runtime lacks);
	// SPEC is a regular expression, as for skip, but nothing is filtered.
	kindSkipped = "skipped"
)

type exception struct {
	handlers map[string]bool
	kind     string
	spec     string         // full spec text (fail, flaky) or a regular expression (skip, skipped)
	re       *regexp.Regexp // skip and skipped only
	// at pins where a fail entry's spec fails ("container.go:233"; several: "a.go:1|b.go:2"):
	// a failure elsewhere is a new reason and fails the run. Empty: not pinned.
	at     []string
	reason string
	line   int
}

func (e exception) matches(name string) bool {
	if e.re != nil {
		return e.re.MatchString(name)
	}
	return e.spec == name
}

// specReport is the part of ginkgo's types.SpecReport that is read here.
type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	State                   string
	RunTime                 time.Duration
	Failure                 struct {
		Message  string
		Location struct {
			FileName   string
			LineNumber int
		}
	}
}

type report struct {
	SuiteDescription string
	RunTime          time.Duration
	SpecReports      []specReport
}

// run is what a report says, with how the suite ended and what the run selected.
type run struct {
	specs   []specReport
	runTime time.Duration
	// suiteFailures are the suite nodes (BeforeSuite, ReportAfterSuite, ...) that failed.
	suiteFailures []string
	// exitCode is the suite's exit status; -1: not known.
	exitCode int
	// selected are the specs a focused run selected (its subset); nil: not known.
	selected map[string]bool
}

// options say how to compare.
type options struct {
	partial, update, verbose bool
	listPath, resultsPath    string
}

func (s specReport) name() string {
	return strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
}

func main() {
	handler := flag.String("handler", "", "runtime handler the report is of (runc, runsc)")
	dir := flag.String("dir", "conformance/expected", "directory of the expected lists")
	reportPath := flag.String("report", "", "ginkgo JSON report of critest")
	skipRegex := flag.Bool("skip-regex", false, "print the handler's skip regular expression and exit")
	partial := flag.Bool("partial", false, "a focused run: expected specs that did not run are not missing")
	update := flag.Bool("update", false, "rewrite <dir>/<handler>.txt with the specs that passed")
	verbose := flag.Bool("v", false, "list every spec that is skipped or fails as exceptions.txt expects")
	results := flag.String("results", "", "write every spec's state, name and reason to this file")
	exitCode := flag.Int("exit-code", -1, "the suite's exit status (-1: not known)")
	selectedPath := flag.String("selected", "", "with -partial: a file of the specs the focused run selected (one full name a line), every one of which must have run")
	suite := flag.String("suite", "critest", "the suite of the report: critest, node-e2e or cluster (Kubernetes' e2e suites, whose reports also list, as skipped, the thousands of specs their focus left out: only those a skip exception names are counted)")
	flag.Parse()
	if *handler == "" {
		fatalf("-handler is required")
	}
	exceptions, err := readExceptions(filepath.Join(*dir, "exceptions.txt"))
	if err != nil {
		fatalf("%v", err)
	}
	mine := forHandler(exceptions, *handler)
	if *skipRegex {
		var res []string
		for _, e := range mine {
			if e.kind == kindSkip {
				res = append(res, "(?:"+e.spec+")")
			}
		}
		fmt.Println(strings.Join(res, "|"))
		return
	}
	if *reportPath == "" {
		fatalf("-report is required")
	}
	listPath := filepath.Join(*dir, *handler+".txt")
	expected, err := readList(listPath)
	if err != nil && !(*update && os.IsNotExist(err)) {
		fatalf("%v", err)
	}
	r, err := readReport(*reportPath)
	if err != nil {
		fatalf("%v", err)
	}
	r.exitCode = *exitCode
	if *selectedPath != "" {
		if r.selected, err = readList(*selectedPath); err != nil {
			fatalf("%v", err)
		}
	}
	if *suite == "node-e2e" || *suite == "cluster" {
		r.specs = dropFiltered(r.specs, mine)
	}
	o := options{partial: *partial, update: *update, verbose: *verbose, listPath: listPath, resultsPath: *results}
	if !check(os.Stdout, *suite, *handler, r, expected, mine, o) {
		os.Exit(1)
	}
}

func forHandler(exceptions []exception, handler string) []exception {
	var out []exception
	for _, e := range exceptions {
		if e.handlers[handler] {
			out = append(out, e)
		}
	}
	return out
}

// check prints the comparison and reports whether it holds.
func check(w *os.File, suite, handler string, r run, expected map[string]bool, exceptions []exception, o options) bool {
	specs, runTime, partial, update, verbose, listPath, resultsPath := r.specs, r.runTime, o.partial, o.update, o.verbose, o.listPath, o.resultsPath
	find := func(name string) *exception {
		for i := range exceptions {
			if exceptions[i].matches(name) {
				return &exceptions[i]
			}
		}
		return nil
	}
	var passed, failed, skipped int
	var bad, newly, notes []string
	seen := map[string]bool{}
	var passedNames, results []string
	for _, s := range specs {
		n := s.name()
		seen[n] = true
		ex := find(n)
		res := fmt.Sprintf("%-8s %s", s.State, n)
		switch {
		case ex != nil:
			res += fmt.Sprintf("  [exceptions.txt:%d %s: %s]", ex.line, ex.kind, ex.reason)
		case s.State != "passed" && s.Failure.Message != "":
			res += "  [" + firstLine(s.Failure.Message) + "]"
		}
		results = append(results, res)
		switch s.State {
		case "passed":
			passed++
			if ex == nil || ex.kind != kindFlaky {
				passedNames = append(passedNames, n)
			}
			if !expected[n] && (ex == nil || ex.kind != kindFlaky) {
				msg := "newly passing: raise the list: " + n
				if ex != nil {
					msg += fmt.Sprintf("\n      (and drop exceptions.txt:%d, %s: %s)", ex.line, ex.kind, ex.reason)
				}
				newly = append(newly, msg)
			}
		case "skipped":
			skipped++
			switch {
			case expected[n] && partial && s.Failure.Message == "":
				// Left out by a focused run's filter.
			case expected[n]:
				bad = append(bad, fmt.Sprintf("FAIL %s (expected to pass, skipped: %s)", n, why(s, ex)))
			case ex != nil:
				notes = append(notes, fmt.Sprintf("skipped (%s): %s\n      %s", ex.kind, n, ex.reason))
			case s.Failure.Message == "":
				// Left out by the run's filter (-ginkgo.skip of a skip entry, a focus).
				notes = append(notes, fmt.Sprintf("not selected: %s", n))
			default:
				bad = append(bad, fmt.Sprintf("FAIL %s (skipped by the suite at run time, in no list: add a \"skipped\" entry with the reason)\n      %s", n, firstLine(s.Failure.Message)))
			}
		default: // failed, panicked, timedout, interrupted, aborted
			failed++
			detail := fmt.Sprintf("%s: %s", s.State, firstLine(s.Failure.Message))
			if loc := s.Failure.Location; loc.FileName != "" {
				detail += fmt.Sprintf(" (%s:%d)", filepath.Base(loc.FileName), loc.LineNumber)
			}
			switch {
			case expected[n]:
				bad = append(bad, fmt.Sprintf("FAIL %s\n      %s", n, detail))
			case ex != nil && ex.kind == kindFail && len(ex.at) > 0 && !slices.Contains(ex.at, failedAt(s)):
				bad = append(bad, fmt.Sprintf("FAIL %s (exceptions.txt:%d says it fails at %s; it failed at %s: a new reason?)\n      %s",
					n, ex.line, strings.Join(ex.at, "|"), failedAt(s), detail))
			case ex != nil && ex.kind == kindSkipped:
				bad = append(bad, fmt.Sprintf("FAIL %s (exceptions.txt:%d says the suite skips it, but it ran and failed)\n      %s", n, ex.line, detail))
			case ex != nil && ex.kind != kindSkip:
				notes = append(notes, fmt.Sprintf("expected %s: %s\n      %s", ex.kind, n, ex.reason))
			default:
				bad = append(bad, fmt.Sprintf("FAIL %s (not in any list: add it to exceptions.txt with a reason, or fix it)\n      %s", n, detail))
			}
		}
	}
	if !partial {
		var missing []string
		for n := range expected {
			if !seen[n] {
				missing = append(missing, n)
			}
		}
		sort.Strings(missing)
		for _, n := range missing {
			bad = append(bad, fmt.Sprintf("FAIL %s (expected to pass, not in the report: renamed or removed in %s?)", n, suite))
		}
	} else if r.selected != nil {
		// A subset: each spec it selected ran (a renamed spec or a dead ginkgo process
		// leaves one out).
		var missing []string
		for n := range r.selected {
			if !seen[n] {
				missing = append(missing, n)
			}
		}
		sort.Strings(missing)
		for _, n := range missing {
			bad = append(bad, fmt.Sprintf("FAIL %s (selected by the subset, did not run: renamed in %s, or its process died?)", n, suite))
		}
	}
	for _, f := range r.suiteFailures {
		bad = append(bad, "FAIL "+f)
	}
	if r.exitCode > 0 && failed == 0 && len(r.suiteFailures) == 0 {
		bad = append(bad, fmt.Sprintf("FAIL %s exited %d, and no spec or suite node failed in its report (a process died, or the report is not the run's)", suite, r.exitCode))
	}
	sort.Strings(notes)
	if verbose {
		for _, n := range notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	} else if len(notes) > 0 {
		fmt.Fprintf(w, "  %d spec(s) skipped or failing as %s explains (-v lists them)\n", len(notes), filepath.Join(filepath.Dir(listPath), "exceptions.txt"))
	}
	for _, n := range newly {
		fmt.Fprintf(w, "  %s\n", n)
	}
	for _, b := range bad {
		fmt.Fprintf(w, "  %s\n", b)
	}
	if resultsPath != "" {
		sort.Strings(results)
		if err := os.WriteFile(resultsPath, []byte(strings.Join(results, "\n")+"\n"), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	if update {
		sort.Strings(passedNames)
		header := fmt.Sprintf("# critest specs expected to pass on %s (written by make conformance CONFORMANCE_UPDATE=1;\n# see README.md). One full spec text a line.\n", handler)
		switch suite {
		case "node-e2e":
			header = fmt.Sprintf("# node e2e specs expected to pass on the %s pass (written by make node-e2e NODE_E2E_UPDATE=1;\n# see README.md). One full spec text a line.\n", handler)
		case "cluster":
			header = fmt.Sprintf("# Cluster [Conformance] specs expected to pass on a cluster of two rtshimd nodes on %s\n# (written by RTSHIMD_CLUSTER_UPDATE=1 make cluster-conformance). One full spec text a line.\n", handler)
		}
		if err := os.WriteFile(listPath, []byte(header+strings.Join(passedNames, "\n")+"\n"), 0o644); err != nil {
			fatalf("%v", err)
		}
		fmt.Fprintf(w, "  wrote %s (%d specs)\n", listPath, len(passedNames))
	}
	verdict := "ok"
	if len(bad) > 0 {
		verdict = fmt.Sprintf("FAILED: %d spec(s) expected to pass did not, or failed unexplained", len(bad))
	}
	fmt.Fprintf(w, "%s: %d passed, %d failed, %d skipped (%s %s; %s)\n", handler, passed, failed, skipped,
		suite, runTime.Round(time.Second), verdict)
	return len(bad) == 0 || update
}

// dropFiltered leaves out the specs the run's focus and skip left out (skipped, with no
// failure message) unless a skip exception, whose regular expression the run skipped them
// by, names them: a focused run (the subset) does not count the specs it did not select.
func dropFiltered(specs []specReport, exceptions []exception) []specReport {
	out := specs[:0:0]
	for _, s := range specs {
		if s.State == "skipped" && s.Failure.Message == "" {
			skipped := false
			for _, e := range exceptions {
				if e.kind == "skip" && e.matches(s.name()) {
					skipped = true
					break
				}
			}
			if !skipped {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

func why(s specReport, ex *exception) string {
	if ex != nil {
		return fmt.Sprintf("exceptions.txt:%d", ex.line)
	}
	return firstLine(s.Failure.Message)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// readReport returns the It specs of a ginkgo JSON report, without the benchmarks critest
// leaves out of validation runs, and the suite nodes that failed.
func readReport(path string) (run, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return run{}, err
	}
	var reports []report
	if err := json.Unmarshal(data, &reports); err != nil {
		return run{}, fmt.Errorf("%s: %v", path, err)
	}
	out := run{exitCode: -1}
	for _, r := range reports {
		out.runTime += r.RunTime
		for _, s := range r.SpecReports {
			if s.LeafNodeType != "It" {
				if s.State != "passed" && s.State != "skipped" && s.State != "" {
					out.suiteFailures = append(out.suiteFailures, fmt.Sprintf("%s %s: %s", s.LeafNodeType, s.State, firstLine(s.Failure.Message)))
				}
				continue
			}
			if s.State == "skipped" && strings.Contains(s.name(), "benchmark") {
				continue
			}
			out.specs = append(out.specs, s)
		}
	}
	if len(out.specs) == 0 {
		return run{}, fmt.Errorf("%s: no specs", path)
	}
	return out, nil
}

// readList reads one name a line; blank lines and lines starting with # are ignored.
func readList(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out[l] = true
	}
	return out, sc.Err()
}

// readExceptions reads lines of the form "HANDLERS KIND SPEC # REASON".
func readExceptions(path string) ([]exception, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []exception
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		spec, reason, ok := strings.Cut(l, " # ")
		reason = strings.TrimSpace(reason)
		if !ok || reason == "" {
			return nil, fmt.Errorf("%s:%d: no reason (\"HANDLERS KIND SPEC # REASON\")", path, n)
		}
		fields := strings.SplitN(strings.TrimSpace(spec), " ", 3)
		if len(fields) != 3 {
			return nil, fmt.Errorf("%s:%d: want \"HANDLERS KIND SPEC # REASON\"", path, n)
		}
		e := exception{handlers: map[string]bool{}, kind: fields[1], spec: strings.TrimSpace(fields[2]), reason: reason, line: n}
		for _, h := range strings.Split(fields[0], ",") {
			e.handlers[h] = true
		}
		switch e.kind {
		case kindSkip, kindSkipped:
			re, err := regexp.Compile(e.spec)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, n, err)
			}
			e.re = re
		case kindFail, kindFlaky:
			// SPEC @file.go:NNN[|...]: where it fails.
			if i := strings.LastIndex(e.spec, " @"); i >= 0 && e.kind == kindFail {
				e.at = strings.Split(strings.TrimSpace(e.spec[i+2:]), "|")
				e.spec = strings.TrimSpace(e.spec[:i])
				for _, a := range e.at {
					if !locRE.MatchString(a) {
						return nil, fmt.Errorf("%s:%d: failure location %q: want file.go:LINE", path, n, a)
					}
				}
			}
		default:
			return nil, fmt.Errorf("%s:%d: kind %q: want skip, skipped, fail or flaky", path, n, e.kind)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

var locRE = regexp.MustCompile(`^[\w.-]+\.go:\d+$`)

// failedAt is where a spec failed, as a fail entry pins it: "file.go:LINE"; "" if unknown.
func failedAt(s specReport) string {
	if loc := s.Failure.Location; loc.FileName != "" {
		return fmt.Sprintf("%s:%d", filepath.Base(loc.FileName), loc.LineNumber)
	}
	return ""
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "check: "+format+"\n", a...)
	os.Exit(2)
}
