package boot

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSince(t *testing.T) {
	dir := t.TempDir()
	bootIDPath = filepath.Join(dir, "boot_id_now")
	statPath = filepath.Join(dir, "stat")
	t.Cleanup(func() { bootIDPath, statPath = "/proc/sys/kernel/random/boot_id", "/proc/stat" })
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(bootIDPath, "8a1e5d2c-0f3b-4c6e-9d7a-1b2c3d4e5f60\n")
	write(statPath, "cpu  1 2 3\nbtime 1764115200\nprocesses 9\n")
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if r, _, err := Since(state); r || err != nil {
		t.Fatalf("no boot recorded: rebooted %v, %v; want not (a first start)", r, err)
	}
	if err := Record(state); err != nil {
		t.Fatal(err)
	}
	if r, _, err := Since(state); r || err != nil {
		t.Fatalf("same boot: rebooted %v, %v", r, err)
	}
	write(bootIDPath, "0b7c2e4d-6a8f-4b1c-8e3d-5f6a7b8c9d0e\n")
	r, at, err := Since(state)
	if !r || err != nil || !at.Equal(time.Unix(1764115200, 0)) {
		t.Fatalf("another boot: rebooted %v at %v, %v; want true at btime", r, at, err)
	}
	if err := Record(state); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := Since(state); r {
		t.Error("the new boot recorded, still a reboot")
	}
	// A file cut short is no knowledge, not a reboot.
	write(filepath.Join(state, File), "0b7c2e4d-6a8f")
	if r, _, err := Since(state); r || err == nil {
		t.Errorf("a garbled boot record: rebooted %v, %v; want not, with an error", r, err)
	}
	// A boot that cannot be recorded leaves no record of the last one.
	bootIDPath = filepath.Join(dir, "missing")
	if err := Record(state); err == nil {
		t.Error("Record without a boot ID succeeded")
	}
	if _, err := os.Stat(filepath.Join(state, File)); !os.IsNotExist(err) {
		t.Errorf("the last boot's record is left after a failed Record: %v", err)
	}
}
