package cgpath

import (
	"path"
	"testing"
)

func TestDir(t *testing.T) {
	for in, want := range map[string]string{
		"/kubepods/burstable/pod1/ctr":               "/kubepods/burstable/pod1/ctr",
		"/rtshimd//x/../ctr":                         "/rtshimd/ctr",
		"kubepods-burstable-pod1.slice:rtshimd:abc":  "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/rtshimd-abc.scope",
		"system.slice:rtshimd:abc":                   "/system.slice/rtshimd-abc.scope",
		":rtshimd:abc":                               "/system.slice/rtshimd-abc.scope",
		"kubepods.slice:rtshimd:kubepods-pod2.slice": "/kubepods.slice/kubepods-pod2.slice",
	} {
		got, err := Dir(in)
		if err != nil || got != want {
			t.Errorf("Dir(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a:b", "notaslice:p:n", "a/b.slice:p:n", "-bad.slice:p:n"} {
		if got, err := Dir(bad); err == nil {
			t.Errorf("Dir(%q) = %q, want an error", bad, got)
		}
	}
}

func TestParent(t *testing.T) {
	for _, c := range []struct {
		systemd bool
		in      string
		want    string
	}{
		{false, "/kubepods/burstable/pod1", "/kubepods/burstable/pod1"},
		{false, "rtshimd-test/pod", "/rtshimd-test/pod"},
		{true, "kubepods-besteffort-pod3.slice", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod3.slice"},
		{true, "/already/a/path", "/already/a/path"},
	} {
		got, err := Parent(c.systemd, c.in)
		if err != nil || got != c.want {
			t.Errorf("Parent(%v, %q) = %q, %v; want %q", c.systemd, c.in, got, err, c.want)
		}
	}
}

// For writes what Dir reads: the directory runc puts the task in, for either driver.
func TestForThenDir(t *testing.T) {
	tests := []struct {
		systemd           bool
		parent, want, dir string
	}{
		{false, "", "/rtshimd/abc", "/rtshimd/abc"},
		{false, "/kubepods/besteffort/pod1", "/kubepods/besteffort/pod1/abc", "/kubepods/besteffort/pod1/abc"},
		{false, "kubepods/pod1", "/kubepods/pod1/abc", "/kubepods/pod1/abc"},
		{false, "/kubepods/pod1/", "/kubepods/pod1/abc", "/kubepods/pod1/abc"},
		{true, "kubepods-besteffort-pod1.slice", "kubepods-besteffort-pod1.slice:rtshimd:abc",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/rtshimd-abc.scope"},
		{true, "", "system.slice:rtshimd:abc", "/system.slice/rtshimd-abc.scope"},
		// What kubelet sends with cgroupDriver: systemd: the slice's expanded path.
		{true, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice", "kubepods-besteffort-pod1.slice:rtshimd:abc",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/rtshimd-abc.scope"},
		{true, "/kubepods.slice/kubepods-pod2.slice/", "kubepods-pod2.slice:rtshimd:abc", "/kubepods.slice/kubepods-pod2.slice/rtshimd-abc.scope"},
	}
	for _, tt := range tests {
		got := For(tt.systemd, tt.parent, "abc")
		if got != tt.want {
			t.Errorf("For(%v, %q) = %q, want %q", tt.systemd, tt.parent, got, tt.want)
			continue
		}
		dir, err := Dir(got)
		if err != nil || dir != tt.dir {
			t.Errorf("Dir(%q) = %q, %v; want %q", got, dir, err, tt.dir)
		}
		if !tt.systemd {
			continue
		}
		// The scope sits in the directory Parent gives for the pod's slice.
		pdir, err := Parent(true, tt.parent)
		if tt.parent != "" && (err != nil || path.Dir(dir) != pdir) {
			t.Errorf("Parent(%q) = %q, %v; the scope is in %q", tt.parent, pdir, err, path.Dir(dir))
		}
	}
}
