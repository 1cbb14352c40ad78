// Package pause lays the project's pause program into a minimal root filesystem that every
// sandbox container (and every handler probe) shares read-only, so no pause image is pulled.
package pause

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rtshimd/rtshimd/internal/store"
)

// Binary is the path of the pause program inside the rootfs.
const Binary = "/pause"

// Prepare makes dir/rootfs hold the pause binary found at src and the mount points an OCI
// runtime needs, and returns the rootfs path. It rewrites the binary only if it changed.
func Prepare(dir, src string) (string, error) {
	rootfs := filepath.Join(dir, "rootfs")
	want, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("read pause program (pause_path) %s: %w", src, err)
	}
	for _, d := range []string{"proc", "dev", "sys", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return "", fmt.Errorf("prepare pause rootfs: %w", err)
		}
	}
	dst := filepath.Join(rootfs, Binary)
	if have, err := os.ReadFile(dst); err == nil && bytes.Equal(have, want) {
		return rootfs, nil
	}
	if err := store.WriteFileAtomic(dst, want, 0o755); err != nil {
		return "", fmt.Errorf("install pause program in %s: %w", rootfs, err)
	}
	return rootfs, nil
}
