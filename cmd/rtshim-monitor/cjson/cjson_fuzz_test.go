package cjson

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rtshimd/rtshimd/internal/monitor"
)

// cstr is s as the C reader returns it: a C string ends at its first NUL.
func cstr(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// FuzzConfig holds the C monitor's JSON reader to encoding/json, which writes the files
// it reads: on any bytes, the C reader and Unmarshal into internal/monitor's Config and
// LoggerConfig accept the same inputs and read the same values; json_object_int agrees
// with Unmarshal into a struct with one int32 field; and json_quote's output unmarshals
// back to the string quoted. The limits the C reader has on purpose are skipped: input
// with a NUL byte (it reads C strings) and skipped values nested deeper than 64.
func FuzzConfig(f *testing.F) {
	seeds := []any{
		monitor.Config{ID: "abc", Dir: "/run/x", Runtime: "/usr/sbin/runc", RuntimeArgs: []string{"--root", "/run/runc"}, Bundle: "/b", LogPath: "/l/0.log", LogDir: "/l", WaitWithRuntime: true, Stdin: true, StdinOnce: true, Terminal: true},
		monitor.LoggerConfig{LogPath: "/l/0.log", LogDir: "/l", Stdin: "/f/in", StdinOnce: true, Stdout: "/f/out", Stderr: "/f/err"},
	}
	for _, s := range seeds {
		b, _ := json.Marshal(s)
		f.Add(string(b))
	}
	for _, s := range []string{`null`, `{}`, `{"ID":"x","id":null,"runtime_args":null}`, `{"exitStatus":137}`, `{"exitStatus":1e2}`,
		`{"x":[{"y":[1,-0.5e+3,true,false,null,"\u00e9\ud83d\ude00"]}],"bundle":"\/a\"\\\b\f\n\r\t"}`, "{\"ſtdin\":true}", `{"id":"a\u0000b"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			return
		}
		for _, logger := range []bool{false, true} {
			got, cerr := ParseConfig(s, logger)
			if cerr != nil && cerr.Error() == "nested too deep" {
				return
			}
			var want Config
			var gerr error
			if logger {
				var lc monitor.LoggerConfig
				gerr = json.Unmarshal([]byte(s), &lc)
				want = Config{LogPath: cstr(lc.LogPath), LogDir: cstr(lc.LogDir), Stdin: cstr(lc.Stdin), StdinOnce: lc.StdinOnce,
					Terminal: lc.Terminal, Stdout: cstr(lc.Stdout), Stderr: cstr(lc.Stderr)}
			} else {
				var mc monitor.Config
				gerr = json.Unmarshal([]byte(s), &mc)
				want = Config{ID: cstr(mc.ID), Dir: cstr(mc.Dir), Runtime: cstr(mc.Runtime), Bundle: cstr(mc.Bundle),
					LogPath: cstr(mc.LogPath), LogDir: cstr(mc.LogDir), WaitWithRuntime: mc.WaitWithRuntime,
					StdinOn: mc.Stdin, StdinOnce: mc.StdinOnce, Terminal: mc.Terminal}
				for _, a := range mc.RuntimeArgs {
					want.RuntimeArgs = append(want.RuntimeArgs, cstr(a))
				}
			}
			if (cerr == nil) != (gerr == nil) {
				t.Fatalf("logger=%v: C reader error %v, encoding/json error %v, on %q", logger, cerr, gerr, s)
			}
			if cerr == nil && !equal(*got, want) {
				t.Fatalf("logger=%v: C reader read\n%+v\nencoding/json read\n%+v\nfrom %q", logger, *got, want, s)
			}
		}

		r, v := ObjectInt(s, "exitStatus")
		var st struct {
			ExitStatus *int32 `json:"exitStatus"`
		}
		gerr := json.Unmarshal([]byte(s), &st)
		switch {
		case gerr != nil:
			if r != -1 {
				t.Fatalf("json_object_int = %d (%d), encoding/json error %v, on %q", r, v, gerr, s)
			}
		case st.ExitStatus == nil:
			if r != 1 {
				t.Fatalf("json_object_int = %d (%d), encoding/json found no exitStatus, on %q", r, v, s)
			}
		case r != 0 || v != int64(*st.ExitStatus):
			t.Fatalf("json_object_int = %d (%d), encoding/json read %d, on %q", r, v, *st.ExitStatus, s)
		}

		q := Quote(s)
		var back string
		if err := json.Unmarshal([]byte(q), &back); err != nil {
			t.Fatalf("json_quote(%q) = %s, not a JSON string: %v", s, q, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("json_quote(%q) = %s, which reads back as %q", s, q, back)
		}
	})
}

func equal(a, b Config) bool {
	return slices.Equal(a.RuntimeArgs, b.RuntimeArgs) && reflect.DeepEqual(withoutArgs(a), withoutArgs(b))
}

func withoutArgs(c Config) Config { c.RuntimeArgs = nil; return c }
