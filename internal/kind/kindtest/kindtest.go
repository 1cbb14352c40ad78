// Package kindtest is a fake kind.Runtime for the managers' lifecycle unit tests, which
// run without root. Its tasks live in memory and outlive the managers that made them, as
// real tasks outlive a killed daemon; a test makes the next call of any operation fail,
// ends a task as its process would, and checks what the runtime still holds.
package kindtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgstats"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/oci"
)

// ErrInjected is what a failure set with FailNext wraps.
var ErrInjected = errors.New("kindtest: injected failure")

// Runtime is the fake. Its zero value is not usable: use New.
type Runtime struct {
	typ  string
	plan kind.PodPlan

	mu      sync.Mutex
	tasks   map[string]*task
	fail    map[string]int // operation → calls to fail
	calls   []string       // "<op> <id>", in order
	nextPid int
	updated map[string]*specs.LinuxResources

	startThenFail int  // starts that start their task, then fail
	strictCtx     bool // Status and Kill fail on an ended context
}

type task struct {
	t       kind.Task
	state   string // kind.TaskCreated, TaskRunning or TaskStopped
	started bool
	exit    kind.Exit
	exited  bool          // exit holds the task's end
	done    chan struct{} // closed when the task ended or was deleted
}

var _ kind.Runtime = (*Runtime)(nil)

// New returns a runtime of type typ (kind.OCI, ...) whose pods are prepared as plan says.
func New(typ string, plan kind.PodPlan) *Runtime {
	return &Runtime{typ: typ, plan: plan, tasks: map[string]*task{}, fail: map[string]int{},
		nextPid: 100000, updated: map[string]*specs.LinuxResources{}}
}

// FailNext makes the next n calls of op fail ("create", "start", "kill", "delete",
// "update", "status"). A failed create still leaves the task created, as a runtime
// that failed half-way does: the caller owes Delete.
func (r *Runtime) FailNext(op string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail[op] += n
}

// StartThenFail makes the next n calls of Start start their task and then fail, as a
// start does whose caller's deadline passed, or whose runtime command was killed, after
// the runtime had started the process: the task runs, the caller hears an error.
func (r *Runtime) StartThenFail(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.startThenFail += n
}

// StrictContexts makes every later Status and Kill fail when its context has ended, as a
// runtime's command or RPC run under that context does.
func (r *Runtime) StrictContexts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.strictCtx = true
}

// Exit ends task id's process with status, as if it had exited on its own.
func (r *Runtime) Exit(id string, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tk, ok := r.tasks[id]; ok && !tk.exited {
		r.end(tk, status, 0)
	}
}

// Tasks is the IDs of the tasks the runtime holds (created and not deleted), sorted.
func (r *Runtime) Tasks() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.tasks))
	for id := range r.tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// State is task id's state ("" when the runtime does not hold it).
func (r *Runtime) State(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tk, ok := r.tasks[id]; ok {
		return tk.state
	}
	return ""
}

// Calls is every call made so far, as "<op> <id>".
func (r *Runtime) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Updated is the last resources Update gave task id.
func (r *Runtime) Updated(id string) *specs.LinuxResources {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.updated[id]
}

// call records a call and says whether it is to fail (r.mu held).
func (r *Runtime) call(op, id string) error {
	r.calls = append(r.calls, op+" "+id)
	if r.fail[op] > 0 {
		r.fail[op]--
		return fmt.Errorf("handler %q: %s %s: %w", "kindtest", op, id, ErrInjected)
	}
	return nil
}

// end records the task's exit (r.mu held).
func (r *Runtime) end(tk *task, status, sig int) {
	tk.state, tk.exited = kind.TaskStopped, true
	tk.exit = kind.Exit{Pid: tk.exit.Pid, Status: status, Signal: sig, ExitedAt: time.Now()}
	close(tk.done)
}

func (r *Runtime) Type() string             { return r.typ }
func (r *Runtime) Plan() kind.PodPlan       { return r.plan }
func (r *Runtime) AdjustSpec(_ *specs.Spec) {}

func (r *Runtime) Create(_ context.Context, t kind.Task) (kind.Created, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tasks[t.ID]; ok {
		return kind.Created{}, fmt.Errorf("kindtest: create %s: the task exists", t.ID)
	}
	// The bundle must be there, as a runtime reads it.
	if _, err := oci.ReadBundle(t.Dir); err != nil {
		return kind.Created{}, fmt.Errorf("kindtest: create %s: %w", t.ID, err)
	}
	r.nextPid++
	tk := &task{t: t, state: kind.TaskCreated, done: make(chan struct{}), exit: kind.Exit{Pid: r.nextPid}}
	r.tasks[t.ID] = tk
	if err := r.call("create", t.ID); err != nil {
		return kind.Created{}, err
	}
	return kind.Created{Pid: r.nextPid}, nil
}

func (r *Runtime) Start(_ context.Context, t kind.Task) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("start", t.ID); err != nil {
		return err
	}
	tk, ok := r.tasks[t.ID]
	if !ok || tk.state != kind.TaskCreated {
		return fmt.Errorf("kindtest: start %s: not created", t.ID)
	}
	tk.state, tk.started = kind.TaskRunning, true
	if r.startThenFail > 0 {
		r.startThenFail--
		return fmt.Errorf("handler %q: start %s: the task started, then: %w", "kindtest", t.ID, ErrInjected)
	}
	return nil
}

// ended fails a call made with an ended context where StrictContexts says so (r.mu held).
func (r *Runtime) ended(ctx context.Context, op, id string) error {
	if r.strictCtx && ctx.Err() != nil {
		r.calls = append(r.calls, op+" "+id)
		return fmt.Errorf("handler %q: %s %s: %w", "kindtest", op, id, ctx.Err())
	}
	return nil
}

func (r *Runtime) Kill(ctx context.Context, t kind.Task, sig string, _ bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ended(ctx, "kill", t.ID); err != nil {
		return err
	}
	if err := r.call("kill", t.ID); err != nil {
		return err
	}
	tk, ok := r.tasks[t.ID]
	if !ok || tk.exited {
		return nil
	}
	n, err := oci.SignalNumber(sig)
	if err != nil {
		return err
	}
	r.end(tk, 128+int(n), int(n))
	return nil
}

func (r *Runtime) Wait(ctx context.Context, t kind.Task) (kind.Exit, bool, error) {
	r.mu.Lock()
	tk, ok := r.tasks[t.ID]
	r.mu.Unlock()
	if !ok {
		return kind.Exit{}, false, nil
	}
	select {
	case <-tk.done:
	case <-ctx.Done():
		return kind.Exit{}, false, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return tk.exit, tk.exited, nil
}

func (r *Runtime) Status(ctx context.Context, t kind.Task) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ended(ctx, "status", t.ID); err != nil {
		return "", err
	}
	if err := r.call("status", t.ID); err != nil {
		return "", err
	}
	tk, ok := r.tasks[t.ID]
	switch {
	case !ok:
		return kind.TaskStopped, nil
	case tk.state == kind.TaskStopped && !tk.started:
		return kind.TaskNeverStarted, nil
	}
	return tk.state, nil
}

func (r *Runtime) KillLost(_ context.Context, t kind.Task) kind.Exit {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "killlost "+t.ID)
	if tk, ok := r.tasks[t.ID]; ok && !tk.exited {
		r.end(tk, 137, 9)
	}
	return kind.Exit{Status: 137, Signal: 9, ExitedAt: time.Now()}
}

func (r *Runtime) Delete(_ context.Context, t kind.Task) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("delete", t.ID); err != nil {
		return err
	}
	tk, ok := r.tasks[t.ID]
	if !ok {
		return nil
	}
	if !tk.exited {
		if tk.started {
			// A runtime's forced delete kills what runs.
			r.end(tk, 137, 9)
		} else {
			close(tk.done)
		}
	}
	delete(r.tasks, t.ID)
	return nil
}

func (r *Runtime) Exec(context.Context, kind.Task, kind.ExecSpec) (kind.ExecProcess, error) {
	return nil, errors.New("kindtest: exec is not faked")
}

func (r *Runtime) Attach(context.Context, kind.Task, kind.AttachStreams) error {
	return errors.New("kindtest: attach is not faked")
}

func (r *Runtime) ReopenLog(context.Context, kind.Task) error { return nil }

func (r *Runtime) Update(_ context.Context, t kind.Task, res *specs.LinuxResources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("update", t.ID); err != nil {
		return err
	}
	if _, ok := r.tasks[t.ID]; !ok {
		return fmt.Errorf("kindtest: update %s: no such task", t.ID)
	}
	r.updated[t.ID] = res
	return nil
}

func (r *Runtime) Stats(context.Context, kind.Task, string, cgstats.Scope) (cgstats.Stats, error) {
	return cgstats.Stats{}, nil
}

func (r *Runtime) Version(context.Context) (string, error) { return "kindtest 1", nil }

func (r *Runtime) Features(context.Context) (*features.Features, error) {
	return &features.Features{}, nil
}

func (r *Runtime) Probe(_ context.Context, _, dir string) (kind.ProbeResult, error) {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return kind.ProbeResult{}, err
	}
	return kind.ProbeResult{}, nil
}

// Maker makes every row's runtime the one given (kind.Maker), as recovery asks for it:
// the fake, or a test's wrapper of it.
type Maker struct{ Runtime kind.Runtime }

func (m Maker) For(typ string, _ *kind.Row) (kind.Runtime, error) {
	if typ != m.Runtime.Type() {
		return nil, fmt.Errorf("kindtest: no runtime of type %q", typ)
	}
	return m.Runtime, nil
}
