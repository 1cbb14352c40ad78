// Package sandbox owns pod sandboxes: their namespaces (pinned by the daemon or held by an
// sandbox container the handler runs), their hostname, resolv.conf, hosts and /dev/shm, their
// records on disk and the in-memory index that answers List calls. It does not talk gRPC.
package sandbox

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/protocache"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/store"
)

// States of a sandbox record. "creating" is on disk only while RunPodSandbox is under way;
// a record found in it at start-up is a half-made sandbox and is cleaned up.
//
//	creating ─RunPodSandbox done─▶ ready ─StopPodSandbox, its sandbox container's exit,
//	                                      or its network torn down─▶ notready
//
// Nothing leaves notready but RemovePodSandbox; recovery marks a ready record notready when
// the node restarted or its sandbox container is gone. The CRI states are SANDBOX_READY and
// SANDBOX_NOTREADY ("creating" never answers a call).
const (
	StateCreating = "creating"
	StateReady    = "ready"
	StateNotReady = "notready"
)

// Metadata is written while RunPodSandbox runs, twice: first with what cleanup needs, then
// whole once the sandbox is up; nothing changes it after.
type Metadata struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Handler string `json:"handler"` // the handler that runs it
	// RuntimeHandler is the handler as the request named it ("" for the default), which
	// is what the CRI reports back, as containerd does.
	RuntimeHandler string `json:"runtime_handler"`
	// Kind is the handler's runtime type (internal/kind) at creation. Records of earlier
	// releases have none; their Sandbox mode says it ("shared" was runsc's kind).
	Kind      string `json:"kind,omitempty"`
	Sandbox   string `json:"sandbox,omitempty"`
	CreatedAt int64  `json:"created_at"`
	// Runtime is the handler's runtime as it was at creation, so the sandbox can be
	// stopped and removed even if the handler table changed since.
	Runtime  *kind.Row       `json:"runtime"`
	Overhead config.Overhead `json:"overhead"`
	// PodAnnotations, PrivilegedWithoutHostDevices, DeviceOwnershipFromSecurityContext,
	// DefaultUlimits and SeccompProfile are the row's settings of those
	// names at creation: the pod's containers, also those made after a restart or a
	// reload that changed the row, get what the pod started with.
	PodAnnotations                     []string `json:"pod_annotations,omitempty"`
	PrivilegedWithoutHostDevices       bool     `json:"privileged_without_host_devices,omitempty"`
	DeviceOwnershipFromSecurityContext bool     `json:"device_ownership_from_security_context,omitempty"`
	DefaultUlimits                     []string `json:"default_ulimits,omitempty"`
	SeccompProfile                     string   `json:"seccomp_profile,omitempty"`
	// RecursiveReadOnlyMounts is the row's feature of that name at creation, what the
	// pod's Runtime can do: its containers' recursive_read_only mounts are refused
	// without it. nil in records of earlier releases, which allowed them; they still do.
	RecursiveReadOnlyMounts *bool `json:"recursive_read_only_mounts,omitempty"`
	// OverheadApplied is the overhead the pod got and where its limits went.
	OverheadApplied Overhead        `json:"overhead_applied"`
	Config          json.RawMessage `json:"config"` // the PodSandboxConfig (protojson)
	Dir             string          `json:"dir"`    // volatile directory under run_root
	// BundleDir is the sandbox container's bundle and supervisor directory. Its base name
	// is the sandbox ID, as shim v2 runtimes require. Records of earlier releases have
	// none: theirs is <Dir>/infra.
	BundleDir string `json:"bundle_dir,omitempty"`
	// Namespace files the daemon pinned ("" where the pod uses the node's, or the sandbox container's own).
	NetNS string `json:"netns,omitempty"`
	IPCNS string `json:"ipcns,omitempty"`
	UTSNS string `json:"utsns,omitempty"`
	// UserNS is the pod's user namespace (userns_options mode POD), with the mappings it
	// was made with; "" for a pod in the node's.
	UserNS     string          `json:"userns,omitempty"`
	IDMappings *oci.IDMappings `json:"id_mappings,omitempty"`
	// Tmpfs is the pod's tmpfs, which holds Shm and Files ("": records of earlier
	// releases, whose Shm and Files are each a tmpfs).
	Tmpfs string `json:"tmpfs,omitempty"`
	// TmpfsHome: the pod's tmpfs is in the pin home, not on the node; a copy of it is
	// lent at Tmpfs while a runtime creates a container (Manager.LendTmpfs).
	TmpfsHome bool   `json:"tmpfs_home,omitempty"`
	Shm       string `json:"shm,omitempty"` // what the pod's containers get as /dev/shm
	// Files holds hostname, hosts and resolv.conf ("": in Dir, records of earlier
	// releases).
	Files            string `json:"files,omitempty"`
	SandboxContainer bool   `json:"infra"` // a sandbox container runs through the handler
	CgroupsPath      string `json:"cgroups_path,omitempty"`
	// Network and NetworkDir name the CNI network the pod was attached to ("" = none).
	Network    string `json:"network,omitempty"`
	NetworkDir string `json:"network_dir,omitempty"`
}

// Status changes over the sandbox's life.
type Status struct {
	State         string    `json:"state"`
	ContainerPid  int       `json:"infra_pid,omitempty"`
	ContainerExit *int      `json:"infra_exit,omitempty"`
	ExitedAt      time.Time `json:"exited_at,omitempty"`
	MonitorPid    int       `json:"monitor_pid,omitempty"`
	// IPs are the pod's addresses from CNI, the primary first.
	IPs []string `json:"ips,omitempty"`
	// NetworkDown is set once CNI DEL has run.
	NetworkDown bool `json:"network_down,omitempty"`
	// Resize is the last in-place resize of the pod (UpdatePodSandboxResources).
	Resize *Resize `json:"resize,omitempty"`
}

// Sandbox is one pod sandbox in memory.
type Sandbox struct {
	Metadata
	config   *runtimeapi.PodSandboxConfig
	security containerSecurity // the sandbox container's labels and seccomp filter (RunPodSandbox only)
	// kept: its run and its cleanup failed; it is listed until a retried cleanup succeeds.
	kept bool
	// rt is the kind of runtime that runs the pod (from Kind and Runtime).
	rt kind.Runtime

	// op is the pod's lifecycle lock: Stop, Remove and resizes hold it exclusively;
	// container create and start hold it shared (Use), so no container is made or started
	// in a pod that is being stopped or removed, by construction.
	op sync.RWMutex

	// status changes only through the manager's update, which writes the record first.
	status *store.Tracked[Status]

	// lent counts the container creates that need the pod's tmpfs on the node
	// (TmpfsHome); lentKept: a container's hooks on the node need it until the pod goes.
	lendMu   sync.Mutex
	lent     int
	lentKept bool

	mu sync.Mutex
	// stopping is set once Stop has signalled the sandbox container, so its exit is not news.
	stopping bool
	// exited is closed when the sandbox container's exit is known.
	exited *registry.Exit

	// listed is the sandbox as List reports it, kept per state (the rest never changes);
	// statsAttrs is its stats' attributes, which never change.
	listed     protocache.Item[runtimeapi.PodSandboxState]
	statsAttrs protocache.Item[struct{}]
}

// RegistryKey is how the pod is indexed: by ID and name.
func (s *Sandbox) RegistryKey() registry.Key { return registry.Key{ID: s.ID, Name: s.Name} }

// OpLock is the pod's lifecycle lock, held exclusively.
func (s *Sandbox) OpLock() sync.Locker { return &s.op }

// StatsAttributes is the pod's PodSandboxStats attributes, encoded, built once.
func (s *Sandbox) StatsAttributes() []byte {
	return s.statsAttrs.Encoded(struct{}{}, func() proto.Message {
		cfg := s.config
		return &runtimeapi.PodSandboxAttributes{Id: s.ID, Metadata: cfg.Metadata, Labels: cfg.Labels, Annotations: cfg.Annotations}
	})
}

// Status returns a copy of the sandbox's status.
func (s *Sandbox) Status() Status { return s.status.Get() }

// PodConfig returns the pod's sandbox config.
func (s *Sandbox) PodConfig() *runtimeapi.PodSandboxConfig { return s.config }

// ContainerDir is where the sandbox container's bundle and supervisor files live.
func (s *Sandbox) ContainerDir() string {
	if s.BundleDir != "" {
		return s.BundleDir
	}
	return s.Dir + "/infra"
}

// KindRuntime is the kind of runtime that runs the pod; its containers run there too.
func (s *Sandbox) KindRuntime() kind.Runtime { return s.rt }

// RecursiveReadOnly reports whether the pod's containers may have recursive_read_only
// mounts (RecursiveReadOnlyMounts; true for a record of an earlier release).
func (s *Sandbox) RecursiveReadOnly() bool {
	return s.RecursiveReadOnlyMounts == nil || *s.RecursiveReadOnlyMounts
}

// Task is the sandbox container as its runtime knows it.
func (s *Sandbox) Task() kind.Task {
	return kind.Task{ID: s.ID, PodID: s.ID, Sandbox: true, Dir: s.ContainerDir(), PodDir: s.ContainerDir(), HostNetwork: s.NetNS == ""}
}

// MakeName is the unique name of a pod sandbox, as kubelet's metadata defines it.
func MakeName(m *runtimeapi.PodSandboxMetadata) string {
	return fmt.Sprintf("%s_%s_%s_%d", m.GetName(), m.GetNamespace(), m.GetUid(), m.GetAttempt())
}

// Use holds the pod's lifecycle lock shared while a container is created or started in it,
// and checks that the pod is ready; release ends the hold. A pod that is not ready is
// FailedPrecondition.
func (s *Sandbox) Use() (release func(), err error) {
	s.op.RLock()
	if st := s.Status().State; st != StateReady {
		s.op.RUnlock()
		return nil, fmt.Errorf("pod sandbox %s is not ready (%s): %w", s.ID, st, errdefs.ErrFailedPrecondition)
	}
	return s.op.RUnlock, nil
}
