// Package handlers owns the RuntimeClass handler table: each handler's runtime, its kind
// (internal/kind) and overhead from the config, what discovery found it can do, whether it can run on
// this node at all, and the check of a pod against those facts. It starts no pods.
package handlers

import (
	"fmt"
	"sort"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
)

// Features is what a handler can do for a pod.
type Features struct {
	HostNetwork             bool `json:"host_network"`
	HostPID                 bool `json:"host_pid"`
	HostIPC                 bool `json:"host_ipc"`
	UserNamespaces          bool `json:"user_namespaces"`
	RecursiveReadOnlyMounts bool `json:"recursive_read_only_mounts"`
}

// Discovery is what probing a handler found.
type Discovery struct {
	Version  string   `json:"version,omitempty"`
	Features Features `json:"features"`
	Ready    bool     `json:"ready"`
	Reason   string   `json:"reason,omitempty"` // why not ready
	// Notes say where each feature came from (discovered, declared, probe timing).
	Notes []string `json:"notes,omitempty"`
	// Args are global flags the probe found the runtime needs here (an old runsc's
	// --network=host), added to the row's; runtime and kind are the row's with them.
	Args []string `json:"discovered_args,omitempty"`
	// ArgsReason says why the runtime needs Args.
	ArgsReason string `json:"discovered_args_reason,omitempty"`
	runtime    *kind.Row
	kind       kind.Runtime
}

// Handler is one row of a table: the row as configured, the runtime it makes, and what
// discovery found. It is never written once a table holding it is published; a reload
// or a finished probe makes a new Handler.
type Handler struct {
	Name   string         `json:"name"`
	Config config.Handler `json:"config"`
	// Kind drives the runtime the row names; Runtime is how the kind invokes it (derived
	// from Config, and what a pod's record keeps).
	Kind    kind.Runtime `json:"-"`
	Runtime *kind.Row    `json:"-"`
	Discovery
}

// Table is the handler table: a value that is never written once published. The daemon
// serves it through a Live, which swaps in a new table on reload; lookups take no lock.
type Table struct {
	defaultName string
	byName      map[string]*Handler
}

// NewTable is a table of rows already made (tests, and fakes of the live table).
func NewTable(rows []*Handler, defaultName string) *Table {
	t := &Table{defaultName: defaultName, byName: map[string]*Handler{}}
	for _, h := range rows {
		t.byName[h.Name] = h
	}
	return t
}

// New builds the table from the config, with each row's runtime from rts; nothing is
// ready until discovered.
func New(cfg *config.Config, rts *Runtimes) (*Table, error) {
	t := &Table{defaultName: cfg.DefaultHandler, byName: map[string]*Handler{}}
	for name, hc := range cfg.Handlers {
		h, err := newHandler(name, *hc, cfg.CgroupDriver, rts)
		if err != nil {
			return nil, err
		}
		t.byName[name] = h
	}
	return t, nil
}

func newHandler(name string, hc config.Handler, cgroupDriver string, rts *Runtimes) (*Handler, error) {
	row := &kind.Row{
		Handler:       name,
		Path:          hc.RuntimePath,
		Root:          hc.RuntimeRoot,
		Args:          hc.RuntimeArgs,
		SystemdCgroup: cgroupDriver == config.SystemdDriver,
		ShimOptions:   hc.ShimOptions,
	}
	k, err := rts.For(hc.RuntimeType, row)
	if err != nil {
		return nil, err
	}
	return &Handler{Name: name, Config: hc, Kind: k, Runtime: row, Discovery: Discovery{Reason: "not discovered yet"}}, nil
}

// Type is the handler's kind of runtime (kind.OCI, kind.OCISandbox, kind.ShimV2).
func (h *Handler) Type() string { return h.Config.RuntimeType }

// with returns a copy of the table with one row replaced.
func (t *Table) with(h *Handler) *Table {
	n := &Table{defaultName: t.defaultName, byName: make(map[string]*Handler, len(t.byName))}
	for k, v := range t.byName {
		n.byName[k] = v
	}
	n.byName[h.Name] = h
	return n
}

// Default is the name of the default handler.
func (t *Table) Default() string { return t.defaultName }

// Get returns the named row whatever its state.
func (t *Table) Get(name string) (*Handler, bool) {
	h, ok := t.byName[name]
	return h, ok
}

// List returns the handlers sorted by name.
func (t *Table) List() []*Handler {
	out := make([]*Handler, 0, len(t.byName))
	for _, h := range t.byName {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (t *Table) names() string {
	var names []string
	for _, h := range t.List() {
		names = append(names, h.Name)
	}
	return strings.Join(names, ", ")
}

// Lookup returns the handler a request names ("" is the default). An unknown handler is
// ErrNotFound naming the configured ones; a handler that cannot run here is
// ErrFailedPrecondition with the reason.
func (t *Table) Lookup(name string) (*Handler, error) {
	if name == "" {
		name = t.defaultName
	}
	h, ok := t.byName[name]
	if !ok {
		return nil, fmt.Errorf("runtime handler %q is not configured on this node (configured: %s): %w", name, t.names(), errdefs.ErrNotFound)
	}
	if !h.Ready {
		return nil, fmt.Errorf("runtime handler %q cannot run pods on this node: %s: %w", name, h.Reason, errdefs.ErrFailedPrecondition)
	}
	return h, nil
}

// ImageStore resolves the handler an ImageSpec names (runtime_handler, KEP-4216; "" is
// the default) to its row and whether the row keeps its own images (image_store =
// "separate"); any configured row counts, ready or not. A name the node does not have is
// ErrInvalidArgument naming the configured ones; the caller adds the field's name.
func (t *Table) ImageStore(name string) (row string, separate bool, err error) {
	row = name
	if row == "" {
		row = t.defaultName
	}
	h, ok := t.byName[row]
	if !ok {
		return "", false, fmt.Errorf("%q is not a runtime handler of this node (configured: %s): %w", name, t.names(), errdefs.ErrInvalidArgument)
	}
	return row, h.Config.ImageStore == config.ImageStoreSeparate, nil
}

// CheckPod refuses a pod that asks for something the handler cannot do, naming the
// feature and the handler.
func (h *Handler) CheckPod(cfg *runtimeapi.PodSandboxConfig) error {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	refuse := func(feature, what string) error {
		return fmt.Errorf("runtime handler %q does not support %s (feature %s): choose another RuntimeClass or drop %s from the pod: %w",
			h.Name, what, feature, what, errdefs.ErrFailedPrecondition)
	}
	if ns.GetNetwork() == runtimeapi.NamespaceMode_NODE && !h.Features.HostNetwork {
		return refuse("host_network", "hostNetwork")
	}
	if ns.GetPid() == runtimeapi.NamespaceMode_NODE && !h.Features.HostPID {
		return refuse("host_pid", "hostPID")
	}
	if ns.GetIpc() == runtimeapi.NamespaceMode_NODE && !h.Features.HostIPC {
		return refuse("host_ipc", "hostIPC")
	}
	// An absent userns_options means the node's user namespace (its mode's zero value is POD).
	userns := ns.GetUsernsOptions() != nil && ns.GetUsernsOptions().GetMode() == runtimeapi.NamespaceMode_POD
	if userns && !h.Features.UserNamespaces {
		return refuse("user_namespaces", "user namespaces (hostUsers: false)")
	}
	// Such a pod's containers get the node's /sys bound recursively read-only (oci.SysMount).
	if userns && ns.GetNetwork() == runtimeapi.NamespaceMode_NODE && !h.Features.RecursiveReadOnlyMounts {
		return refuse("recursive_read_only_mounts", "hostUsers: false with hostNetwork")
	}
	return nil
}
