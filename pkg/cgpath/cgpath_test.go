package cgpath

import "testing"

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
