package handlers

import (
	"context"
	"errors"
	"fmt"

	"github.com/rtshimd/rtshimd/internal/kind"
)

// StopUnrecorded ends task t, whose record was lost (quarantined as unreadable), wherever
// a ready row's runtime still knows it: the runtime's own state names its processes even
// when the daemon's record does not say which handler ran it. It returns the rows that
// had it. An error means some row could not say, or the task still runs: the caller must
// then keep the task's files (its rootfs may be in use).
func (t *Table) StopUnrecorded(ctx context.Context, task kind.Task) ([]string, error) {
	var found []string
	var errs []error
	for _, h := range t.List() {
		if !h.Ready || h.Kind == nil {
			continue
		}
		st, err := h.Kind.Status(ctx, task)
		if err != nil {
			errs = append(errs, fmt.Errorf("handler %q: %w", h.Name, err))
			continue
		}
		if st != kind.TaskStopped {
			found = append(found, h.Name)
			if err := h.Kind.Kill(ctx, task, "SIGKILL", true); err != nil {
				errs = append(errs, fmt.Errorf("handler %q: kill %s: %w", h.Name, task.ID, err))
			}
		}
		// Also for a stopped task: the runtime's state of it is removed (a task it does
		// not know is not an error).
		if err := h.Kind.Delete(ctx, task); err != nil {
			errs = append(errs, fmt.Errorf("handler %q: delete %s: %w", h.Name, task.ID, err))
			continue
		}
		if st != kind.TaskStopped {
			if now, err := h.Kind.Status(ctx, task); err != nil || now != kind.TaskStopped {
				errs = append(errs, fmt.Errorf("handler %q: %s still %s after kill and delete (%v)", h.Name, task.ID, now, err))
			}
		}
	}
	return found, errors.Join(errs...)
}

// FindUnrecorded returns the ready rows whose runtime still has task t, whose record was
// lost, in a state other than stopped: recovery keeps such a task and its files instead of
// taking its directory for a leftover. An error means some row could not say: the caller
// must then assume it runs.
func (t *Table) FindUnrecorded(ctx context.Context, task kind.Task) ([]string, error) {
	var found []string
	var errs []error
	t.eachReady(func(h *Handler) {
		st, err := h.Kind.Status(ctx, task)
		if err != nil {
			errs = append(errs, fmt.Errorf("handler %q: %w", h.Name, err))
		} else if st != kind.TaskStopped {
			found = append(found, h.Name)
		}
	})
	return found, errors.Join(errs...)
}

// eachReady calls f with each ready row that has a runtime.
func (t *Table) eachReady(f func(h *Handler)) {
	for _, h := range t.List() {
		if h.Ready && h.Kind != nil {
			f(h)
		}
	}
}
