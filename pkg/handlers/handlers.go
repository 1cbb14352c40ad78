// Package handlers owns the RuntimeClass handler table: each handler's runtime, its kind
// (pkg/kind) and overhead from the config, what discovery found it can do, whether it can run on
// this node at all, and the check of a pod against those facts. It starts no pods.
package handlers

import (
	"fmt"
	"sort"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/pkg/config"
	"github.com/rtshimd/rtshimd/pkg/errdefs"
	"github.com/rtshimd/rtshimd/pkg/kind"
	"github.com/rtshimd/rtshimd/pkg/oci"
)

// Features is what a handler can do for a pod.
type Features struct {
	HostNetwork             bool `json:"host_network"`
	HostPID                 bool `json:"host_pid"`
	HostIPC                 bool `json:"host_ipc"`
	UserNamespaces          bool `json:"user_namespaces"`
	RecursiveReadOnlyMounts bool `json:"recursive_read_only_mounts"`
}

// Handler is one row of the table.
type Handler struct {
	Name string `json:"name"`
	// Type is the kind of runtime (kind.OCI, kind.OCISandbox, kind.ShimV2); Kind drives it.
	Type     string          `json:"runtime_type"`
	Kind     kind.Runtime    `json:"-"`
	Runtime  *oci.Runtime    `json:"runtime"`
	Overhead config.Overhead `json:"overhead"`
	// CNIConfDir and CNINetwork choose the handler's pod network ("" = the default).
	CNIConfDir string   `json:"cni_conf_dir,omitempty"`
	CNINetwork string   `json:"cni_network,omitempty"`
	Version    string   `json:"version,omitempty"`
	Features   Features `json:"features"`
	Ready      bool     `json:"ready"`
	Reason     string   `json:"reason,omitempty"` // why not ready
	// Notes say where each feature came from (discovered, declared, probe timing).
	Notes []string `json:"notes,omitempty"`

	declared config.Declared
}

// Table is the handler table. It is built once and discovered once at start-up; after
// that it is read-only, so lookups take no lock.
type Table struct {
	defaultName string
	byName      map[string]*Handler
}

// New builds the table from the config, with each row's runtime from rts; nothing is
// ready until Discover has run.
func New(cfg *config.Config, rts *Runtimes) (*Table, error) {
	t := &Table{defaultName: cfg.DefaultHandler, byName: map[string]*Handler{}}
	for name, hc := range cfg.Handlers {
		row := &oci.Runtime{
			Handler:       name,
			Path:          hc.RuntimePath,
			Root:          hc.RuntimeRoot,
			Args:          hc.RuntimeArgs,
			SystemdCgroup: cfg.CgroupDriver == config.SystemdDriver,
		}
		k, err := rts.For(hc.RuntimeType, row)
		if err != nil {
			return nil, err
		}
		t.byName[name] = &Handler{
			Name:       name,
			Type:       hc.RuntimeType,
			Kind:       k,
			Runtime:    row,
			Overhead:   hc.Overhead,
			CNIConfDir: hc.CNIConfDir,
			CNINetwork: hc.CNINetwork,
			Reason:     "not discovered yet",
			declared:   hc.Features,
		}
	}
	return t, nil
}

// Default is the name of the default handler.
func (t *Table) Default() string { return t.defaultName }

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
	if ns.GetUsernsOptions() != nil && ns.GetUsernsOptions().GetMode() == runtimeapi.NamespaceMode_POD && !h.Features.UserNamespaces {
		return refuse("user_namespaces", "user namespaces (hostUsers: false)")
	}
	return nil
}
