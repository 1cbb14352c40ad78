package cdidevices

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// specYAML defines rtshimd.test/device=one: /dev/null as /dev/rtshimd-cdi, an environment
// variable and a bind mount of hostFile; and =two, an environment variable only.
func specYAML(hostFile string) string {
	return `cdiVersion: "0.6.0"
kind: rtshimd.test/device
devices:
- name: one
  containerEdits:
    env: ["CDI_ONE=yes"]
    deviceNodes:
    - path: /dev/rtshimd-cdi
      hostPath: /dev/null
    mounts:
    - hostPath: ` + hostFile + `
      containerPath: /etc/rtshimd-cdi
      options: ["ro", "bind"]
- name: two
  containerEdits:
    env: ["CDI_TWO=yes"]
containerEdits:
  env: ["CDI_VENDOR=rtshimd"]
`
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// baseSpec is the part of a built spec that CDI edits touch.
func baseSpec() *specs.Spec {
	return &specs.Spec{
		Process: &specs.Process{Env: []string{"PATH=/bin", "CDI_ONE=from-config"}},
		Mounts:  []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux:   &specs.Linux{Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}},
	}
}

func ctr(names []string, ann map[string]string) *runtimeapi.ContainerConfig {
	cfg := &runtimeapi.ContainerConfig{Annotations: ann}
	for _, n := range names {
		cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: n})
	}
	return cfg
}

func TestRequested(t *testing.T) {
	got, err := Requested(ctr(
		[]string{"rtshimd.test/device=one", "rtshimd.test/device=one"},
		map[string]string{
			"cdi.k8s.io/b":     "rtshimd.test/device=one,rtshimd.test/device=three",
			"cdi.k8s.io/a":     "rtshimd.test/device=two",
			"example.com/else": "not a device",
		}))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{"rtshimd.test/device=one", "config.CDI_devices[0]"},
		{"rtshimd.test/device=two", `config.annotations["cdi.k8s.io/a"]`},
		{"rtshimd.test/device=three", `config.annotations["cdi.k8s.io/b"]`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Requested = %v\nwant %v", got, want)
	}
	if got, err := Requested(&runtimeapi.ContainerConfig{}); err != nil || got != nil {
		t.Errorf("no devices: %v, %v", got, err)
	}
}

func TestRequestedRefusesBadNames(t *testing.T) {
	for _, tt := range []struct {
		cfg  *runtimeapi.ContainerConfig
		want string
	}{
		{ctr([]string{"rtshimd.test/device=one", "gpu0"}, nil), `config.CDI_devices[1] "gpu0" is not a qualified CDI device name`},
		{&runtimeapi.ContainerConfig{CDIDevices: []*runtimeapi.CDIDevice{nil}}, "config.CDI_devices[0] is empty"},
		{ctr(nil, map[string]string{"cdi.k8s.io/x": "rtshimd.test/device=one,"}), `config.annotations["cdi.k8s.io/x"] "rtshimd.test/device=one,": invalid CDI device name ""`},
	} {
		_, err := Requested(tt.cfg)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("error = %v, want InvalidArgument starting %q", err, tt.want)
		}
	}
}

func TestInject(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(t.TempDir(), "file")
	writeFile(t, host, "hello")
	writeFile(t, filepath.Join(dir, "rtshimd.yaml"), specYAML(host))
	r := New([]string{filepath.Join(t.TempDir(), "missing"), dir})

	spec := baseSpec()
	got, err := r.Inject(spec, ctr([]string{"rtshimd.test/device=one"}, map[string]string{"cdi.k8s.io/x": "rtshimd.test/device=two"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"rtshimd.test/device=one", "rtshimd.test/device=two"}; !reflect.DeepEqual(got, want) {
		t.Errorf("injected %v, want %v", got, want)
	}
	if len(spec.Linux.Devices) != 1 || spec.Linux.Devices[0].Path != "/dev/rtshimd-cdi" || spec.Linux.Devices[0].Type != "c" || spec.Linux.Devices[0].Major != 1 || spec.Linux.Devices[0].Minor != 3 {
		t.Errorf("devices = %+v, want /dev/rtshimd-cdi as c 1:3", spec.Linux.Devices)
	}
	rules := spec.Linux.Resources.Devices
	if last := rules[len(rules)-1]; !last.Allow || last.Type != "c" || *last.Major != 1 || *last.Minor != 3 || last.Access != "rwm" {
		t.Errorf("device cgroup rules = %+v, want an allow rule for c 1:3 last", rules)
	}
	for _, kv := range []string{"PATH=/bin", "CDI_ONE=yes", "CDI_TWO=yes", "CDI_VENDOR=rtshimd"} {
		if !slices.Contains(spec.Process.Env, kv) {
			t.Errorf("env %v lacks %s", spec.Process.Env, kv)
		}
	}
	if slices.Contains(spec.Process.Env, "CDI_ONE=from-config") {
		t.Errorf("env %v: the device's CDI_ONE must win over the config's", spec.Process.Env)
	}
	if !slices.ContainsFunc(spec.Mounts, func(m specs.Mount) bool {
		return m.Destination == "/etc/rtshimd-cdi" && m.Source == host && slices.Contains(m.Options, "ro")
	}) {
		t.Errorf("mounts = %+v, want %s on /etc/rtshimd-cdi", spec.Mounts, host)
	}
}

func TestInjectNothingRequested(t *testing.T) {
	spec := baseSpec()
	for _, r := range []*Registry{nil, New(nil), New([]string{t.TempDir()})} {
		if got, err := r.Inject(spec, ctr(nil, map[string]string{"other": "x"})); err != nil || got != nil {
			t.Errorf("Inject = %v, %v; want nothing", got, err)
		}
	}
	if !reflect.DeepEqual(spec, baseSpec()) {
		t.Errorf("spec changed: %+v", spec)
	}
}

func TestInjectRefusesUnknownDevices(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rtshimd.yaml"), specYAML("/etc/hostname"))
	r := New([]string{dir})
	_, err := r.Inject(baseSpec(), ctr([]string{"rtshimd.test/device=one", "rtshimd.test/device=nope"}, map[string]string{"cdi.k8s.io/z": "other.test/gpu=0"}))
	want := `config.CDI_devices[1] "rtshimd.test/device=nope", config.annotations["cdi.k8s.io/z"] "other.test/gpu=0": unresolvable CDI devices: no spec file in ` + dir + " defines them"
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v\nwant InvalidArgument starting %q", err, want)
	}

	for _, r := range []*Registry{nil, New(nil)} {
		_, err := r.Inject(baseSpec(), ctr([]string{"rtshimd.test/device=one"}, nil))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `config.CDI_devices[0] "rtshimd.test/device=one": no CDI spec directories are configured`) {
			t.Errorf("CDI off: error = %v", err)
		}
	}
}

// A spec file written after the registry was made is seen by the next container.
func TestInjectSeesNewSpecFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cdi") // made later, as a driver would
	r := New([]string{dir})
	cfg := ctr([]string{"rtshimd.test/device=two"}, nil)
	if _, err := r.Inject(baseSpec(), cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("before the spec file: %v, want InvalidArgument", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "rtshimd.json"), `{"cdiVersion":"0.6.0","kind":"rtshimd.test/device","devices":[{"name":"two","containerEdits":{"env":["CDI_TWO=yes"]}}]}`)
	spec := baseSpec()
	if _, err := r.Inject(spec, cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Process.Env, "CDI_TWO=yes") {
		t.Errorf("env %v lacks CDI_TWO=yes", spec.Process.Env)
	}
}

// A broken spec file is logged once and named when a device cannot be resolved; another
// vendor's devices still work.
func TestBrokenSpecFile(t *testing.T) {
	hook := test.NewGlobal()
	defer hook.Reset()
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.yaml")
	writeFile(t, broken, "cdiVersion: \"0.6.0\"\nkind: broken.test/device\ndevices: [{name: x, containerEdits: {env: [\"=bad\"]}}]\n")
	writeFile(t, filepath.Join(dir, "rtshimd.yaml"), specYAML("/etc/hostname"))
	r := New([]string{dir})

	if _, err := r.Inject(baseSpec(), ctr([]string{"rtshimd.test/device=two"}, nil)); err != nil {
		t.Fatalf("a good vendor's device: %v", err)
	}
	_, err := r.Inject(baseSpec(), ctr([]string{"broken.test/device=x"}, nil))
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "spec files that failed to load, see the daemon log: "+broken) {
		t.Errorf("error = %v, want one naming %s", err, broken)
	}
	var warned int
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && e.Data["file"] == broken {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d warnings about %s, want 1 (at start, not again while unchanged)", warned, broken)
	}
}

// A defined device whose host device is missing is the node's fault: FailedPrecondition.
func TestInjectMissingHostDevice(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "gone.yaml"), "cdiVersion: \"0.6.0\"\nkind: rtshimd.test/gone\ndevices: [{name: x, containerEdits: {deviceNodes: [{path: /dev/rtshimd-gone}]}}]\n")
	_, err := New([]string{dir}).Inject(baseSpec(), ctr([]string{"rtshimd.test/gone=x"}, nil))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `config.CDI_devices[0] "rtshimd.test/gone=x"`) || !strings.Contains(err.Error(), "/dev/rtshimd-gone") {
		t.Errorf("error = %v, want FailedPrecondition naming the device and the missing node", err)
	}
}
