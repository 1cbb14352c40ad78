package ocicli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
)

var _ kind.Checkpointer = (*Runtime)(nil)

// Checkpoint runs the runtime's checkpoint (CRIU) with --leave-running. The runtime's
// own message only points at CRIU's log, which goes with the work dir, so the reason is
// taken from there. A sandbox runtime refuses: gVisor checkpoints a whole sandbox in its
// own format, not one container through CRIU.
func (r *Runtime) Checkpoint(ctx context.Context, t kind.Task, imageDir, workDir string) error {
	if r.sandboxed {
		return fmt.Errorf("handler %q (%s) cannot checkpoint a container: gVisor checkpoints whole sandboxes, in its own format, not containers through CRIU: %w", r.rt.Handler, kind.OCISandbox, errdefs.ErrFailedPrecondition)
	}
	err := r.rt.Checkpoint(ctx, t.ID, imageDir, workDir)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", err, ctx.Err())
	}
	for _, dir := range []string{workDir, imageDir} {
		if why := criuErrors(filepath.Join(dir, "dump.log")); why != "" {
			return fmt.Errorf("handler %q: checkpoint %s: CRIU failed: %s: %w", r.rt.Handler, t.ID, why, errdefs.ErrFailedPrecondition)
		}
	}
	return fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
}

// Freeze pauses or resumes the container through the runtime (runc pause / resume).
func (r *Runtime) Freeze(ctx context.Context, t kind.Task, frozen bool) error {
	if frozen {
		return r.rt.Pause(ctx, t.ID)
	}
	return r.rt.Resume(ctx, t.ID)
}

// Restorable: a runc-like runtime restores a container from CRIU's image (its restore,
// run by the monitor at start); a sandbox runtime cannot (see Checkpoint).
func (r *Runtime) Restorable() error {
	if r.sandboxed {
		return fmt.Errorf("handler %q (%s) cannot restore a container from a checkpoint: gVisor restores whole sandboxes, in its own format, not containers through CRIU: %w", r.rt.Handler, kind.OCISandbox, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// criuErrors returns the first few distinct errors of a CRIU log, without their time and
// source location ("(00.015861) Error (criu/vdso.c:381): vdso: ..."); "" if none.
func criuErrors(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() && len(out) < 3 {
		_, msg, ok := strings.Cut(sc.Text(), "Error (")
		if !ok {
			continue
		}
		if _, after, ok := strings.Cut(msg, "): "); ok {
			msg = after
		}
		if msg = strings.TrimSpace(msg); msg != "" && !seen[msg] {
			seen[msg] = true
			out = append(out, msg)
		}
	}
	return strings.Join(out, "; ")
}
