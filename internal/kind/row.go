package kind

import "time"

// DefaultTimeout bounds one runtime call when the caller's context has no earlier deadline.
const DefaultTimeout = 60 * time.Second

// Row is one row of the handler table as a runtime is made from it: the data, apart from
// the drivers that act on it. Pod and container records keep the row they were created
// with, so that a pod's containers go on running on it after a reload changed the table
// (the JSON is part of the record format).
type Row struct {
	Handler string   `json:"handler"`
	Path    string   `json:"path"`
	Root    string   `json:"root"`
	Args    []string `json:"args,omitempty"`
	// SystemdCgroup: cgroup_driver = "systemd" (runc's --systemd-cgroup).
	SystemdCgroup bool `json:"systemd_cgroup,omitempty"`
	// ShimOptions are a shim-v2 row's shim_options (internal/shimopts).
	ShimOptions map[string]any `json:"shim_options,omitempty"`
}

// Maker makes the runtime of a row: handlers.Runtimes, one per row and type for the
// daemon's life. The managers make a recovered record's runtime through it.
type Maker interface {
	For(typ string, row *Row) (Runtime, error)
}
