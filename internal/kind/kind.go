// Package kind is the seam between rtshimd's pod and container managers and the kinds of
// runtime a handler row can name (its runtime_type): how a pod sandbox is made, how a
// container is created, started, signalled, waited for, exec'd into, attached to and
// measured, and how it is found again after a daemon restart. The managers hold what is
// common to every kind (records, names, CRI semantics, the OCI spec, CNI, pod files); a
// kind holds everything that differs, and nothing outside an implementation asks which
// kind it has. Implementations: internal/kind/ocicli (runc-family and runsc command-line
// runtimes, supervised by rtshim-monitor) and internal/kind/shimv2 (containerd shim v2).
package kind

import (
	"context"
	"io"
	"net"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/monitor"
)

// The runtime types a handler row can name (config key runtime_type).
const (
	// OCI is a command-line OCI runtime that owns each container's namespaces (runc,
	// crun, youki): the daemon pins the pod's namespaces and containers join them.
	OCI = "oci"
	// OCISandbox is a command-line runtime whose containers join one pod sandbox it runs
	// (gVisor's runsc): the pod is a real sandbox container, its IPC, UTS and PID live
	// inside the runtime's own kernel.
	OCISandbox = "oci-sandbox"
	// ShimV2 is a containerd shim v2 binary driven over ttrpc with the Task API (Kata's
	// containerd-shim-kata-v2, containerd-shim-runc-v2, gVisor's containerd-shim-runsc-v1,
	// runwasi): one shim per pod, which owns the pod's sandbox.
	ShimV2 = "shim-v2"
)

// Types lists the runtime types, for messages.
var Types = []string{OCI, OCISandbox, ShimV2}

// Exit is the end of a task's init process (or an exec'd process).
type Exit = monitor.Exit

// PodPlan is what a kind needs the daemon to prepare for a pod before its sandbox
// container (if any) runs. It is data the managers read, fixed per kind.
type PodPlan struct {
	// PinIPCUTS: the daemon pins an IPC and a UTS namespace for the pod, which its
	// containers join (the network namespace is pinned for every kind unless the pod is on
	// the node's network: CNI needs it before any runtime runs).
	PinIPCUTS bool
	// SandboxContainer: the pod always has a sandbox container run by the runtime;
	// without it one runs only when the pod's containers share a PID namespace.
	SandboxContainer bool
	// PodLimits: the sandbox container's cgroup holds every process of the pod, so it
	// gets the pod's limits plus the handler's overhead.
	PodLimits bool
	// HostNamespaces: the runtime can put a pod in the node's PID and IPC namespaces
	// (feature defaults before discovery and declarations).
	HostNamespaces bool
	// DeleteSandboxAtStop: the sandbox container is deleted when the pod stops, so its
	// runtime state and cgroup go then (kubelet may keep a stopped pod a long time).
	// Without it, it is deleted when the pod is removed, after its containers: for a
	// supervisor that serves the whole pod until its last task is gone (a shim).
	DeleteSandboxAtStop bool
	// DetachRootfs: once Create has returned, the task's own mount namespace holds its
	// root filesystem (runc has pivoted into it), so the daemon takes the rootfs's mount
	// out of the node's mount table, which every later runc reads several times per
	// container. Not for a kind that reads the rootfs from the host after create (runsc's
	// gofer, a shim).
	DetachRootfs bool
	// MountsToNode: a container's mounts can propagate back to the node (a BIDIRECTIONAL
	// mount). Not gVisor, whose mounts live in its own kernel (runsc refuses an rshared
	// root); a shim is left to say so itself, as containerd leaves it.
	MountsToNode bool
}

// Task is one thing the runtime runs: the pod's sandbox container or one of its
// containers. The managers describe it; the kind keeps whatever else it needs in Dir.
type Task struct {
	ID    string // container ID (the sandbox ID for the sandbox container)
	PodID string // the pod sandbox's ID
	// Sandbox is set for the pod's sandbox container.
	Sandbox bool
	// Dir is the task's bundle (config.json) and run directory.
	Dir string
	// PodDir is the sandbox container's Dir (where a pod-wide supervisor keeps its state).
	PodDir string
	// LogPath receives the task's output in the CRI log format ("" discards it).
	LogPath string
	// LogDir is the pod's log directory, below which LogPath lies.
	LogDir string
	// Stdin keeps a stdin for attach clients; StdinOnce closes it after the first
	// client's stdin ends; Terminal gives the task a terminal.
	Stdin, StdinOnce, Terminal bool
	// HostNetwork: the pod uses the node's network namespace (hostNetwork).
	HostNetwork bool
	// Restore is a checkpoint's CRIU image: Create makes nothing run and Start restores
	// the task from it (a Checkpointer whose Restorable says so).
	Restore string
	// RestoreLSM is the LSM profile the restored processes get ("apparmor:NAME",
	// "selinux:LABEL"; runc's --lsm-profile), "" for none.
	RestoreLSM string
}

// Created is a created task's processes.
type Created struct {
	Pid           int // the task's init, as the runtime reports it
	SupervisorPid int // the process that supervises it (rtshim-monitor, the shim)
}

// TerminalSize is a terminal's width and height in characters.
type TerminalSize = monitor.TerminalSize

// ExecSpec is a process to run in a running task.
type ExecSpec struct {
	// Process is the container's own process with the command to run (user, environment
	// and capabilities as the container's).
	Process *specs.Process
	// Dir is a scratch directory the kind may use and the caller removes afterwards.
	Dir string
	// Streams; nil means none. With Terminal, Stdout gets the terminal's output and
	// Stderr is unused; Resize carries size changes until closed.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Terminal       bool
	Resize         <-chan TerminalSize
}

// ExecProcess is a started exec.
type ExecProcess interface {
	// Wait waits for the process and its output, and returns its exit code (128+signal
	// when a signal ended it). An error means the runtime could not run it.
	Wait() (int, error)
	// Kill ends the process (SIGKILL); Wait still has to be called.
	Kill()
}

// AttachStreams are an attach client's streams.
type AttachStreams struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Resize         <-chan TerminalSize
}

// Runtime is one handler row's runtime, of one kind. Its methods are safe for concurrent
// use. Errors name the handler and the operation.
type Runtime interface {
	// Type is the runtime type (OCI, OCISandbox, ShimV2).
	Type() string
	// Plan is what the daemon prepares for a pod of this kind.
	Plan() PodPlan
	// AdjustSpec fits a container's spec, built as runc runs it (joining the pod's
	// namespaces by path), to how this kind runs containers in a pod.
	AdjustSpec(spec *specs.Spec)

	// Create creates the task from the bundle in t.Dir. For the sandbox container of a
	// kind that supervises pods as a whole, this starts that supervisor. On error the
	// caller still owes Delete.
	Create(ctx context.Context, t Task) (Created, error)
	// Start starts a created task.
	Start(ctx context.Context, t Task) error
	// Kill sends sig ("SIGTERM", "KILL", "9") to the task's init, or to all its
	// processes with all where the kind can. A task that no longer runs is not an error.
	Kill(ctx context.Context, t Task, sig string, all bool) error
	// Wait blocks until the task has exited and returns the exit, also for tasks created
	// by an earlier daemon. ok is false when its end was not observed (the supervisor
	// went away, or the task never started and was deleted); err only when ctx ended.
	Wait(ctx context.Context, t Task) (e Exit, ok bool, err error)
	// Status asks the runtime what the task is now: TaskCreated, TaskRunning or
	// TaskStopped (a task it does not know is stopped), or TaskNeverStarted: stopped, and
	// its supervisor, which would only have followed it after a start, confirms it never
	// started and has been released. An error means it could not say.
	Status(ctx context.Context, t Task) (string, error)
	// KillLost ends a task whose supervision was lost (Wait returned !ok for a started
	// task) and returns the exit to record once nothing of it runs.
	KillLost(ctx context.Context, t Task) Exit
	// Delete removes the task whatever its state, and for the sandbox container everything
	// the pod's supervision holds. A task the runtime does not know is not an error;
	// Delete can be repeated.
	Delete(ctx context.Context, t Task) error

	// Exec starts a process in the running task.
	Exec(ctx context.Context, t Task, x ExecSpec) (ExecProcess, error)
	// Attach connects streams to the running task's stdio until it exits or ctx ends.
	Attach(ctx context.Context, t Task, s AttachStreams) error
	// ReopenLog reopens the task's CRI log file (kubelet rotated it).
	ReopenLog(ctx context.Context, t Task) error
	// Update applies new resource limits to the running or created task.
	Update(ctx context.Context, t Task, res *specs.LinuxResources) error
	// Stats reads the task's CPU and memory usage; cgroupsPath is the cgroup its spec named.
	// scope says how much is wanted (cgstats.Usage for the CRI's stats, Full for metrics);
	// a kind that gets everything in one reading may return more. It is on kubelet's stats
	// path: a kind whose reading can block bounds it.
	Stats(ctx context.Context, t Task, cgroupsPath string, scope cgstats.Scope) (cgstats.Stats, error)

	// Version is the runtime's version line.
	Version(ctx context.Context) (string, error)
	// Features is what the runtime says it supports (an error if it cannot say).
	Features(ctx context.Context) (*features.Features, error)
	// Probe runs the sandbox container whose bundle is in dir once, to the end, and
	// removes it: the check that the runtime can run anything on this node, and what it
	// needs to (ProbeResult).
	Probe(ctx context.Context, id, dir string) (ProbeResult, error)
}

// What Runtime.Status reports.
const (
	TaskCreated = "created"
	TaskRunning = "running"
	TaskStopped = "stopped"
	// TaskNeverStarted: see Status.
	TaskNeverStarted = "never-started"
)

// PortDialer is a kind whose pods can have a network stack of their own, out of the
// host kernel's reach (gVisor's netstack): it connects to a port on the pod's localhost
// itself. ok is false where the pod uses the host kernel's stack in its namespace, which
// the caller dials.
type PortDialer interface {
	DialPort(ctx context.Context, t Task, port int32) (c net.Conn, ok bool, err error)
}

// Checkpointer is a kind that can checkpoint one running container to files (CRIU,
// through the runtime's checkpoint) and leave it running. CheckpointContainer on a kind
// without it is refused as not implemented.
type Checkpointer interface {
	// Checkpoint writes the task's checkpoint image into imageDir, with CRIU's log
	// (dump.log) and work files in workDir; both exist. A checkpoint the runtime or CRIU
	// refuses is errdefs.ErrFailedPrecondition, in CRIU's words where it gave some.
	Checkpoint(ctx context.Context, t Task, imageDir, workDir string) error
	// Freeze stops (frozen) or resumes every process of the running task (the runtime's
	// pause and resume: the cgroup freezer), so that its files hold still while they are
	// read.
	Freeze(ctx context.Context, t Task, frozen bool) error
	// Restorable is nil where the kind restores a Task with Restore set, else why not
	// (errdefs.ErrFailedPrecondition).
	Restorable() error
}

// ProbeResult is what a probe found beyond "it runs".
type ProbeResult struct {
	// Args are global flags the runtime needs on this node, added to the row's: the
	// handler's pods run with them.
	Args []string
	// Note says why, for `rtshimd handlers` and Status.
	Note string
}
