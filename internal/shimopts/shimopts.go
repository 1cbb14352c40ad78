// Package shimopts turns a shim-v2 row's shim_options into the options every task's create
// carries to its shim, as containerd does with a runtime's options: containerd's runc shim
// gets runc's options (containerd/api/types/runc/options.Options: BinaryName, Root,
// SystemdCgroup, ...), any other shim the generic runtimeoptions.Options (TypeUrl,
// ConfigPath, ConfigBody), which gVisor's shim reads (its runsc.toml) and Kata's (its
// configuration file). The table's keys are the Go field names, as in containerd's config.
package shimopts

import (
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	runcopts "github.com/containerd/containerd/api/types/runc/options"
	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"google.golang.org/protobuf/proto"
)

// IsRunc reports whether binary is containerd's runc shim.
func IsRunc(binary string) bool {
	return strings.HasPrefix(filepath.Base(binary), "containerd-shim-runc-")
}

// For builds the options for the shim binary from the row's table. systemd (cgroup_driver
// = "systemd") sets SystemdCgroup where the options are runc's, or where the row has none:
// the runc, runsc and Kata shims all read runc's options for it. nil: nothing to send.
func For(binary string, table map[string]any, systemd bool) (proto.Message, error) {
	if IsRunc(binary) || len(table) == 0 {
		if len(table) == 0 && !systemd {
			return nil, nil
		}
		o := &runcopts.Options{}
		if err := set(o, table); err != nil {
			return nil, err
		}
		o.SystemdCgroup = o.SystemdCgroup || systemd
		return o, nil
	}
	o := &runtimeoptions.Options{}
	if err := set(o, table); err != nil {
		return nil, err
	}
	return o, nil
}

// set sets o's exported fields from table, by Go field name.
func set(o proto.Message, table map[string]any) error {
	v := reflect.ValueOf(o).Elem()
	typ := v.Type()
	var names []string
	for i := 0; i < typ.NumField(); i++ {
		if f := typ.Field(i); f.IsExported() {
			names = append(names, f.Name)
		}
	}
	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sf, ok := typ.FieldByName(k)
		if !ok || !sf.IsExported() {
			return fmt.Errorf("%s is not an option of %s (%s)", k, proto.MessageName(o), strings.Join(names, ", "))
		}
		if err := assign(v.FieldByIndex(sf.Index), table[k]); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

// assign sets f from a TOML value: a string, a bool or an integer in range.
func assign(f reflect.Value, val any) error {
	switch f.Kind() {
	case reflect.String:
		if s, ok := val.(string); ok {
			f.SetString(s)
			return nil
		}
		return fmt.Errorf("want a string, got %v", val)
	case reflect.Bool:
		if b, ok := val.(bool); ok {
			f.SetBool(b)
			return nil
		}
		return fmt.Errorf("want true or false, got %v", val)
	case reflect.Uint32:
		// TOML gives int64; a record (JSON) gives float64.
		if x, ok := val.(float64); ok && x == math.Trunc(x) {
			val = int64(x)
		}
		if n, ok := val.(int64); ok && n >= 0 && n <= math.MaxUint32 {
			f.SetUint(uint64(n))
			return nil
		}
		return fmt.Errorf("want a number from 0 to %d, got %v", uint32(math.MaxUint32), val)
	case reflect.Slice:
		if s, ok := val.(string); ok && f.Type().Elem().Kind() == reflect.Uint8 {
			f.SetBytes([]byte(s))
			return nil
		}
	}
	return fmt.Errorf("cannot be set from %v", val)
}
