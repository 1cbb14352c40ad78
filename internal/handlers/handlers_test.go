package handlers

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// table returns the default table with every handler ready and able to do everything;
// tests take away what they check.
func table(t *testing.T) (*Table, map[string]*Handler) {
	t.Helper()
	tb, err := New(config.Default(), NewRuntimes(Env{}))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Handler{}
	for _, h := range tb.List() {
		h.Ready, h.Reason = true, ""
		h.Features = Features{HostNetwork: true, HostPID: true, HostIPC: true, UserNamespaces: true}
		byName[h.Name] = h
	}
	return tb, byName
}

func pod(ns *runtimeapi.NamespaceOption) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: "u"},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}},
	}
}

func TestCheckPod(t *testing.T) {
	node, podMode := runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_POD
	tests := []struct {
		name    string
		without func(*Features) // the feature the handler lacks
		ns      *runtimeapi.NamespaceOption
		refused string // feature named in the refusal; "" means accepted
	}{
		{"host network refused", func(f *Features) { f.HostNetwork = false }, &runtimeapi.NamespaceOption{Network: node}, "host_network"},
		{"host network allowed", func(f *Features) { f.HostPID = false }, &runtimeapi.NamespaceOption{Network: node}, ""},
		{"pod network without host_network", func(f *Features) { f.HostNetwork = false }, &runtimeapi.NamespaceOption{Network: podMode}, ""},
		{"host pid refused", func(f *Features) { f.HostPID = false }, &runtimeapi.NamespaceOption{Pid: node}, "host_pid"},
		{"container pid without host_pid", func(f *Features) { f.HostPID = false }, &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}, ""},
		{"host ipc refused", func(f *Features) { f.HostIPC = false }, &runtimeapi.NamespaceOption{Ipc: node}, "host_ipc"},
		{"host ipc allowed", func(f *Features) {}, &runtimeapi.NamespaceOption{Ipc: node}, ""},
		{"user namespace refused", func(f *Features) { f.UserNamespaces = false },
			&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: podMode}}, "user_namespaces"},
		{"no userns_options is the node's", func(f *Features) { f.UserNamespaces = false }, &runtimeapi.NamespaceOption{}, ""},
		{"userns NODE", func(f *Features) { f.UserNamespaces = false },
			&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: node}}, ""},
		{"no namespace options", func(f *Features) { *f = Features{} }, nil, ""},
		{"userns with host network", func(f *Features) { f.RecursiveReadOnlyMounts = true },
			&runtimeapi.NamespaceOption{Network: node, UsernsOptions: &runtimeapi.UserNamespace{Mode: podMode}}, ""},
		{"userns with host network needs rro", func(f *Features) {},
			&runtimeapi.NamespaceOption{Network: node, UsernsOptions: &runtimeapi.UserNamespace{Mode: podMode}}, "recursive_read_only_mounts"},
		{"userns with pod network needs no rro", func(f *Features) {},
			&runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: podMode}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, hs := table(t)
			h := hs["kata"]
			tt.without(&h.Features)
			err := h.CheckPod(pod(tt.ns))
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("CheckPod: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("CheckPod = %v, want ErrFailedPrecondition", err)
			}
			for _, want := range []string{`"kata"`, tt.refused} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("CheckPod = %q, want it to name %s", err, want)
				}
			}
		})
	}
	// A nil config asks for nothing.
	_, hs := table(t)
	hs["runc"].Features = Features{}
	if err := hs["runc"].CheckPod(nil); err != nil {
		t.Errorf("CheckPod(nil) = %v", err)
	}
}

func TestLookup(t *testing.T) {
	tb, hs := table(t)
	hs["crun"].Ready, hs["crun"].Reason = false, "crun refuses cgroup v1 hybrid hosts"

	if tb.Default() != "runc" {
		t.Errorf("Default = %q", tb.Default())
	}
	for name, want := range map[string]string{"": "runc", "runc": "runc", "runsc": "runsc"} {
		h, err := tb.Lookup(name)
		if err != nil || h.Name != want || h != hs[want] {
			t.Errorf("Lookup(%q) = %v, %v; want %s", name, h, err, want)
		}
	}

	_, err := tb.Lookup("gvisor")
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Lookup(unknown) = %v, want ErrNotFound", err)
	} else if !strings.Contains(err.Error(), `"gvisor"`) || !strings.Contains(err.Error(), "crun, kata, runc, runc-shim, runsc, runsc-debian") {
		t.Errorf("Lookup(unknown) = %q, want it to name the handler and the configured ones", err)
	}

	_, err = tb.Lookup("crun")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Lookup(not ready) = %v, want ErrFailedPrecondition", err)
	} else if !strings.Contains(err.Error(), "crun refuses cgroup v1 hybrid hosts") {
		t.Errorf("Lookup(not ready) = %q, want the reason", err)
	}
}

// An ImageSpec may name any configured row, ready or not; "" is the default row; a row
// with image_store = "separate" says so; an unknown name is refused as invalid, naming the
// configured ones.
func TestImageStore(t *testing.T) {
	tb, hs := table(t)
	hs["crun"].Ready = false
	hs["runsc"].Config.ImageStore = config.ImageStoreSeparate
	for _, tt := range []struct {
		name, row string
		separate  bool
	}{{"", tb.Default(), false}, {"runc", "runc", false}, {"runsc", "runsc", true}, {"crun", "crun", false}} {
		row, sep, err := tb.ImageStore(tt.name)
		if err != nil || row != tt.row || sep != tt.separate {
			t.Errorf("ImageStore(%q) = %q, %v, %v; want %q, %v", tt.name, row, sep, err, tt.row, tt.separate)
		}
	}
	_, _, err := tb.ImageStore("gvisor")
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("ImageStore(unknown) = %v, want ErrInvalidArgument", err)
	}
	if !strings.Contains(err.Error(), `"gvisor"`) || !strings.Contains(err.Error(), "crun, kata, runc") {
		t.Errorf("ImageStore(unknown) = %q, want the name and the configured ones", err)
	}
}

func TestNew(t *testing.T) {
	cfg := config.Default()
	cfg.CgroupDriver = config.SystemdDriver
	tb, err := New(cfg, NewRuntimes(Env{}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range tb.List() {
		names = append(names, h.Name)
		if h.Ready || h.Reason == "" {
			t.Errorf("%s: ready %v reason %q before discovery", h.Name, h.Ready, h.Reason)
		}
		if h.Runtime.Handler != h.Name || !h.Runtime.SystemdCgroup {
			t.Errorf("%s: runtime %+v", h.Name, h.Runtime)
		}
	}
	if got := strings.Join(names, ","); got != "crun,kata,runc,runc-shim,runsc,runsc-debian,runsc-shim" {
		t.Errorf("List = %s, want sorted crun,kata,runc,runc-shim,runsc,runsc-debian,runsc-shim", got)
	}
	h := tb.byName["runsc"]
	if h.Type() != "oci-sandbox" || h.Kind.Type() != "oci-sandbox" || h.Runtime.Path != "/usr/local/bin/runsc" || h.Runtime.Root != "/run/rtshimd/runsc" ||
		strings.Join(h.Runtime.Args, " ") != "--oci-seccomp --allow-suid" || h.Config.Overhead.MilliCPU != 100 {
		t.Errorf("runsc = %+v runtime %+v", h, h.Runtime)
	}
	// Before discovery even the default handler cannot run pods.
	if _, err := tb.Lookup(""); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Lookup before discovery = %v, want ErrFailedPrecondition", err)
	}
}

func TestApplyDeclared(t *testing.T) {
	no, yes := false, true
	f := Features{HostNetwork: true, HostPID: true, HostIPC: true}
	var notes []string
	applyDeclared(&f, config.Declared{HostNetwork: &no, RecursiveReadOnlyMounts: &yes}, &notes)
	want := Features{HostNetwork: false, HostPID: true, HostIPC: true, RecursiveReadOnlyMounts: true}
	if f != want {
		t.Errorf("features = %+v, want %+v", f, want)
	}
	if len(notes) != 2 || !strings.HasPrefix(notes[0], "host_network: declared false") {
		t.Errorf("notes = %q", notes)
	}
}
