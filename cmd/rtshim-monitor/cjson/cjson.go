// Package cjson calls the C monitor's JSON reader and quoting from Go, so that
// FuzzConfig can hold them to encoding/json, which writes what they read. json.c and
// json.h here are links to the monitor's own (an #include of ../json.c would not be in
// the Go build cache's key). Only the tests use it; the monitor is built from C alone.
package cjson

/*
#cgo CFLAGS: -std=c11 -Wall -Wextra
#include <stdlib.h>
#include "json.h"

static void config_free(struct json_config *c) {
	free(c->id); free(c->dir); free(c->runtime); free(c->bundle);
	free(c->log_path); free(c->log_dir);
	free(c->stdin_fifo); free(c->stdout_fifo); free(c->stderr_fifo);
	for (size_t i = 0; i < c->runtime_nargs; i++)
		free(c->runtime_args[i]);
	free(c->runtime_args);
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// Config is what json_parse_config read: the fields of internal/monitor's Config and, for a
// logger, LoggerConfig (Stdin is its FIFO path; StdinOn the monitor's boolean).
type Config struct {
	ID, Dir, Runtime, Bundle, LogPath, LogDir string
	RuntimeArgs                               []string
	WaitWithRuntime, StdinOn, StdinOnce       bool
	Terminal                                  bool
	Stdin, Stdout, Stderr                     string
}

// ParseConfig runs json_parse_config on s (which must hold no NUL byte: the C reader
// sees a C string).
func ParseConfig(s string, logger bool) (*Config, error) {
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	var c C.struct_json_config
	defer C.config_free(&c)
	if e := C.json_parse_config(cs, &c, C.bool(logger)); e != nil {
		return nil, errors.New(C.GoString(e))
	}
	str := func(p *C.char) string {
		if p == nil {
			return ""
		}
		return C.GoString(p)
	}
	out := &Config{
		ID: str(c.id), Dir: str(c.dir), Runtime: str(c.runtime), Bundle: str(c.bundle),
		LogPath: str(c.log_path), LogDir: str(c.log_dir),
		WaitWithRuntime: bool(c.wait_with_runtime), StdinOn: bool(c.stdin),
		StdinOnce: bool(c.stdin_once), Terminal: bool(c.terminal),
		Stdin: str(c.stdin_fifo), Stdout: str(c.stdout_fifo), Stderr: str(c.stderr_fifo),
	}
	if c.runtime_nargs > 0 {
		for _, a := range unsafe.Slice(c.runtime_args, c.runtime_nargs) {
			out.RuntimeArgs = append(out.RuntimeArgs, str(a))
		}
	}
	return out, nil
}

// ObjectInt runs json_object_int: 0 with the value, 1 when the key is absent or null, -1
// on an error.
func ObjectInt(s, key string) (int, int64) {
	cs, ck := C.CString(s), C.CString(key)
	defer C.free(unsafe.Pointer(cs))
	defer C.free(unsafe.Pointer(ck))
	var v C.long
	r := C.json_object_int(cs, ck, &v)
	return int(r), int64(v)
}

// Quote runs json_quote on s (no NUL byte) with room for any s.
func Quote(s string) string {
	cs := C.CString(s)
	defer C.free(unsafe.Pointer(cs))
	n := 6*len(s) + 3 + 8
	buf := (*C.char)(C.malloc(C.size_t(n)))
	defer C.free(unsafe.Pointer(buf))
	l := C.json_quote(buf, C.size_t(n), cs)
	return C.GoStringN(buf, C.int(l))
}
