// Package boot tells whether the node restarted since the daemon last ran: the kernel's
// boot ID is kept in the state root, and a different one at start means every process,
// mount and namespace the records name ended with the old boot.
package boot

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rtshimd/rtshimd/internal/store"
)

// File is the name, in the state root, of the boot ID the daemon last ran in.
const File = "boot_id"

// Paths of the kernel's; variables for tests.
var (
	bootIDPath = "/proc/sys/kernel/random/boot_id"
	statPath   = "/proc/stat"
)

// Since reports whether the node booted since the daemon recorded its boot in stateRoot,
// and when this boot began. A state root without the file (a first start, or a release
// that did not keep it) is not a reboot: recovery then finds out container by container.
func Since(stateRoot string) (rebooted bool, at time.Time, err error) {
	cur, err := os.ReadFile(bootIDPath)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("read the boot ID: %w", err)
	}
	last, err := os.ReadFile(filepath.Join(stateRoot, File))
	if errors.Is(err, os.ErrNotExist) {
		return false, time.Time{}, nil
	}
	if err != nil {
		return false, time.Time{}, fmt.Errorf("read the last boot ID: %w", err)
	}
	last = bytes.TrimSpace(last)
	if !isBootID(last) {
		// Not one this daemon wrote whole: no knowledge, rather than a reboot that would
		// end every container the records name.
		return false, time.Time{}, fmt.Errorf("%s holds %q, not a boot ID", filepath.Join(stateRoot, File), last)
	}
	if bytes.Equal(bytes.TrimSpace(cur), last) {
		return false, time.Time{}, nil
	}
	at, err = bootTime()
	if err != nil {
		return true, time.Now(), err
	}
	return true, at, nil
}

// Record writes this boot's ID into stateRoot, once the records of the last are
// reconciled with it. If it cannot, it removes the last boot's: a later start in this
// same boot must not take the old one for a reboot.
func Record(stateRoot string) error {
	path := filepath.Join(stateRoot, File)
	cur, err := os.ReadFile(bootIDPath)
	if err == nil {
		err = store.WriteFileAtomic(path, bytes.TrimSpace(cur), 0o644)
	}
	if err != nil {
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("record the boot ID: %w; and remove the last one: %v", err, rerr)
		}
		return fmt.Errorf("record the boot ID: %w", err)
	}
	return nil
}

// isBootID reports whether b has the kernel's boot ID form (a UUID).
func isBootID(b []byte) bool {
	if len(b) != 36 {
		return false
	}
	for i, c := range b {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case (c < '0' || c > '9') && (c < 'a' || c > 'f'):
			return false
		}
	}
	return true
}

// bootTime is when this boot began (btime in /proc/stat).
func bootTime() (time.Time, error) {
	b, err := os.ReadFile(statPath)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the boot time: %w", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			s, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("boot time %q: %w", v, err)
			}
			return time.Unix(s, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("no btime in %s", statPath)
}
