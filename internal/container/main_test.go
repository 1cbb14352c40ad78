package container

import (
	"os"
	"testing"

	"github.com/containers/storage/pkg/reexec"
)

// TestMain lets containers/storage re-execute the test binary to apply a checkpoint's
// rootfs changes (its chrooted untar), as the daemon's main does.
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}
