package ocicli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/kind"
)

// fakeCheckpointer is a runtime whose checkpoint fails as runc does when CRIU cannot dump:
// a pointer to CRIU's log on stderr, the reason in the log in the work dir.
const fakeCheckpointer = `#!/bin/sh
while [ $# -gt 0 ]; do
	case "$1" in
	--work-path) shift; work="$1" ;;
	esac
	shift
done
cat > "$work/dump.log" <<'LOG'
(00.000010) Version: 3.17.1 (gitid 0)
(00.015861) Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds
(00.015862) Error (criu/vdso.c:613): vdso: Failed to fill self vdso symtable
(00.015863) Error (criu/vdso.c:613): vdso: Failed to fill self vdso symtable
(00.015864) Error (criu/kerndat.c:1615): kerndat_vdso_fill_symtable failed when initializing kerndat.
(00.015865) Error (criu/crtools.c:260): Could not initialize kernel features detection.
LOG
echo 'time="2024-01-01T00:00:00Z" level=error msg="criu failed: type DUMP errno 0\nlog file: dump.log"' >&2
exit 1
`

func TestCheckpointGivesCRIUsReason(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "runtime")
	if err := os.WriteFile(bin, []byte(fakeCheckpointer), 0o755); err != nil {
		t.Fatal(err)
	}
	img, work := filepath.Join(dir, "img"), filepath.Join(dir, "work")
	for _, d := range []string{img, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	row := &kind.Row{Handler: "runc", Path: bin, Root: filepath.Join(dir, "root")}
	err := NewOCI(row, Options{}).Checkpoint(context.Background(), kind.Task{ID: "c1"}, img, work)
	want := `handler "runc": checkpoint c1: CRIU failed: vdso: Unexpected rt vDSO area bounds; vdso: Failed to fill self vdso symtable; kerndat_vdso_fill_symtable failed when initializing kerndat.`
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v\nwant %s (failed precondition)", err, want)
	}

	// A sandbox runtime refuses, naming the handler, and runs nothing.
	row.Handler = "runsc"
	err = NewSandbox(row, Options{}).Checkpoint(context.Background(), kind.Task{ID: "c1"}, img, work)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `handler "runsc"`) {
		t.Errorf("sandbox runtime: %v", err)
	}
}
