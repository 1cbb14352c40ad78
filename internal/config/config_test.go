package config

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// base is a valid config; cases append to it so their mistakes land on known lines.
const base = `socket = "/run/x/x.sock"
default_handler = "runc"

[handlers.runc]
runtime_path = "/usr/sbin/runc"
`

func TestParseBaseIsValid(t *testing.T) {
	if _, err := Parse("cfg.toml", []byte(base)); err != nil {
		t.Fatalf("base config: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string // prefix of the error: "cfg.toml:LINE: ..."
		has  string // must also appear in the error
	}{
		{"syntax", base + "runtime_root = = \"/x\"\n", "cfg.toml:6: expected value", ""},
		{"syntax, unterminated string", base + "runtime_root = \"/x\nsandbox = \"shared\"\n", "cfg.toml:6: ", "newlines"},
		{"unknown top-level key", "bogus = 1\n" + base, "cfg.toml:1: unknown key \"bogus\"", ""},
		{"unknown handler key", base + "runtime_pth = \"/x\"\n", "cfg.toml:6: unknown key \"handlers.runc.runtime_pth\"", ""},
		{"unknown feature key", base + "[handlers.runc.features]\nhost_netwrk = true\n", "cfg.toml:7: unknown key \"handlers.runc.features.host_netwrk\"", ""},
		{"handler name not DNS-1123", base + "\n[handlers.Bad_Name]\nruntime_path = \"/bin/x\"\n", "cfg.toml:7: handler name \"Bad_Name\" is not a DNS-1123 label", ""},
		{"quoted handler name not DNS-1123", base + "[handlers.\"a.b\"]\nruntime_path = \"/bin/x\"\n", "cfg.toml:6: handler name \"a.b\" is not a DNS-1123 label", ""},
		{"handler name too long", base + "[handlers." + strings.Repeat("a", 64) + "]\nruntime_path = \"/bin/x\"\n", "cfg.toml:6: handler name", "at most 63"},
		{"missing runtime_path", base + "[handlers.crun]\nsandbox = \"shared\"\n", "cfg.toml:6: handler \"crun\": runtime_path is required", ""},
		{"missing runtime_path, dotted keys", base + "[handlers]\ncrun.sandbox = \"shared\"\n", "cfg.toml:7: handler \"crun\": runtime_path is required", ""},
		{"default handler missing", strings.Replace(base, `"runc"`, `"nope"`, 1), "cfg.toml:2: default_handler \"nope\" is not a configured handler", "configured: runc"},
		{"no default handler", strings.Replace(base, `default_handler = "runc"`, ``, 1), "cfg.toml: default_handler is required", ""},
		{"relative runtime_path", strings.Replace(base, `"/usr/sbin/runc"`, `"runc"`, 1), "cfg.toml:5: handler \"runc\": runtime_path must be an absolute path", ""},
		{"relative runtime_root", base + "runtime_root = \"run/runc\"\n", "cfg.toml:6: handler \"runc\": runtime_root must be an absolute path", ""},
		{"invalid sandbox mode", base + "sandbox = \"vm\"\n", "cfg.toml:6: handler \"runc\": sandbox must be", `got "vm"`},
		{"bad overhead memory", base + "[handlers.runc.overhead]\ncpu = \"1\"\nmemory = \"64MB!\"\n", "cfg.toml:8: handler \"runc\": overhead.memory:", `"64MB!"`},
		{"bad overhead cpu", base + "[handlers.runc.overhead]\ncpu = \"fast\"\n", "cfg.toml:7: handler \"runc\": overhead.cpu:", `"fast"`},
		{"bad overhead memory, dotted key", base + "overhead.memory = \"lots\"\n", "cfg.toml:6: handler \"runc\": overhead.memory:", `"lots"`},
		{"wrong type", strings.Replace(base, `"/usr/sbin/runc"`, `5`, 1), "cfg.toml:5: ", "runtime_path"},
		{"wrong type top level", "log_level = true\n" + base, "cfg.toml:1: ", "log_level"},
		{"bad cgroup_driver", base[:len(`socket = "/run/x/x.sock"`)+1] + "cgroup_driver = \"cgroupv2\"\n" + base[len(`socket = "/run/x/x.sock"`)+1:], "cfg.toml:2: cgroup_driver must be", `got "cgroupv2"`},
		{"bad log_level", "log_level = \"loud\"\n" + base, "cfg.toml:1: log_level \"loud\" is not a level", ""},
		{"relative state_root", "state_root = \"var/lib\"\n" + base, "cfg.toml:1: state_root must be an absolute path", ""},
		{"relative cdi.spec_dirs", base + "[cdi]\nspec_dirs = [\"/etc/cdi\", \"cdi\"]\n", "cfg.toml:7: cdi.spec_dirs[1] must be an absolute path", `got "cdi"`},
		{"bad network.cni_timeout", base + "[network]\ncni_timeout = \"forever\"\n", "cfg.toml:7: network.cni_timeout \"forever\" is not a positive duration", ""},
		{"zero network.cni_timeout", base + "[network]\ncni_timeout = \"0s\"\n", "cfg.toml:7: network.cni_timeout", ""},
		{"relative nri.socket_path", base + "[nri]\nsocket_path = \"nri.sock\"\n", "cfg.toml:7: nri.socket_path must be an absolute path", `got "nri.sock"`},
		{"bad nri duration", base + "[nri]\nenable = true\nplugin_request_timeout = \"soon\"\n", "cfg.toml:8: ", `"soon" is not a duration`},
		{"negative nri duration", base + "[nri]\nplugin_registration_timeout = \"-1s\"\n", "cfg.toml:7: nri.plugin_registration_timeout must be positive", ""},
		{"unknown nri key", base + "[nri]\nenabled = false\n", "cfg.toml:7: unknown key \"nri.enabled\"", ""},
		{"relative debug.pprof_socket", base + "[debug]\npprof_socket = \"pprof.sock\"\n", "cfg.toml:7: debug.pprof_socket must be an absolute path", `got "pprof.sock"`},
		{"bad pod_annotations glob", base + "pod_annotations = [\"io.katacontainers.*\", \"io.[kata\"]\n", "cfg.toml:6: handler \"runc\": pod_annotations[1] \"io.[kata\": syntax error in pattern", "path.Match"},
		{"empty pod_annotations pattern", base + "pod_annotations = [\"\"]\n", "cfg.toml:6: handler \"runc\": pod_annotations[0] \"\": is empty", ""},
		{"pod_annotations not a list", base + "pod_annotations = \"io.katacontainers.*\"\n", "cfg.toml:6: ", "pod_annotations"},
		{"privileged_without_host_devices not a bool", base + "privileged_without_host_devices = \"yes\"\n", "cfg.toml:6: ", "privileged_without_host_devices"},
		{"no handlers", "socket = \"/run/x.sock\"\ndefault_handler = \"runc\"\n", "cfg.toml: no handlers configured", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("cfg.toml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want error %q", c, tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.has) {
				t.Errorf("error = %q\nwant prefix %q containing %q", err, tt.want, tt.has)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if c.Path != "" {
		t.Errorf("Path = %q, want empty for the built-in default", c.Path)
	}
	if c.DefaultHandler != "runc" {
		t.Errorf("DefaultHandler = %q, want runc", c.DefaultHandler)
	}
	if got, want := c.HandlerNames(), []string{"crun", "kata", "runc", "runc-shim", "runsc", "runsc-debian", "runsc-shim"}; !reflect.DeepEqual(got, want) {
		t.Errorf("HandlerNames = %v, want %v", got, want)
	}
	if c.CgroupDriver != CgroupfsDriver || c.LogLevel != "info" || c.RunRoot != "/run/rtshimd" {
		t.Errorf("cgroup_driver %q log_level %q run_root %q", c.CgroupDriver, c.LogLevel, c.RunRoot)
	}
	runc := c.Handlers["runc"]
	if runc.RuntimeType != "oci" || runc.RuntimePath != "/usr/sbin/runc" {
		t.Errorf("runc = %+v", runc)
	}
	runsc := c.Handlers["runsc"]
	if runsc.RuntimeType != "oci-sandbox" {
		t.Errorf("runsc runtime_type = %q, want oci-sandbox", runsc.RuntimeType)
	}
	if runsc.RuntimePath != "/usr/local/bin/runsc" || !reflect.DeepEqual(runsc.RuntimeArgs, []string{"--oci-seccomp", "--allow-suid"}) {
		t.Errorf("runsc = %q %q, want the pinned runsc with gVisor's netstack, --oci-seccomp and --allow-suid", runsc.RuntimePath, runsc.RuntimeArgs)
	}
	if deb := c.Handlers["runsc-debian"]; deb == nil || deb.RuntimePath != "/usr/bin/runsc" || len(deb.RuntimeArgs) != 0 {
		t.Errorf("runsc-debian = %+v, want Debian's runsc with host networking left to discovery", deb)
	}
	want := Overhead{Memory: "64Mi", CPU: "100m", MemoryBytes: 64 << 20, MilliCPU: 100}
	if runsc.Overhead != want {
		t.Errorf("runsc overhead = %+v, want %+v", runsc.Overhead, want)
	}
	kata := c.Handlers["kata"]
	if kata.RuntimeType != "shim-v2" || kata.RuntimePath != "/usr/bin/containerd-shim-kata-v2" || kata.Features.HostNetwork == nil || *kata.Features.HostNetwork {
		t.Errorf("kata = %+v, want a shim-v2 row with host_network declared false", kata)
	}
	if c.Handlers["runc-shim"].RuntimeType != "shim-v2" {
		t.Errorf("runc-shim = %+v, want shim-v2", c.Handlers["runc-shim"])
	}
	if want := []string{"/etc/cdi", "/var/run/cdi"}; !reflect.DeepEqual(c.CDI.SpecDirs, want) {
		t.Errorf("cdi.spec_dirs = %q, want %q", c.CDI.SpecDirs, want)
	}
	if c.Network.CNITimeout() != 2*time.Minute {
		t.Errorf("network.cni_timeout = %q, want 2m", c.Network.Timeout)
	}
	if c.Handlers["crun"].Features.HostNetwork != nil {
		t.Errorf("crun declares host_network; want nil (discover)")
	}
	if c.Debug.PprofSocket != "" {
		t.Errorf("debug.pprof_socket = %q, want empty (off)", c.Debug.PprofSocket)
	}
}

func TestRuntimeType(t *testing.T) {
	row := func(extra string) string {
		return base + "[handlers.crun]\nruntime_path = \"/usr/bin/crun\"\n" + extra
	}
	for _, tt := range []struct{ extra, want, err string }{
		{"", "oci", ""},
		{"runtime_type = \"shim-v2\"\n", "shim-v2", ""},
		// The deprecated key of earlier releases still means what it meant.
		{"sandbox = \"shared\"\n", "oci-sandbox", ""},
		{"sandbox = \"namespaces\"\n", "oci", ""},
		{"sandbox = \"shared\"\nruntime_type = \"oci-sandbox\"\n", "oci-sandbox", ""},
		{"runtime_type = \"vm\"\n", "", `cfg.toml:8: handler "crun": runtime_type must be one of oci, oci-sandbox, shim-v2, got "vm"`},
		{"sandbox = \"shared\"\nruntime_type = \"oci\"\n", "", `runtime_type "oci" contradicts the deprecated sandbox = "shared"`},
	} {
		c, err := Parse("cfg.toml", []byte(row(tt.extra)))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: err = %v, want %q", tt.extra, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.extra, err)
			continue
		}
		if got := c.Handlers["crun"].RuntimeType; got != tt.want {
			t.Errorf("%q: runtime_type = %q, want %q", tt.extra, got, tt.want)
		}
	}
}

func TestRuntimeRootDefault(t *testing.T) {
	src := "run_root = \"/tmp/rr\"\n" + base + "[handlers.crun]\nruntime_path = \"/usr/bin/crun\"\nruntime_root = \"/x/crun\"\n"
	c, err := Parse("cfg.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Handlers["runc"].RuntimeRoot; got != "/tmp/rr/runc" {
		t.Errorf("runc runtime_root = %q, want /tmp/rr/runc", got)
	}
	if got := c.Handlers["crun"].RuntimeRoot; got != "/x/crun" {
		t.Errorf("crun runtime_root = %q, want /x/crun (explicit)", got)
	}
	if c.Path != "cfg.toml" {
		t.Errorf("Path = %q", c.Path)
	}
}

func TestParseMemory(t *testing.T) {
	good := map[string]int64{"": 0, "0": 0, "1048576": 1 << 20, "64Mi": 64 << 20, "1Gi": 1 << 30, "2Ki": 2048, "500M": 500e6, "1G": 1e9, "3k": 3000, "1Ti": 1 << 40}
	for in, want := range good {
		if got, err := ParseMemory(in); err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"64MB!", "64MB", "Mi", "-1Mi", "1.5Gi", "lots", "1iK", " 64Mi"} {
		if got, err := ParseMemory(in); err == nil {
			t.Errorf("ParseMemory(%q) = %d, want error", in, got)
		} else if !strings.Contains(err.Error(), "not a memory quantity") {
			t.Errorf("ParseMemory(%q) error = %q", in, err)
		}
	}
}

func TestParseCPU(t *testing.T) {
	good := map[string]int64{"": 0, "100m": 100, "0.5": 500, "2": 2000, "0m": 0, "1.25": 1250}
	for in, want := range good {
		if got, err := ParseCPU(in); err != nil || got != want {
			t.Errorf("ParseCPU(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"fast", "-1", "-100m", "1.5m", "m", "NaN", "1 cpu"} {
		if got, err := ParseCPU(in); err == nil {
			t.Errorf("ParseCPU(%q) = %d, want error", in, got)
		} else if !strings.Contains(err.Error(), "not a CPU quantity") {
			t.Errorf("ParseCPU(%q) error = %q", in, err)
		}
	}
}

func TestParseFixesFromReview(t *testing.T) {
	// A mistake inside an inline table is placed on the line of the table's key.
	_, err := Parse("cfg.toml", []byte("default_handler = \"runc\"\n\n[handlers]\nrunc = { runtime_path = \"runc\" }\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "cfg.toml:4: ") {
		t.Errorf("inline table mistake: %v, want cfg.toml:4:", err)
	}
	for _, bad := range []string{"8589934592Gi", "9223372036854775807Ki"} {
		if _, err := ParseMemory(bad); err == nil {
			t.Errorf("ParseMemory(%q) overflowed silently", bad)
		}
	}
	for _, bad := range []string{"inf", "Infinity", "1e300", "0.0001", "NaN"} {
		if _, err := ParseCPU(bad); err == nil {
			t.Errorf("ParseCPU(%q) accepted", bad)
		}
	}
	if v, err := ParseCPU("0.25"); err != nil || v != 250 {
		t.Errorf("ParseCPU(0.25) = %d, %v", v, err)
	}
}

func TestRestartNeededAndHash(t *testing.T) {
	row := "[handlers.runc]\nruntime_path = \"/usr/sbin/runc\"\n"
	a, err := Parse("a.toml", []byte("default_handler = \"runc\"\nlog_level = \"info\"\n"+row))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("a.toml", []byte("default_handler = \"runc\"\nlog_level = \"debug\"\nsocket = \"/run/other.sock\"\n"+row+"[handlers.crun]\nruntime_path = \"/usr/bin/crun\"\n[metrics]\naddr = \"127.0.0.1:9\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := RestartNeeded(a, b); strings.Join(got, ",") != "socket,metrics" {
		t.Errorf("RestartNeeded = %q, want socket and metrics (handlers and log_level are reloaded)", got)
	}
	if a.Hash == b.Hash || len(a.Hash) != 64 {
		t.Errorf("hashes %q %q", a.Hash, b.Hash)
	}
}

// cdi.spec_dirs: absent means the CDI defaults, an empty list turns CDI off, and a change
// takes a restart.
func TestCDISpecDirs(t *testing.T) {
	absent, err := Parse("cfg.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/etc/cdi", "/var/run/cdi"}; !reflect.DeepEqual(absent.CDI.SpecDirs, want) {
		t.Errorf("absent: %q, want %q", absent.CDI.SpecDirs, want)
	}
	off, err := Parse("cfg.toml", []byte(base+"[cdi]\nspec_dirs = []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if off.CDI.SpecDirs == nil || len(off.CDI.SpecDirs) != 0 {
		t.Errorf("spec_dirs = []: %#v, want empty (CDI off)", off.CDI.SpecDirs)
	}
	if got := RestartNeeded(absent, off); !reflect.DeepEqual(got, []string{"cdi"}) {
		t.Errorf("RestartNeeded = %q, want cdi", got)
	}
}

// [nri]: on by default with the adaptation's paths and timeouts; enable = false turns it
// off; any change takes a restart.
func TestNRI(t *testing.T) {
	absent, err := Parse("cfg.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	want := NRI{
		Enable: true, SocketPath: "/var/run/nri/nri.sock", PluginPath: "/opt/nri/plugins", PluginConfigPath: "/etc/nri/conf.d",
		RegistrationTimeout: Duration{5 * time.Second}, RequestTimeout: Duration{2 * time.Second},
	}
	if absent.NRI != want {
		t.Errorf("absent: %+v, want %+v", absent.NRI, want)
	}
	if d := Default().NRI; d != want {
		t.Errorf("configs/config.toml: %+v, want %+v", d, want)
	}
	off, err := Parse("cfg.toml", []byte(base+"[nri]\nenable = false\nplugin_request_timeout = \"500ms\"\ndisable_connections = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if off.NRI.Enable || off.NRI.RequestTimeout.Duration != 500*time.Millisecond || !off.NRI.DisableConnections {
		t.Errorf("off: %+v", off.NRI)
	}
	if got := RestartNeeded(absent, off); !reflect.DeepEqual(got, []string{"nri"}) {
		t.Errorf("RestartNeeded = %q, want nri", got)
	}
	b, err := json.Marshal(absent.NRI)
	if err != nil || !strings.Contains(string(b), `"plugin_request_timeout":"2s"`) {
		t.Errorf("JSON = %s, %v; want durations as text", b, err)
	}
}

// [stats] collection_period: 0 when absent, "0" reads at each call, below 1s is refused
// by name; a change is applied by a reload.
func TestStatsCollectionPeriod(t *testing.T) {
	absent, err := Parse("cfg.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if absent.Stats.CollectionPeriod.Duration != 0 {
		t.Errorf("absent: %v, want 0 (read at each call)", absent.Stats.CollectionPeriod)
	}
	off, err := Parse("cfg.toml", []byte(base+"[stats]\ncollection_period = \"0\"\n"))
	if err != nil || off.Stats.CollectionPeriod.Duration != 0 {
		t.Fatalf("collection_period = \"0\": %v, %v", off, err)
	}
	for _, bad := range []string{`"500ms"`, `"-1s"`, `"ten"`, `10`} {
		_, err := Parse("cfg.toml", []byte(base+"[stats]\ncollection_period = "+bad+"\n"))
		// A value that is not a duration is refused by its line, as every duration.
		if err == nil || !strings.Contains(err.Error(), "collection_period") && !strings.Contains(err.Error(), "cfg.toml:7:") {
			t.Errorf("collection_period = %s: %v, want an error naming the key or its line", bad, err)
		}
	}
	if got := RestartNeeded(absent, off); len(got) != 0 {
		t.Errorf("RestartNeeded = %q, want none (the period is reloaded)", got)
	}
	if Default().Stats.CollectionPeriod.Duration != DefaultStatsPeriod {
		t.Errorf("shipped default: %v", Default().Stats.CollectionPeriod)
	}
}

// pod_annotations: a list of path.Match globs per row, absent by default; a change of it is
// a change of the row, applied by a reload (no restart).
func TestPodAnnotations(t *testing.T) {
	c, err := Parse("cfg.toml", []byte(base+"pod_annotations = [\"io.katacontainers.*\", \"example.com/[a-c]?\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Handlers["runc"].PodAnnotations, []string{"io.katacontainers.*", "example.com/[a-c]?"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pod_annotations = %q, want %q", got, want)
	}
	absent, err := Parse("cfg.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if p := absent.Handlers["runc"].PodAnnotations; p != nil {
		t.Errorf("absent pod_annotations = %q, want none", p)
	}
	if got := RestartNeeded(absent, c); len(got) != 0 {
		t.Errorf("RestartNeeded = %q, want none (handler rows are reloaded)", got)
	}
}

// privileged_without_host_devices: false unless the row says true.
func TestPrivilegedWithoutHostDevices(t *testing.T) {
	c, err := Parse("cfg.toml", []byte(base+"privileged_without_host_devices = true\n[handlers.crun]\nruntime_path = \"/usr/bin/crun\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Handlers["runc"].PrivilegedWithoutHostDevices || c.Handlers["crun"].PrivilegedWithoutHostDevices {
		t.Errorf("runc %v crun %v, want true and false (absent)", c.Handlers["runc"].PrivilegedWithoutHostDevices, c.Handlers["crun"].PrivilegedWithoutHostDevices)
	}
}

// [image] pull_progress_timeout: 5m when absent (containerd's), "0" switches it off, a
// negative value is refused by name; a change needs a restart.
func TestImagePullProgressTimeout(t *testing.T) {
	absent, err := Parse("cfg.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if absent.Image.PullProgressTimeout.Duration != 5*time.Minute {
		t.Errorf("absent: %v, want 5m", absent.Image.PullProgressTimeout)
	}
	off, err := Parse("cfg.toml", []byte(base+"[image]\npull_progress_timeout = \"0\"\n"))
	if err != nil || off.Image.PullProgressTimeout.Duration != 0 {
		t.Fatalf("pull_progress_timeout = \"0\": %v, %v", off, err)
	}
	for _, bad := range []string{`"-1s"`, `"ten"`} {
		_, err := Parse("cfg.toml", []byte(base+"[image]\npull_progress_timeout = "+bad+"\n"))
		if err == nil || !strings.Contains(err.Error(), "pull_progress_timeout") && !strings.Contains(err.Error(), "cfg.toml:7:") {
			t.Errorf("pull_progress_timeout = %s: %v, want an error naming the key or its line", bad, err)
		}
	}
	if got := RestartNeeded(absent, off); !reflect.DeepEqual(got, []string{"image.pull_progress_timeout"}) {
		t.Errorf("RestartNeeded = %q, want image.pull_progress_timeout", got)
	}
	if Default().Image.PullProgressTimeout.Duration != DefaultPullProgressTimeout {
		t.Errorf("shipped default: %v", Default().Image.PullProgressTimeout)
	}
}

// default_ulimits: "name=soft:hard" or "name=value"; a mistake names the entry.
func TestDefaultUlimits(t *testing.T) {
	c, err := Parse("cfg.toml", []byte(base+"default_ulimits = [\"nofile=1024:4096\", \"nproc=500\", \"memlock=-1\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []Ulimit
	for _, u := range c.Handlers["runc"].DefaultUlimits {
		l, err := ParseUlimit(u)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l)
	}
	want := []Ulimit{{"RLIMIT_NOFILE", 1024, 4096}, {"RLIMIT_NPROC", 500, 500}, {"RLIMIT_MEMLOCK", 1<<64 - 1, 1<<64 - 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsed %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ entry, has string }{
		{"nofiles=10", "with a name of"},
		{"nofile", "with a name of"},
		{"nofile=a:10", `soft limit "a"`},
		{"nofile=10:b", `hard limit "b"`},
		{"nofile=20:10", "above the hard limit"},
	} {
		_, err := Parse("cfg.toml", []byte(base+"default_ulimits = [\""+tc.entry+"\"]\n"))
		if err == nil || !strings.HasPrefix(err.Error(), "cfg.toml:6: handler \"runc\": default_ulimits[0] \""+tc.entry+"\"") || !strings.Contains(err.Error(), tc.has) {
			t.Errorf("%s: %v, want cfg.toml:6 naming the entry and %q", tc.entry, err, tc.has)
		}
	}
	if _, err := Parse("cfg.toml", []byte(base+"default_ulimits = [\"nofile=1\", \"nofile=2\"]\n")); err == nil || !strings.Contains(err.Error(), "RLIMIT_NOFILE is set twice") {
		t.Errorf("a limit set twice: %v", err)
	}
}

// shim_options: for shim-v2 rows, keys of the options type the row's shim reads.
func TestShimOptions(t *testing.T) {
	shimRow := "\n[handlers.kata]\nruntime_type = \"shim-v2\"\nruntime_path = \"/usr/bin/containerd-shim-kata-v2\"\n[handlers.kata.shim_options]\n"
	c, err := Parse("cfg.toml", []byte(base+shimRow+"ConfigPath = \"/etc/kata/configuration-qemu.toml\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Handlers["kata"].ShimOptions["ConfigPath"]; got != "/etc/kata/configuration-qemu.toml" {
		t.Errorf("ConfigPath = %v", got)
	}
	for _, tc := range []struct{ name, src, want string }{
		{"not a shim-v2 row", base + "[handlers.runc.shim_options]\nBinaryName = \"/x\"\n", `cfg.toml:6: handler "runc": shim_options are for runtime_type "shim-v2" rows`},
		{"unknown option", base + shimRow + "BinaryName = \"/x\"\n", `cfg.toml:10: handler "kata": shim_options: BinaryName is not an option of runtimeoptions.v1.Options`},
	} {
		if _, err := Parse("cfg.toml", []byte(tc.src)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// seccomp_profile: an absolute path to a profile that parses.
func TestSeccompProfile(t *testing.T) {
	dir := t.TempDir()
	good, bad := dir+"/good.json", dir+"/bad.json"
	if err := os.WriteFile(good, []byte(`{"defaultAction": "SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"defaultAction": 7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := Parse("cfg.toml", []byte(base+"seccomp_profile = \""+good+"\"\n")); err != nil || c.Handlers["runc"].SeccompProfile != good {
		t.Fatalf("a good profile: %v", err)
	}
	for _, tc := range []struct{ path, has string }{
		{"seccomp.json", "not an absolute path"},
		{dir + "/missing.json", "no such file"},
		{bad, "not a seccomp profile"},
	} {
		_, err := Parse("cfg.toml", []byte(base+"seccomp_profile = \""+tc.path+"\"\n"))
		if err == nil || !strings.HasPrefix(err.Error(), "cfg.toml:6: handler \"runc\": seccomp_profile \""+tc.path+"\"") || !strings.Contains(err.Error(), tc.has) {
			t.Errorf("%s: %v, want cfg.toml:6 naming it and %q", tc.path, err, tc.has)
		}
	}
}

// image_store: "shared" (or absent) or "separate"; anything else names the row and the
// value. A reload that changes a row's choice needs a restart; adding a row does not.
func TestImageStore(t *testing.T) {
	for _, v := range []string{"shared", "separate"} {
		if c, err := Parse("cfg.toml", []byte(base+"image_store = \""+v+"\"\n")); err != nil || c.Handlers["runc"].ImageStore != v {
			t.Errorf("image_store = %q: %v", v, err)
		}
	}
	_, err := Parse("cfg.toml", []byte(base+"image_store = \"own\"\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "cfg.toml:6: handler \"runc\": image_store must be \"shared\" or \"separate\", got \"own\"") {
		t.Errorf("image_store = \"own\": %v", err)
	}
	a, err := Parse("cfg.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("cfg.toml", []byte(base+"image_store = \"separate\"\n[handlers.kata]\nruntime_path = \"/usr/bin/kata\"\nimage_store = \"separate\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := RestartNeeded(a, b); strings.Join(got, ",") != "handlers.runc.image_store" {
		t.Errorf("RestartNeeded = %q, want handlers.runc.image_store alone (a new row's store opens at its first use)", got)
	}
}
