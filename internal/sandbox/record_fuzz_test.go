package sandbox

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtshimd/rtshimd/internal/handlers"
)

// FuzzDecodeRecord: whatever bytes a pod record holds, decoding never panics, and a
// record it accepts is the pod kept under that ID, with every path recovery and removal
// delete its own: its directory named for it, its namespace pins at <dir>/ns/<kind>, its
// bundle below its directory; never "/", /etc/passwd as a "pin", or a path out by "..".
func FuzzDecodeRecord(f *testing.F) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	dir := "/run/rtshimd/sandboxes/" + id
	cfg := `{"metadata":{"name":"p","namespace":"n","uid":"u"}}`
	rt := `"runtime":{"handler":"runc","path":"/usr/sbin/runc","root":"/run/x/runc"}`
	for _, meta := range []string{
		`{"id":"` + id + `","kind":"oci","dir":"` + dir + `","bundle_dir":"` + dir + `/` + id + `","netns":"` + dir + `/ns/net","ipcns":"` + dir + `/ns/ipc","utsns":"` + dir + `/ns/uts",` + rt + `,"config":` + cfg + `}`,
		`{"id":"` + id + `","sandbox":"shared","dir":"` + dir + `","infra":true,` + rt + `,"config":` + cfg + `}`,
		`{"id":"` + id + `","kind":"oci","dir":"/",` + rt + `,"config":` + cfg + `}`,
		`{"id":"` + id + `","kind":"oci","dir":"` + dir + `","netns":"/etc/passwd",` + rt + `,"config":` + cfg + `}`,
		`{"id":"` + id + `","kind":"oci","dir":"` + dir + `","bundle_dir":"/var/lib",` + rt + `,"config":` + cfg + `}`,
		`{"id":"other","kind":"oci",` + rt + `,"config":` + cfg + `}`,
	} {
		f.Add([]byte(meta), []byte(`{"state":"ready"}`))
	}
	m := &Manager{opts: Options{Runtimes: handlers.NewRuntimes(handlers.Env{})}}
	f.Fuzz(func(t *testing.T, meta, status []byte) {
		sb, err := m.decodeRecord(id, meta, status)
		if err != nil {
			return
		}
		if sb.ID != id {
			t.Fatalf("the record kept as %s was read as pod %q", id, sb.ID)
		}
		d := sb.Dir
		if d != "" && (!filepath.IsAbs(d) || filepath.Base(d) != id || strings.Contains(d, "/..") || filepath.Clean(d) != d) {
			t.Fatalf("a record was read with dir %q, which removal would delete", d)
		}
		for kind, p := range map[string]string{"net": sb.NetNS, "ipc": sb.IPCNS, "uts": sb.UTSNS, "user": sb.UserNS} {
			if p != "" && p != d+"/ns/"+kind {
				t.Fatalf("a record was read with the %s pin %q (dir %q), which removal would unmount and delete", kind, p, d)
			}
		}
		if b := sb.BundleDir; b != "" && (d == "" || !strings.HasPrefix(b, d+"/") || strings.Contains(b, "/..") || strings.Count(b[len(d)+1:], "/") > 0) {
			t.Fatalf("a record was read with bundle dir %q (dir %q)", b, d)
		}
	})
}
