// Package container owns the containers of pod sandboxes: their root filesystems, OCI
// specs and bundles, their monitors, their state on disk and in memory, exec, resource
// updates and log reopening. It asks internal/sandbox about pods and internal/image for rootfs
// layers; it does not talk gRPC.
package container

import (
	"encoding/json"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cgroups/oomevent"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/protocache"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/store"
)

// States of a container record. "creating" is on disk only while CreateContainer is under
// way; a record found in it at start-up is undone. What moves a record, and nothing else:
//
//	creating ─CreateContainer done─▶ created ─StartContainer─▶ running ─its exit─▶ exited
//	    │                              │  │                                       ▲
//	    │  create failed, cleanup      │  └─ its task ends before a start ────────┤
//	    │  failed too                  │     (the pod's sandbox died)             │
//	    ▼                              ▼                                          │
//	 unknown (CleanupFailed,        recovery: the runtime cannot say whether it   │
//	 retried until removed)         started ─▶ unknown ─stop, or its exit─────────┘
//
// Recovery also moves created to running when the runtime shows the task ran, and
// running to exited when its exit was missed (read from the runtime, else 255 "Unknown").
// RemoveContainer ends every state but creating. The CRI state is the same word;
// "creating" never answers a call and "unknown" is CONTAINER_UNKNOWN.
const (
	StateCreating = "creating"
	StateCreated  = "created"
	StateRunning  = "running"
	StateExited   = "exited"
	// StateUnknown: recovery found a created record and the runtime could not say whether
	// the container started since; stop treats it as running.
	StateUnknown = "unknown"
)

// Metadata is written while CreateContainer runs, twice: first with what cleanup needs (the
// record names what to undo if the daemon dies mid-way), then whole with the created task;
// nothing changes it after.
type Metadata struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	SandboxID string `json:"sandbox_id"`
	Handler   string `json:"handler"`
	// Kind is the pod's runtime type (internal/kind). Records of earlier releases have none;
	// their Shared flag says it (runsc's kind).
	Kind    string    `json:"kind,omitempty"`
	Shared  bool      `json:"shared,omitempty"`
	Runtime *kind.Row `json:"runtime"`
	// PodDir is the pod's sandbox container directory (a pod-wide supervisor's state).
	PodDir string          `json:"pod_dir,omitempty"`
	Config json.RawMessage `json:"config"` // the ContainerConfig (protojson)
	// ImageRef is the config's image.image (kubelet sends the image's ID there), ImageID
	// the image's ID ("sha256:<config digest>", PullImage's image_ref).
	ImageRef string `json:"image_ref"`
	ImageID  string `json:"image_id"`
	// ImageName and ImageRepoDigest are the image as ContainerStatus and ListContainers
	// show it (image.image, image_ref), resolved once at create so that no status asks
	// the image store: the name the pod spec gave (user_specified_image), else the image's
	// first tag, else ImageRef; and its repo digest ("repo@sha256:<manifest digest>"),
	// "" for an image without one. Records of earlier releases have neither.
	ImageName       string `json:"image_name,omitempty"`
	ImageRepoDigest string `json:"image_repo_digest,omitempty"`
	// ImageHandler is the row whose own image store the image came from, "" for the
	// shared store: status and list show it as image.runtime_handler, the key kubelet's
	// image GC (RuntimeClassInImageCriApi) matches against ListImages' to keep the images
	// in use.
	ImageHandler string `json:"image_handler,omitempty"`
	CreatedAt    int64  `json:"created_at"`
	Dir          string `json:"dir"` // bundle and monitor files
	LogPath      string `json:"log_path,omitempty"`
	// LogDir is the pod's log directory, below which LogPath lies.
	LogDir string `json:"log_dir,omitempty"`
	Rootfs string `json:"rootfs"`
	// Restore is the directory of the checkpoint archive a container restored from one
	// was unpacked into (RestoreDir/<id>), until its start: the start restores it.
	Restore string `json:"restore,omitempty"`
	// RestoreLSM is the LSM profile of the container's spec ("apparmor:NAME",
	// "selinux:LABEL"), which its restore gives the processes in place of the one the
	// checkpoint recorded.
	RestoreLSM string `json:"restore_lsm,omitempty"`
	// RestoreNoNewPrivs: the spec sets no_new_privs, which CRIU's image does not record,
	// so the restored processes are checked for it at start.
	RestoreNoNewPrivs bool `json:"restore_no_new_privs,omitempty"`
	// StopSignal is what StopContainer sends, as the runtime's kill accepts it: the
	// config's stop_signal, else the image's STOPSIGNAL, else SIGTERM.
	StopSignal  string `json:"stop_signal"`
	CgroupsPath string `json:"cgroups_path"`
	// TerminationLog is the host file whose content becomes the exit message.
	TerminationLog string `json:"termination_log,omitempty"`
	// User is who the container's process runs as (for ContainerStatus, without
	// reading the spec).
	User *specs.User `json:"user,omitempty"`
	// ImageVolumes are the images mounted for config.mounts that name one; their storage
	// is undone with the container (internal/image finds it by owner, recorded here or not).
	ImageVolumes []ImageVolume `json:"image_volumes,omitempty"`
}

// ImageVolume is one image mounted for a config mount (KEP-4639).
type ImageVolume struct {
	Mount     int    `json:"mount"`      // index into config.mounts
	ImageID   string `json:"image_id"`   // "sha256:<config digest>", the mount's image_ref
	StorageID string `json:"storage_id"` // the containers/storage container holding it
	Source    string `json:"source"`     // the host path the container binds (the sub path within)
}

// Status changes over the container's life.
type Status struct {
	State      string `json:"state"`
	Pid        int    `json:"pid,omitempty"`
	MonitorPid int    `json:"monitor_pid,omitempty"`
	StartedAt  int64  `json:"started_at,omitempty"`
	FinishedAt int64  `json:"finished_at,omitempty"`
	ExitCode   int32  `json:"exit_code"`
	Reason     string `json:"reason,omitempty"`
	Message    string `json:"message,omitempty"`
	// Resources are the limits last applied (CreateContainer or UpdateContainerResources).
	Resources json.RawMessage `json:"resources,omitempty"`
}

// RegistryKey is how the container is indexed: by ID, name and pod.
func (c *Container) RegistryKey() registry.Key {
	return registry.Key{ID: c.ID, Name: c.Name, Pod: c.SandboxID}
}

// OpLock is the container's lifecycle lock.
func (c *Container) OpLock() sync.Locker { return &c.op }

// Container is one container in memory.
type Container struct {
	Metadata
	config *runtimeapi.ContainerConfig
	// rt is the kind of runtime that runs the container: its pod's.
	rt kind.Runtime
	// nriCreated: NRI plugins had CreateContainer (so a failed create is undone to them).
	nriCreated bool
	// unblockNRI ends the hold on plugins' synchronization that create took.
	unblockNRI func()

	// op serialises Start, Stop and Remove of this container.
	op sync.Mutex

	// status changes only through the manager's update, which writes the record first.
	status *store.Tracked[Status]

	mu sync.Mutex
	// exited is closed once the container's end is known.
	exited *registry.Exit
	// oom follows the container's memory cgroup for OOM kills while it runs (cgroup v1).
	oom *oomevent.Watcher

	// listed is the container as List reports it, kept per listKey (the rest never
	// changes); statsAttrs is its stats' attributes, which never change.
	listed     protocache.Item[listKey]
	statsAttrs protocache.Item[struct{}]
}

// TaskRuntime is the runtime the container runs on (its pod's row's kind).
func (c *Container) TaskRuntime() kind.Runtime { return c.rt }

// Task is the container as its runtime knows it.
func (c *Container) Task() kind.Task {
	return kind.Task{
		ID: c.ID, PodID: c.SandboxID, Dir: c.Dir, PodDir: c.PodDir, LogPath: c.LogPath, LogDir: c.LogDir,
		Stdin: c.config.GetStdin(), StdinOnce: c.config.GetStdinOnce(), Terminal: c.config.GetTty(),
		Restore: c.restoreImage(), RestoreLSM: c.RestoreLSM,
	}
}

// Config is the CreateContainer request's config.
func (c *Container) Config() *runtimeapi.ContainerConfig { return c.config }

// TTY reports whether the container has a terminal.
func (c *Container) TTY() bool { return c.config.GetTty() }

// Status returns a copy of the container's status.
func (c *Container) Status() Status { return c.status.Get() }

func criState(s string) runtimeapi.ContainerState {
	switch s {
	case StateCreated:
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case StateRunning:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case StateExited:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}
