package container

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/handlers"
)

// FuzzDecodeRecord: whatever bytes a container record holds (a disk error, a hand edit, a
// hostile write), decoding never panics, and a record it accepts is the container kept
// under that ID, whose directory (which recovery and removal delete whole) is one named
// for it: never "/", another container's, or a path out of the run dir by ".."; and whose
// restore (deleted whole too) is <restore dir>/<id> exactly.
func FuzzDecodeRecord(f *testing.F) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const restores = "/var/lib/rtshimd/restores"
	cfg := `{"metadata":{"name":"c"},"image":{"image":"busybox"}}`
	for _, meta := range []string{
		`{"id":"` + id + `","kind":"oci","dir":"/run/rtshimd/containers/` + id + `","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":` + cfg + `}`,
		`{"id":"` + id + `","shared":true,"runtime":{"handler":"runsc","path":"/usr/bin/runsc"},"config":` + cfg + `}`,
		`{"id":"` + id + `","kind":"oci","dir":"/","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":` + cfg + `}`,
		`{"id":"` + id + `","kind":"oci","dir":"/run/rtshimd/containers/../../../` + id + `","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":` + cfg + `}`,
		`{"id":"../../etc","kind":"oci","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":` + cfg + `}`,
		`{"id":"` + id + `","kind":"oci","restore":"` + restores + `/` + id + `","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":` + cfg + `}`,
		`{"id":"` + id + `","kind":"oci","restore":"/etc","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":` + cfg + `}`,
		`{"id":"` + id + `","kind":"oci","restore":"` + restores + `/` + id + `/../../..","runtime":{"handler":"runc","path":"/usr/sbin/runc"},"config":` + cfg + `}`,
	} {
		f.Add([]byte(meta), []byte(`{"state":"running","pid":42}`))
	}
	m := &Manager{opts: Options{Runtimes: handlers.NewRuntimes(handlers.Env{}), RestoreDir: restores}}
	f.Fuzz(func(t *testing.T, meta, status []byte) {
		c, err := m.decodeRecord(id, meta, status)
		if err != nil {
			return
		}
		if c.ID != id {
			t.Fatalf("the record kept as %s was read as container %q", id, c.ID)
		}
		if d := c.Dir; d != "" && (!filepath.IsAbs(d) || filepath.Base(d) != id || strings.Contains(d, "/..") || filepath.Clean(d) != d) {
			t.Fatalf("a record was read with dir %q, which removal would delete", d)
		}
		if r := c.Restore; r != "" && r != filepath.Join(restores, id) {
			t.Fatalf("a record was read with restore %q, which removal would delete", r)
		}
	})
}
