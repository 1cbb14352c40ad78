package handlers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/kind"
)

// fakeState is a runtime whose state holds tasks by ID; stuck ones survive kill and delete.
type fakeState struct {
	kind.Runtime
	tasks map[string]string // id -> state
	stuck bool
	err   error
	calls []string
}

func (f *fakeState) Status(_ context.Context, t kind.Task) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	if st, ok := f.tasks[t.ID]; ok {
		return st, nil
	}
	return kind.TaskStopped, nil
}

func (f *fakeState) Kill(_ context.Context, t kind.Task, sig string, all bool) error {
	f.calls = append(f.calls, "kill "+t.ID+" "+sig)
	return nil
}

func (f *fakeState) Delete(_ context.Context, t kind.Task) error {
	f.calls = append(f.calls, "delete "+t.ID)
	if !f.stuck {
		delete(f.tasks, t.ID)
	}
	return nil
}

// A task whose record was lost is stopped and deleted in every ready row whose runtime
// still knows it; a row that cannot say, or a task that survives, is an error (the caller
// then keeps the task's files).
func TestStopUnrecorded(t *testing.T) {
	has := &fakeState{tasks: map[string]string{"c1": kind.TaskRunning}}
	empty := &fakeState{tasks: map[string]string{}}
	notReady := &fakeState{tasks: map[string]string{"c1": kind.TaskRunning}}
	table := &Table{byName: map[string]*Handler{
		"has":       {Name: "has", Kind: has, Discovery: Discovery{Ready: true}},
		"empty":     {Name: "empty", Kind: empty, Discovery: Discovery{Ready: true}},
		"not-ready": {Name: "not-ready", Kind: notReady},
	}}
	found, err := table.StopUnrecorded(context.Background(), kind.Task{ID: "c1"})
	if err != nil || !slices.Equal(found, []string{"has"}) {
		t.Fatalf("StopUnrecorded = %v, %v; want [has], nil", found, err)
	}
	if want := []string{"kill c1 SIGKILL", "delete c1"}; !slices.Equal(has.calls, want) {
		t.Errorf("runtime that had it: %q, want %q", has.calls, want)
	}
	if want := []string{"delete c1"}; !slices.Equal(empty.calls, want) {
		t.Errorf("runtime that did not: %q, want %q (its state of a stopped task removed)", empty.calls, want)
	}
	if len(notReady.calls) != 0 {
		t.Errorf("a row that is not ready was asked: %q", notReady.calls)
	}

	broken := &fakeState{err: errors.New("state: exec format error")}
	stuck := &fakeState{tasks: map[string]string{"c2": kind.TaskRunning}, stuck: true}
	table = &Table{byName: map[string]*Handler{
		"broken": {Name: "broken", Kind: broken, Discovery: Discovery{Ready: true}},
		"stuck":  {Name: "stuck", Kind: stuck, Discovery: Discovery{Ready: true}},
	}}
	found, err = table.StopUnrecorded(context.Background(), kind.Task{ID: "c2"})
	if !slices.Equal(found, []string{"stuck"}) || err == nil ||
		!strings.Contains(err.Error(), `handler "broken": state: exec format error`) ||
		!strings.Contains(err.Error(), `handler "stuck": c2 still running after kill and delete`) {
		t.Errorf("StopUnrecorded = %v, %v; want [stuck] and both errors", found, err)
	}
}

// FindUnrecorded names the rows that still run a task, and says when a row cannot tell.
func TestFindUnrecorded(t *testing.T) {
	has := &fakeState{tasks: map[string]string{"c1": kind.TaskRunning, "c2": kind.TaskStopped}}
	none := &fakeState{tasks: map[string]string{}}
	table := NewTable([]*Handler{
		{Name: "has", Kind: has, Discovery: Discovery{Ready: true}},
		{Name: "none", Kind: none, Discovery: Discovery{Ready: true}},
	}, "has")
	if found, err := table.FindUnrecorded(context.Background(), kind.Task{ID: "c1"}); err != nil || !slices.Equal(found, []string{"has"}) {
		t.Errorf("FindUnrecorded(c1) = %v, %v; want [has]", found, err)
	}
	if found, err := table.FindUnrecorded(context.Background(), kind.Task{ID: "c2"}); err != nil || len(found) != 0 {
		t.Errorf("FindUnrecorded(c2), stopped = %v, %v; want none", found, err)
	}
	none.err = errors.New("state dir unreadable")
	if _, err := table.FindUnrecorded(context.Background(), kind.Task{ID: "c3"}); err == nil {
		t.Errorf("FindUnrecorded with a row that cannot say: no error")
	}
	if len(has.calls)+len(none.calls) != 0 {
		t.Errorf("FindUnrecorded changed the runtime: %v %v", has.calls, none.calls)
	}
}
