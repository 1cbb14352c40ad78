// Package ocicmd drives command-line OCI runtime binaries (runc, crun, runsc): one function
// per subcommand. Every call has a deadline and turns the runtime's own error text into
// the error the user sees, prefixed with the handler and the operation. The spec those
// runtimes read is built by internal/oci.
package ocicmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/rtshimd/rtshimd/internal/cmdexit"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/metrics"
)

// Runtime is one OCI runtime binary as a handler row configures it.
type Runtime struct {
	kind.Row
}

// New returns the driver of row's binary (a copy of row: the driver never changes it).
func New(row *kind.Row) *Runtime { return &Runtime{Row: *row} }

// GlobalArgs are the flags placed before every subcommand.
func (r *Runtime) GlobalArgs() []string {
	args := []string{"--root", r.Root}
	if r.SystemdCgroup {
		args = append(args, "--systemd-cgroup")
	}
	return append(args, r.Args...)
}

// Error is a failed runtime call.
type Error struct {
	Handler string
	Op      string
	ID      string
	Text    string // what the runtime printed (stderr, else stdout), or the exec error
	// NotRun is set when the binary could not be executed at all.
	NotRun bool
}

func (e *Error) Error() string {
	what := e.Op
	if e.ID != "" {
		what += " " + e.ID
	}
	return fmt.Sprintf("handler %q: %s: %s", e.Handler, what, e.Text)
}

// IsNotExist reports whether err says the container is unknown to the runtime.
func IsNotExist(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.NotRun {
		return false
	}
	t := strings.ToLower(e.Text)
	return strings.Contains(t, "does not exist") || strings.Contains(t, "not found") || strings.Contains(t, "no such file")
}

func (r *Runtime) run(ctx context.Context, op, id string, args ...string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, kind.DefaultTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, r.Path, append(r.GlobalArgs(), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// A sandbox process the runtime leaves behind may hold these pipes for ever; never
	// wait for their EOF beyond this.
	cmd.WaitDelay = 2 * time.Second
	// A runtime that exited 0 did its work even when a child it left still holds the pipes:
	// Run then reports ErrWaitDelay, and counting that as a failure left RemovePodSandbox
	// with the container and its rootfs mounts behind (runc delete, seen in the v2 node).
	if err := cmd.Run(); !cmdexit.Succeeded(cmd, err) {
		text := strings.TrimSpace(stderr.String())
		if text == "" {
			text = strings.TrimSpace(stdout.String())
		}
		if ctx.Err() != nil {
			text = fmt.Sprintf("timed out (%v) %s", ctx.Err(), text)
		} else if text == "" {
			text = err.Error()
		}
		metrics.RuntimeFailures.WithLabelValues(r.Handler, op).Inc()
		var exitErr *exec.ExitError
		notRun := !errors.As(err, &exitErr) && ctx.Err() == nil
		return nil, &Error{Handler: r.Handler, Op: op, ID: id, Text: lastLines(text, 5), NotRun: notRun}
	}
	return stdout.Bytes(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Kill sends sig to the container's init (all its processes if all is set).
func (r *Runtime) Kill(ctx context.Context, id string, sig string, all bool) error {
	args := []string{"kill"}
	if all {
		args = append(args, "--all")
	}
	_, err := r.run(ctx, "kill", id, append(args, id, sig)...)
	return err
}

// KillPid sends sig to one process of a sandbox runtime's container, by its pid inside
// the sandbox (runsc's kill --pid).
func (r *Runtime) KillPid(ctx context.Context, id string, pid int, sig string) error {
	_, err := r.run(ctx, "kill", id, "kill", "--pid", strconv.Itoa(pid), id, sig)
	return err
}

// Delete removes the container; force kills it first if it still runs. A container the
// runtime does not know is not an error.
func (r *Runtime) Delete(ctx context.Context, id string, force bool) error {
	args := []string{"delete"}
	if force {
		args = append(args, "--force")
	}
	_, err := r.run(ctx, "delete", id, append(args, id)...)
	if IsNotExist(err) {
		return nil
	}
	return err
}

// State returns the runtime's view of the container.
func (r *Runtime) State(ctx context.Context, id string) (*specs.State, error) {
	out, err := r.run(ctx, "state", id, "state", id)
	if err != nil {
		return nil, err
	}
	var st specs.State
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, &Error{Handler: r.Handler, Op: "state", ID: id, Text: fmt.Sprintf("unreadable state %q: %v", out, err)}
	}
	return &st, nil
}

// EventStats is one reading of `<runtime> events --stats` (runc's and runsc's format; the
// fields rtshimd reads).
type EventStats struct {
	CPU struct {
		Usage struct {
			Total  uint64 `json:"total"`  // ns
			Kernel uint64 `json:"kernel"` // ns
			User   uint64 `json:"user"`   // ns
		} `json:"usage"`
		Throttling struct {
			Periods          uint64 `json:"periods"`
			ThrottledPeriods uint64 `json:"throttledPeriods"`
			ThrottledTime    uint64 `json:"throttledTime"` // ns
		} `json:"throttling"`
	} `json:"cpu"`
	Memory struct {
		Usage  EventMemoryEntry  `json:"usage"`
		Swap   EventMemoryEntry  `json:"swap"` // memory plus swap, as v1's memsw
		Kernel EventMemoryEntry  `json:"kernel"`
		Cache  uint64            `json:"cache"`
		Raw    map[string]uint64 `json:"raw"`
	} `json:"memory"`
	Pids struct {
		Current uint64 `json:"current"`
		Limit   uint64 `json:"limit"`
	} `json:"pids"`
	Blkio struct {
		IoServiceBytesRecursive []EventBlkioEntry `json:"ioServiceBytesRecursive"`
		IoServicedRecursive     []EventBlkioEntry `json:"ioServicedRecursive"`
	} `json:"blkio"`
}

// EventMemoryEntry is one memory counter of EventStats.
type EventMemoryEntry struct {
	Limit   uint64 `json:"limit"`
	Usage   uint64 `json:"usage"`
	Max     uint64 `json:"max"`
	Failcnt uint64 `json:"failcnt"`
}

// EventBlkioEntry is one device's count for one operation.
type EventBlkioEntry struct {
	Major uint64 `json:"major"`
	Minor uint64 `json:"minor"`
	Op    string `json:"op"`
	Value uint64 `json:"value"`
}

// Stats runs `<runtime> events --stats` for one reading of the container's usage: the
// only source for a sandbox runtime's containers, whose processes live in its sandbox.
func (r *Runtime) Stats(ctx context.Context, id string) (*EventStats, error) {
	out, err := r.run(ctx, "events", id, "events", "--stats", id)
	if err != nil {
		return nil, err
	}
	var ev struct {
		Type string     `json:"type"`
		Data EventStats `json:"data"`
	}
	if err := json.Unmarshal(out, &ev); err != nil || ev.Type != "stats" {
		return nil, &Error{Handler: r.Handler, Op: "events", ID: id, Text: fmt.Sprintf("unreadable stats %q: %v", out, err)}
	}
	return &ev.Data, nil
}

// WaitStopped polls the runtime until the container no longer runs (or ctx ends): for
// containers whose monitor is gone, so nothing else reports their end.
func (r *Runtime) WaitStopped(ctx context.Context, id string) {
	for {
		st, err := r.State(ctx, id)
		if IsNotExist(err) || (err == nil && st.Status != specs.StateRunning && st.Status != specs.StateCreated) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Run creates, starts and waits for a container in one call (used by handler probes).
func (r *Runtime) Run(ctx context.Context, id, bundle string) error {
	_, err := r.run(ctx, "run", id, "run", "--bundle", bundle, id)
	return err
}

// Update applies the resources in the JSON file to a container.
func (r *Runtime) Update(ctx context.Context, id, resourcesFile string) error {
	_, err := r.run(ctx, "update", id, "update", "--resources", resourcesFile, id)
	return err
}

// Checkpoint dumps the running container's processes with CRIU into imageDir and leaves
// them running; CRIU's log (dump.log) and work files go to workDir.
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir, workDir string) error {
	_, err := r.run(ctx, "checkpoint", id, "checkpoint", "--image-path", imageDir, "--work-path", workDir, "--leave-running", id)
	return err
}

// Pause freezes the container's processes (the cgroup freezer).
func (r *Runtime) Pause(ctx context.Context, id string) error {
	_, err := r.run(ctx, "pause", id, "pause", id)
	return err
}

// Resume thaws what Pause froze.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	_, err := r.run(ctx, "resume", id, "resume", id)
	return err
}

// Version returns the first line of `<runtime> --version`.
func (r *Runtime) Version(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, r.Path, "--version")
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return "", &Error{Handler: r.Handler, Op: "--version", Text: err.Error()}
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

// Features runs `<runtime> features`; runtimes without that subcommand return an error.
func (r *Runtime) Features(ctx context.Context) (*features.Features, error) {
	cmd := exec.CommandContext(ctx, r.Path, "features")
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &Error{Handler: r.Handler, Op: "features", Text: strings.TrimSpace(stderr.String() + " " + err.Error())}
	}
	var f features.Features
	if err := json.Unmarshal(out, &f); err != nil {
		return nil, &Error{Handler: r.Handler, Op: "features", Text: fmt.Sprintf("unreadable output: %v", err)}
	}
	return &f, nil
}
