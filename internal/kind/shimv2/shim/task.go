package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// Type URLs containerd gives OCI spec parts in Any messages; shims decode the JSON in them.
const (
	processTypeURL   = "types.containerd.io/opencontainers/runtime-spec/1/Process"
	resourcesTypeURL = "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources"
)

// Mount is one rootfs mount the shim performs at <bundle>/rootfs before create.
type Mount struct {
	Type, Source, Target string
	Options              []string
}

// CreateOptions describe a task (a container's init) to create.
type CreateOptions struct {
	ID     string // the container id
	Bundle string // its bundle (config.json; base name = ID)
	// Rootfs, if set, is mounted by the shim at <Bundle>/rootfs; empty: config.json's
	// root is used as it is.
	Rootfs   []Mount
	Terminal bool
	// Stdin, Stdout, Stderr: FIFO paths ("" for none), or for Stdout a binary:// logger
	// URI (monitor.LoggerURI), which then takes stderr too (Stderr is ignored). With a
	// binary logger and no terminal, the runc shim gives the container no stdin
	// (/dev/null); with a terminal it copies the Stdin FIFO into it.
	Stdin, Stdout, Stderr string
	// Options go to the shim in the create as an Any (internal/shimopts builds them from
	// the row's shim_options and the cgroup driver: runc's options, which the runc shim
	// hands to runc and the runsc and Kata shims read too, or the generic runtime options);
	// nil: none.
	Options proto.Message
}

// ExecOptions describe an additional process in a task.
type ExecOptions struct {
	ID, ExecID            string
	Process               *specs.Process
	Terminal              bool
	Stdin, Stdout, Stderr string // FIFO paths, "" for none
}

// Exit is the end of a process.
type Exit struct {
	Status   uint32 // exit code, 128+signal for a signal
	ExitedAt time.Time
}

// State is a process's state as the shim sees it.
type State struct {
	Status     string // created, running, stopped, paused, pausing, unknown
	Pid        uint32
	ExitStatus uint32
	ExitedAt   time.Time
}

// CallError is a failed call to a shim; it names the shim, the call and the process.
type CallError struct {
	Shim, Op, ID string
	Err          error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("shim %s: %s %s: %v", e.Shim, e.Op, e.ID, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// wrap gives a call's error context and an errdefs kind: the shim's gRPC status codes
// map to errdefs, a closed connection to ErrShimDied. The shim's message is kept.
func (c *Client) wrap(op, id string, err error) error {
	if err == nil {
		return nil
	}
	e := &CallError{Shim: c.cfg.ID, Op: op, ID: id, Err: err}
	switch {
	case errors.Is(err, ttrpc.ErrClosed):
		if c.closed.Load() {
			e.Err = fmt.Errorf("client closed: %w", err)
		} else {
			e.Err = ErrShimDied
		}
		return e
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return e
	}
	st, ok := status.FromError(err)
	if !ok {
		return e
	}
	if kind, ok := codeKinds[st.Code()]; ok {
		e.Err = fmt.Errorf("%s: %w", st.Message(), kind)
	} else {
		e.Err = errors.New(st.Message())
	}
	return e
}

// codeKinds are the shim's gRPC status codes that callers tell apart.
var codeKinds = map[codes.Code]error{
	codes.NotFound:           errdefs.ErrNotFound,
	codes.AlreadyExists:      errdefs.ErrAlreadyExists,
	codes.FailedPrecondition: errdefs.ErrFailedPrecondition,
	codes.InvalidArgument:    errdefs.ErrInvalidArgument,
	codes.Unavailable:        errdefs.ErrUnavailable,
	codes.DeadlineExceeded:   context.DeadlineExceeded,
	codes.Canceled:           context.Canceled,
}

// Create creates a task; it returns the pid of its init.
func (c *Client) Create(ctx context.Context, o CreateOptions) (uint32, error) {
	req := &taskapi.CreateTaskRequest{ID: o.ID, Bundle: o.Bundle, Terminal: o.Terminal,
		Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr}
	if o.Options != nil {
		opts, err := typeurl.MarshalAnyToProto(o.Options)
		if err != nil {
			return 0, &CallError{Shim: c.cfg.ID, Op: "create", ID: o.ID, Err: err}
		}
		req.Options = opts
	}
	for _, m := range o.Rootfs {
		req.Rootfs = append(req.Rootfs, &types.Mount{Type: m.Type, Source: m.Source, Target: m.Target, Options: m.Options})
	}
	// Before the call: if the daemon dies during it, Cleanup still deletes the task.
	taskFile := filepath.Join(o.Bundle, TaskFile)
	if err := os.WriteFile(taskFile, nil, 0o600); err != nil {
		return 0, &CallError{Shim: c.cfg.ID, Op: "create", ID: o.ID, Err: err}
	}
	resp, err := c.task.Create(ctx, req)
	if err != nil {
		err = c.wrap("create", o.ID, err)
		if !errors.Is(err, ErrShimDied) && ctx.Err() == nil {
			// The shim answered: there is no task for a later cleanup to delete.
			_ = os.Remove(taskFile)
		}
		return 0, err
	}
	c.bundles.Store(o.ID, o.Bundle)
	return resp.Pid, nil
}

// Start starts a created task (execID "") or exec.
func (c *Client) Start(ctx context.Context, id, execID string) (uint32, error) {
	resp, err := c.task.Start(ctx, &taskapi.StartRequest{ID: id, ExecID: execID})
	if err != nil {
		return 0, c.wrap("start", procName(id, execID), err)
	}
	return resp.Pid, nil
}

// Kill signals the task's init or an exec; all signals every process of the task.
func (c *Client) Kill(ctx context.Context, id, execID string, sig syscall.Signal, all bool) error {
	_, err := c.task.Kill(ctx, &taskapi.KillRequest{ID: id, ExecID: execID, Signal: uint32(sig), All: all})
	return c.wrap("kill", procName(id, execID), err)
}

// Wait blocks until the process has exited (or ctx ends) and returns its exit.
func (c *Client) Wait(ctx context.Context, id, execID string) (Exit, error) {
	resp, err := c.task.Wait(ctx, &taskapi.WaitRequest{ID: id, ExecID: execID})
	if err != nil {
		return Exit{}, c.wrap("wait", procName(id, execID), err)
	}
	return Exit{Status: resp.ExitStatus, ExitedAt: timeOf(resp.ExitedAt)}, nil
}

// Delete removes an exited process (the task itself for execID "") and returns its exit.
func (c *Client) Delete(ctx context.Context, id, execID string) (Exit, error) {
	var bundle string
	if execID == "" {
		bundle = c.bundleOf(ctx, id)
	}
	resp, err := c.task.Delete(ctx, &taskapi.DeleteRequest{ID: id, ExecID: execID})
	if err != nil {
		err = c.wrap("delete", procName(id, execID), err)
		if bundle != "" && errors.Is(err, errdefs.ErrNotFound) {
			_ = os.Remove(filepath.Join(bundle, TaskFile)) // the shim has no such task
		}
		return Exit{}, err
	}
	if bundle != "" {
		_ = os.Remove(filepath.Join(bundle, TaskFile))
	}
	return Exit{Status: resp.ExitStatus, ExitedAt: timeOf(resp.ExitedAt)}, nil
}

// State returns a process's state.
func (c *Client) State(ctx context.Context, id, execID string) (State, error) {
	resp, err := c.task.State(ctx, &taskapi.StateRequest{ID: id, ExecID: execID})
	if err != nil {
		return State{}, c.wrap("state", procName(id, execID), err)
	}
	return State{Status: strings.ToLower(resp.Status.String()), Pid: resp.Pid,
		ExitStatus: resp.ExitStatus, ExitedAt: timeOf(resp.ExitedAt)}, nil
}

// Exec adds a process to a task; Start starts it.
func (c *Client) Exec(ctx context.Context, o ExecOptions) error {
	if o.Process == nil {
		return fmt.Errorf("shim %s: exec %s: no process: %w", c.cfg.ID, procName(o.ID, o.ExecID), errdefs.ErrInvalidArgument)
	}
	spec, err := json.Marshal(o.Process)
	if err != nil {
		return fmt.Errorf("shim %s: exec %s: %w", c.cfg.ID, procName(o.ID, o.ExecID), err)
	}
	_, err = c.task.Exec(ctx, &taskapi.ExecProcessRequest{ID: o.ID, ExecID: o.ExecID, Terminal: o.Terminal,
		Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, Spec: &anypb.Any{TypeUrl: processTypeURL, Value: spec}})
	return c.wrap("exec", procName(o.ID, o.ExecID), err)
}

// ResizePty resizes the process's terminal.
func (c *Client) ResizePty(ctx context.Context, id, execID string, width, height uint32) error {
	_, err := c.task.ResizePty(ctx, &taskapi.ResizePtyRequest{ID: id, ExecID: execID, Width: width, Height: height})
	return c.wrap("resize", procName(id, execID), err)
}

// CloseIO closes the process's stdin (the shim holds its own end of the stdin FIFO, so
// the process sees EOF only after this).
func (c *Client) CloseIO(ctx context.Context, id, execID string) error {
	_, err := c.task.CloseIO(ctx, &taskapi.CloseIORequest{ID: id, ExecID: execID, Stdin: true})
	return c.wrap("close stdin", procName(id, execID), err)
}

// Update changes the task's resources.
func (c *Client) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("shim %s: update %s: %w", c.cfg.ID, id, err)
	}
	_, err = c.task.Update(ctx, &taskapi.UpdateTaskRequest{ID: id, Resources: &anypb.Any{TypeUrl: resourcesTypeURL, Value: b}})
	return c.wrap("update", id, err)
}

// bundleOf returns the bundle of task id: from its Create, else (after a reconnect) as
// the shim reports it; "" if unknown.
func (c *Client) bundleOf(ctx context.Context, id string) string {
	if b, ok := c.bundles.Load(id); ok {
		c.bundles.Delete(id)
		return b.(string)
	}
	if resp, err := c.task.State(ctx, &taskapi.StateRequest{ID: id}); err == nil {
		return resp.Bundle
	}
	return ""
}

// procName names a process in errors: the task id, with "/exec" for an exec.
func procName(id, execID string) string {
	if execID == "" {
		return id
	}
	return id + "/" + execID
}

func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil || (ts.Seconds == 0 && ts.Nanos == 0) {
		return time.Time{}
	}
	return ts.AsTime()
}
