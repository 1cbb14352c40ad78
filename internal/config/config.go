// Package config owns rtshimd's configuration file: its structure, defaults, parsing and
// validation. Every mistake is reported as "file:line: message". It knows nothing of
// runtimes beyond their table entries.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/configs"
	"github.com/rtshimd/rtshimd/internal/shimopts"
)

// Sandbox modes of a handler: the key `sandbox` of earlier releases, read as an alias of
// runtime_type ("namespaces" is "oci", "shared" is "oci-sandbox").
const (
	SandboxNamespaces = "namespaces"
	SandboxShared     = "shared"
)

// Cgroup drivers.
const (
	CgroupfsDriver = "cgroupfs"
	SystemdDriver  = "systemd"
)

// Config is the daemon configuration.
type Config struct {
	Socket       string `toml:"socket"`
	StateRoot    string `toml:"state_root"`
	RunRoot      string `toml:"run_root"`
	CgroupDriver string `toml:"cgroup_driver"`
	LogLevel     string `toml:"log_level"`
	MonitorPath  string `toml:"monitor_path"`
	PausePath    string `toml:"pause_path"`
	// StrictSELinux refuses SELinux labels and relabeling asked for on a node without SELinux; by default
	// they are not applied, with a warning, as containerd and CRI-O do.
	StrictSELinux  bool                `toml:"strict_selinux"`
	DefaultHandler string              `toml:"default_handler"`
	Handlers       map[string]*Handler `toml:"handlers"`
	Image          Image               `toml:"image"`
	Network        Network             `toml:"network"`
	Streaming      Streaming           `toml:"streaming"`
	Metrics        Metrics             `toml:"metrics"`
	Tracing        Tracing             `toml:"tracing"`
	Node           Node                `toml:"node"`
	CDI            CDI                 `toml:"cdi"`
	NRI            NRI                 `toml:"nri"`
	Debug          Debug               `toml:"debug"`
	Stats          Stats               `toml:"stats"`
	Mechanisms     Mechanisms          `toml:"mechanisms"`
	Checkpoints    Checkpoints         `toml:"checkpoints"`

	// Path is the file the config was read from ("" for the built-in default).
	Path string `toml:"-"`
	// DropIns are the files of config.d beside Path merged over it, in that order.
	DropIns []string `toml:"-"`
	// Hash is the SHA-256 of the file's bytes (hex), so an operator can tell which
	// version of the file the daemon serves; with drop-ins, of every file's name and bytes.
	Hash string `toml:"-"`
}

// Handler is one entry of the handler table, as the file has it.
type Handler struct {
	// RuntimeType is the kind of runtime (internal/kind): "oci", "oci-sandbox" or "shim-v2".
	RuntimeType string   `toml:"runtime_type" json:"runtime_type"`
	RuntimePath string   `toml:"runtime_path" json:"runtime_path"`
	RuntimeRoot string   `toml:"runtime_root" json:"runtime_root"`
	RuntimeArgs []string `toml:"runtime_args" json:"runtime_args,omitempty"`
	// Sandbox is the deprecated spelling of RuntimeType; it only fills RuntimeType.
	Sandbox  string   `toml:"sandbox" json:"-"`
	Overhead Overhead `toml:"overhead" json:"overhead"`
	Features Declared `toml:"features" json:"declared_features"`
	// CNIConfDir and CNINetwork give the handler's pods another CNI network than the
	// default (a conf dir of its own, and/or a network by name).
	CNIConfDir string `toml:"cni_conf_dir" json:"cni_conf_dir,omitempty"`
	CNINetwork string `toml:"cni_network" json:"cni_network,omitempty"`
	// PodAnnotations are glob patterns (path.Match, as containerd's pod_annotations): a
	// pod annotation whose key matches one reaches the specs of the pod's sandbox container
	// and containers, where VM runtimes read their per-pod settings (Kata's
	// io.katacontainers.*). Others never reach a spec.
	PodAnnotations []string `toml:"pod_annotations" json:"pod_annotations,omitempty"`
	// PrivilegedWithoutHostDevices gives privileged containers none of the host's devices
	// and not the device cgroup's allow-all, as containerd's key: a VM runtime would
	// otherwise be asked to pass the whole host /dev into its guest.
	PrivilegedWithoutHostDevices bool `toml:"privileged_without_host_devices" json:"privileged_without_host_devices,omitempty"`
	// DeviceOwnershipFromSecurityContext gives the devices a container's config names the
	// container's run_as_user and run_as_group as owner (0 where unset) instead of the host
	// node's owner, as containerd's and CRI-O's key: a non-root container can then open a
	// device (a GPU) whose host node is root's.
	DeviceOwnershipFromSecurityContext bool `toml:"device_ownership_from_security_context" json:"device_ownership_from_security_context,omitempty"`
	// DefaultUlimits are the resource limits of every container's process on the row, as
	// CRI-O's default_ulimits: "name=soft:hard" or "name=value" (both), name one of
	// Ulimits' (nofile, nproc, memlock, ...). The CRI has no field for them; without, a
	// container gets the runtime's own.
	DefaultUlimits []string `toml:"default_ulimits" json:"default_ulimits,omitempty"`
	// ShimOptions (shim-v2 rows) go to the shim in every task's create, as containerd's
	// runtime options: to containerd's runc shim as runc's options (BinaryName, Root,
	// SystemdCgroup, ...), to any other as TypeUrl, ConfigPath and ConfigBody, which
	// gVisor's shim (its runsc.toml) and Kata's (its configuration file) read. Keys are the
	// Go field names, as in containerd's config (internal/shimopts).
	ShimOptions map[string]any `toml:"shim_options" json:"shim_options,omitempty"`
	// SeccompProfile is a Docker-format JSON profile that RuntimeDefault means on the row,
	// in place of Docker's default (CRI-O's seccomp_profile); read at each create.
	SeccompProfile string `toml:"seccomp_profile" json:"seccomp_profile,omitempty"`
	// ImageStore is where the row's images live: "shared" (the default: one store for
	// every row) or "separate", a store of the row's own that the CRI's image calls reach
	// through ImageSpec.runtime_handler (KEP-4216; kubelet sends it with its
	// RuntimeClassInImageCriApi gate). Changed by a reload, it applies at restart.
	ImageStore string `toml:"image_store" json:"image_store,omitempty"`
	// Checkpoint and Restore turn CheckpointContainer and restores from a checkpoint
	// (CreateContainer naming a checkpoint archive or image) on or off for the row's pods;
	// unset, [checkpoints] says. Read from the table served at each call, so a reload
	// that turns one off holds for the next call.
	Checkpoint *bool `toml:"checkpoint" json:"checkpoint,omitempty"`
	Restore    *bool `toml:"restore" json:"restore,omitempty"`
	// CheckpointOn and RestoreOn are what holds for the row, and CheckpointKey and
	// RestoreKey the key that said so (for errors): set by validation.
	CheckpointOn  bool   `toml:"-" json:"checkpoint_on"`
	RestoreOn     bool   `toml:"-" json:"restore_on"`
	CheckpointKey string `toml:"-" json:"-"`
	RestoreKey    string `toml:"-" json:"-"`
}

// Checkpoints: checkpoint and restore of containers, node-wide; a row's checkpoint and
// restore keys win.
type Checkpoints struct {
	// Checkpoint: CheckpointContainer (kubelet's checkpoint API) writes archives.
	Checkpoint bool `toml:"checkpoint" json:"checkpoint"`
	// Restore: CreateContainer restores a container from a checkpoint archive or image.
	// Off by default: a checkpoint holds process state (credentials, capabilities,
	// seccomp) that CRIU gives back as it finds it, so only checkpoints whose origin the
	// operator trusts should be restorable; rtshimd checks them too (docs/cri-support.md).
	Restore bool `toml:"restore" json:"restore"`
	// MaxSize bounds a checkpoint's content, as files would be on disk with no hole: what
	// a checkpoint writes and what a restore unpacks or copies ("16Gi").
	MaxSize      string `toml:"max_size" json:"max_size"`
	MaxSizeBytes int64  `toml:"-" json:"max_size_bytes"`
	// RequireSignature: only checkpoints signed by this node's key
	// (<state_root>/checkpoint-key, made at first start; its public half beside it, .pub)
	// or by one of TrustedKeys are restored. A CRIU image decides the restored processes'
	// namespaces, mounts and cgroups as root: an unsigned checkpoint is a way onto the node.
	RequireSignature bool `toml:"require_signature" json:"require_signature"`
	// TrustedKeys are files holding other nodes' public keys (their checkpoint-key.pub),
	// whose checkpoints this node restores: read at start.
	TrustedKeys []string `toml:"trusted_keys" json:"trusted_keys,omitempty"`
}

// DefaultCheckpointMaxSize is checkpoints.max_size when the file does not say.
const DefaultCheckpointMaxSize = "16Gi"

// The values of a handler's image_store.
const (
	ImageStoreShared   = "shared"
	ImageStoreSeparate = "separate"
)

// separate reports whether the row keeps its own images.
func (h *Handler) separate() bool { return h.ImageStore == ImageStoreSeparate }

// Ulimits are the names default_ulimits accepts, with their RLIMIT_ types.
var Ulimits = map[string]string{
	"as": "RLIMIT_AS", "core": "RLIMIT_CORE", "cpu": "RLIMIT_CPU", "data": "RLIMIT_DATA",
	"fsize": "RLIMIT_FSIZE", "locks": "RLIMIT_LOCKS", "memlock": "RLIMIT_MEMLOCK",
	"msgqueue": "RLIMIT_MSGQUEUE", "nice": "RLIMIT_NICE", "nofile": "RLIMIT_NOFILE",
	"nproc": "RLIMIT_NPROC", "rss": "RLIMIT_RSS", "rtprio": "RLIMIT_RTPRIO",
	"rttime": "RLIMIT_RTTIME", "sigpending": "RLIMIT_SIGPENDING", "stack": "RLIMIT_STACK",
}

// Ulimit is one parsed default_ulimits entry.
type Ulimit struct {
	Type       string // RLIMIT_NOFILE
	Soft, Hard uint64
}

// ParseUlimit reads "name=soft:hard" or "name=value"; -1 (or "unlimited") is no limit.
func ParseUlimit(s string) (Ulimit, error) {
	name, val, ok := strings.Cut(s, "=")
	typ := Ulimits[strings.TrimSpace(name)]
	if !ok || typ == "" {
		names := make([]string, 0, len(Ulimits))
		for n := range Ulimits {
			names = append(names, n)
		}
		sort.Strings(names)
		return Ulimit{}, fmt.Errorf("want name=soft:hard with a name of %s", strings.Join(names, ", "))
	}
	num := func(v string) (uint64, error) {
		switch v = strings.TrimSpace(v); v {
		case "-1", "unlimited", "infinity":
			return math.MaxUint64, nil
		}
		return strconv.ParseUint(v, 10, 64)
	}
	softS, hardS, two := strings.Cut(val, ":")
	if !two {
		hardS = softS
	}
	soft, err := num(softS)
	if err != nil {
		return Ulimit{}, fmt.Errorf("soft limit %q is not a number", softS)
	}
	hard, err := num(hardS)
	if err != nil {
		return Ulimit{}, fmt.Errorf("hard limit %q is not a number", hardS)
	}
	if soft > hard {
		return Ulimit{}, fmt.Errorf("soft limit %s is above the hard limit %s", softS, hardS)
	}
	return Ulimit{Type: typ, Soft: soft, Hard: hard}, nil
}

// CDI configures Container Device Interface devices (config.CDI_devices and cdi.k8s.io/
// annotations of a container).
type CDI struct {
	// SpecDirs hold the vendors' CDI spec files, lowest priority first; a directory that
	// does not exist is skipped. An empty list (not an absent key) turns CDI off.
	SpecDirs []string `toml:"spec_dirs"`
}

// NRI configures the Node Resource Interface (github.com/containerd/nri): plugins that see
// every pod and container event and may adjust containers as they are created.
type NRI struct {
	// Enable is on by default, as in containerd 2.x; absent from the file means true.
	Enable bool `toml:"enable" json:"enable"`
	// SocketPath is where external plugins connect.
	SocketPath string `toml:"socket_path" json:"socket_path"`
	// PluginPath holds plugins the daemon starts itself; PluginConfigPath their configs.
	PluginPath       string `toml:"plugin_path" json:"plugin_path"`
	PluginConfigPath string `toml:"plugin_config_path" json:"plugin_config_path"`
	// Timeouts for a plugin to register and to answer one request ("5s", "2s").
	RegistrationTimeout Duration `toml:"plugin_registration_timeout" json:"plugin_registration_timeout"`
	RequestTimeout      Duration `toml:"plugin_request_timeout" json:"plugin_request_timeout"`
	// DisableConnections accepts no external plugin: only those in PluginPath run.
	DisableConnections bool `toml:"disable_connections" json:"disable_connections"`
}

// Duration is a time.Duration written as Go writes one ("2s", "500ms") in TOML and JSON.
type Duration struct{ time.Duration }

// UnmarshalText reads "2s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration (examples: 2s, 500ms)", b)
	}
	d.Duration = v
	return nil
}

// MarshalText writes "2s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Mechanisms turns off, one by one, what rtshimd does that no other runtime does, for a
// plain path an operator can reason about with the peers' tools (docs/mechanisms.md). Each
// is on by default; absent from the file means on.
type Mechanisms struct {
	// ExecFifoStart: the monitor starts a runc container by reading runc's exec FIFO
	// instead of running `runc start`. Off: every start runs the runtime's start.
	ExecFifoStart bool `toml:"exec_fifo_start" json:"exec_fifo_start"`
	// PinHome: pods' namespaces (and a runc pod's tmpfs) live in a mount namespace of the
	// daemon's own. Off: new pods pin them as files on the node, as CRI-O's pinns does;
	// pods already in the home stay there.
	PinHome bool `toml:"pin_home" json:"pin_home"`
	// KeptListEncoding: List and stats answers carry their items as kept encodings
	// (protobuf unknown fields, the same bytes on the wire). Off: plain messages.
	KeptListEncoding bool `toml:"kept_list_encoding" json:"kept_list_encoding"`
}

// Stats is how container and pod usage (the CRI's stats) is read.
type Stats struct {
	// CollectionPeriod is how often a background collector reads every running
	// container's and ready pod's usage; the stats calls answer from its latest reading.
	// 0 reads at each call.
	CollectionPeriod Duration `toml:"collection_period"`
}

// DefaultStatsPeriod is stats.collection_period when the file does not say: 0, read at
// each call, as CRI-O's stats_collection_period and containerd. With a collector, crictl
// stats without an id fails unless given --seconds of at least the period (it refuses two
// answers with the same CPU timestamp), so it is the operator's choice for large nodes.
const DefaultStatsPeriod = 0

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Addr is host:port for /metrics; empty (the default) serves no metrics.
	Addr string `toml:"addr"`
}

// Tracing configures OpenTelemetry spans of the CRI calls, sent over OTLP/gRPC, as
// CRI-O's [crio.tracing] and containerd's otlp processor do. Off by default.
type Tracing struct {
	Enabled bool `toml:"enabled"`
	// Endpoint is the collector's host:port (OTLP over gRPC, plaintext: a node's collector
	// listens on loopback or a node-local socket); default 127.0.0.1:4317.
	Endpoint string `toml:"endpoint"`
	// SamplingRatePerMillion samples calls that carry no sampling decision; a call whose
	// caller (kubelet) sampled it, or chose not to, follows the caller. 0, the default,
	// records only what kubelet samples (kubelet's samplingRatePerMillion).
	SamplingRatePerMillion int `toml:"sampling_rate_per_million"`
}

// Node says how the daemon reaches its Node object to keep its labels in step with the
// handler table: `runtime.rtshimd.io/<handler>=true` for each ready handler, plus one
// label per feature it gives. Off (nothing written) while Kubeconfig is empty.
type Node struct {
	// Kubeconfig is a kubeconfig with the node's credentials: kubelet's
	// (/etc/kubernetes/kubelet.conf) may label its own node under NodeRestriction.
	Kubeconfig string `toml:"kubeconfig"`
	// Name is the Node's name; empty uses the hostname, lowercased, as kubelet does.
	Name string `toml:"name"`
}

// DefaultTracingEndpoint is tracing.endpoint when the file does not say: the OTLP/gRPC port.
const DefaultTracingEndpoint = "127.0.0.1:4317"

// Debug configures what is only for finding out where the daemon's time and memory go.
type Debug struct {
	// PprofSocket is a unix socket path (mode 0600) serving net/http/pprof's /debug/pprof/;
	// empty (the default) serves none. A unix socket, not an address: profiles show
	// every pod's IDs and the handlers' arguments, and only root should read them.
	PprofSocket string `toml:"pprof_socket"`
}

// Streaming configures the server behind Exec, Attach and PortForward URLs.
type Streaming struct {
	// Addr is host:port; port 0 picks a free one. Keep it on loopback unless a TLS
	// front or the node's firewall protects it: whoever reaches it can exec into pods.
	Addr string `toml:"addr"`
	// TLSCertFile and TLSKeyFile serve the streaming server over TLS (both or neither).
	TLSCertFile string `toml:"tls_cert_file"`
	TLSKeyFile  string `toml:"tls_key_file"`
}

// Network configures pod networking through CNI.
type Network struct {
	// ConfDir holds the CNI network configs; the first valid one (in name order) is the
	// default network.
	ConfDir string `toml:"cni_conf_dir"`
	// BinDirs are searched for plugin binaries.
	BinDirs []string `toml:"cni_bin_dirs"`
	// CacheDir keeps results so that DEL works after a restart (default <state_root>/cni).
	CacheDir string `toml:"cni_cache_dir"`
	// Timeout bounds each CNI operation (ADD, DEL, loading a config), a Go duration
	// ("2m", "30s"): a hung plugin fails RunPodSandbox with DeadlineExceeded and the pod
	// is undone. Default 2m (kubelet's runtime-request-timeout).
	Timeout string `toml:"cni_timeout"`
}

// CNITimeout is network.cni_timeout (validated by Load).
func (n Network) CNITimeout() time.Duration {
	d, _ := time.ParseDuration(n.Timeout)
	return d
}

// Image configures the image service: where images come from and how they are kept.
type Image struct {
	// RegistriesConf is a registries.conf (containers-registries.conf(5)): mirrors, insecure
	// and blocked registries, location rewrites. Empty uses /etc/containers/registries.conf
	// when it exists.
	RegistriesConf string `toml:"registries_conf"`
	// Registries are [[registry]] entries given here instead of (or on top of) that file.
	Registries []Registry `toml:"registries"`
	// Pinned images are reported pinned, so kubelet's image GC never removes them.
	Pinned []string `toml:"pinned"`
	// StorageDriver is the containers/storage graph driver ("overlay" or "vfs").
	StorageDriver string `toml:"storage_driver"`
	// MaxParallelDownloads bounds the layers one pull fetches at once (default 3).
	MaxParallelDownloads int `toml:"max_parallel_downloads"`
	// PullProgressTimeout ends a pull that has waited this long for the registry without
	// a byte arriving (default DefaultPullProgressTimeout); 0 lets a pull wait up to its
	// 30-minute bound.
	PullProgressTimeout Duration `toml:"pull_progress_timeout"`
	// SignaturePolicy is a containers-policy.json(5) every pull is checked against (GPG
	// and sigstore signatures, per registry and repository). Empty uses
	// /etc/containers/policy.json when it exists (as CRI-O and podman), else accepts
	// any image. The file is read at each pull: an edit applies to the next one.
	SignaturePolicy string `toml:"signature_policy"`
	// SignaturePolicyDir holds per-namespace policies, <namespace>.json, used instead of
	// SignaturePolicy for a pull whose sandbox config names that namespace (CRI-O's
	// signature_policy_dir). Empty: none.
	SignaturePolicyDir string `toml:"signature_policy_dir"`
	// RegistriesD is the containers-registries.d(5) directory that says where signatures
	// are (a lookaside store, or sigstore attachments in the registry). Empty uses
	// /etc/containers/registries.d.
	RegistriesD string `toml:"registries_d"`
}

// DefaultPullProgressTimeout is image.pull_progress_timeout when the file does not say:
// containerd's image_pull_progress_timeout.
const DefaultPullProgressTimeout = 5 * time.Minute

// Registry is one [[registry]] entry, as in registries.conf.
type Registry struct {
	Prefix   string   `toml:"prefix" json:"prefix"`
	Location string   `toml:"location" json:"location"`
	Insecure bool     `toml:"insecure" json:"insecure,omitempty"`
	Blocked  bool     `toml:"blocked" json:"blocked,omitempty"`
	Mirrors  []Mirror `toml:"mirrors" json:"mirrors,omitempty"`
}

// Mirror is a mirror of a Registry, tried before it.
type Mirror struct {
	Location string `toml:"location" json:"location"`
	Insecure bool   `toml:"insecure" json:"insecure,omitempty"`
}

// Overhead is what a handler's sandbox costs beyond its containers.
type Overhead struct {
	Memory string `toml:"memory" json:"memory,omitempty"`
	CPU    string `toml:"cpu" json:"cpu,omitempty"`

	MemoryBytes int64 `toml:"-" json:"memory_bytes"`
	MilliCPU    int64 `toml:"-" json:"milli_cpu"`
}

// Declared holds features a person states for a handler; nil means "discover".
type Declared struct {
	HostNetwork             *bool `toml:"host_network" json:"host_network,omitempty"`
	HostPID                 *bool `toml:"host_pid" json:"host_pid,omitempty"`
	HostIPC                 *bool `toml:"host_ipc" json:"host_ipc,omitempty"`
	UserNamespaces          *bool `toml:"user_namespaces" json:"user_namespaces,omitempty"`
	RecursiveReadOnlyMounts *bool `toml:"recursive_read_only_mounts" json:"recursive_read_only_mounts,omitempty"`
}

// Default returns the shipped default configuration (configs/config.toml).
func Default() *Config {
	c, err := Parse("configs/config.toml", configs.DefaultConfig)
	if err != nil {
		panic(fmt.Sprintf("shipped default config is invalid: %v", err))
	}
	c.Path = ""
	return c
}

// DropInDir is where the drop-ins of the config file at path live: config.d beside it.
func DropInDir(path string) string { return filepath.Join(filepath.Dir(path), "config.d") }

// Load reads and validates the config file at path with its drop-ins: the *.toml files of
// DropInDir(path), in name order, each merged over what came before. Tables merge key by
// key (a drop-in may add a [handlers.NAME] row or change one key of an existing one);
// a value, an array or an array of tables ([[image.registries]]) replaces the earlier one.
// So do containerd's and CRI-O's drop-ins. Drop-ins, and config.d, that another user could
// write are refused (readDropIns). Errors name the file and line.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	dropIns, err := readDropIns(DropInDir(path))
	if err != nil {
		return nil, err
	}
	return parse(append([]source{{path, data}}, dropIns...))
}

// lineErr matches the decoder's type errors, which carry the line only in their text.
var lineErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// Parse decodes and validates config text; name is used in error messages.
func Parse(name string, data []byte) (*Config, error) {
	return parse([]source{{name, data}})
}

// source is one file of a config: the main one or a drop-in.
type source struct {
	name string
	data []byte
}

// newConfig is a Config before decoding: booleans whose default is true are set first, as
// the decoder leaves keys the file lacks as they are, and so are defaults that may be set
// to zero (stats.collection_period = "0", image.pull_progress_timeout = "0").
func newConfig() *Config {
	return &Config{NRI: NRI{Enable: true}, Stats: Stats{CollectionPeriod: Duration{DefaultStatsPeriod}},
		Mechanisms:  Mechanisms{ExecFifoStart: true, PinHome: true, KeptListEncoding: true},
		Image:       Image{PullProgressTimeout: Duration{DefaultPullProgressTimeout}},
		Tracing:     Tracing{Endpoint: DefaultTracingEndpoint},
		Checkpoints: Checkpoints{Checkpoint: true, MaxSize: DefaultCheckpointMaxSize, RequireSignature: true}}
}

// decode decodes one file's text into c, refusing a key the daemon does not know; errors
// name the file and line.
func decode(name string, data []byte, c *Config) error {
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(c)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s:%d: %s", name, pe.Position.Line, pe.Message)
		}
		if m := lineErr.FindStringSubmatch(err.Error()); m != nil {
			return fmt.Errorf("%s:%s: %s: %s", name, m[1], m[2], m[3])
		}
		return fmt.Errorf("%s: %v", name, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0].String()
		return positions{name: name, src: data}.errf(k, "unknown key %q", k)
	}
	return nil
}

// parse decodes the main file and its drop-ins, merged, and validates the result.
func parse(files []source) (*Config, error) {
	c := newConfig()
	if err := decode(files[0].name, files[0].data, c); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(files[0].data)
	if len(files) > 1 {
		// Each drop-in is checked on its own (its keys, its types, with its lines), then
		// all are merged as tables and the merge decoded.
		merged := map[string]any{}
		h := sha256.New()
		for _, f := range files {
			if err := decode(f.name, f.data, newConfig()); err != nil {
				return nil, err
			}
			var m map[string]any
			if _, err := toml.Decode(string(f.data), &m); err != nil {
				return nil, fmt.Errorf("%s: %v", f.name, err)
			}
			mergeTables(merged, m)
			fmt.Fprintf(h, "%s\x00%d\x00", f.name, len(f.data))
			h.Write(f.data)
		}
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(merged); err != nil {
			return nil, fmt.Errorf("%s: merging its drop-ins: %v", files[0].name, err)
		}
		c = newConfig()
		if err := decode(files[0].name+" with its drop-ins", buf.Bytes(), c); err != nil {
			return nil, err
		}
		copy(sum[:], h.Sum(nil))
		for _, f := range files[1:] {
			c.DropIns = append(c.DropIns, f.name)
		}
	}
	c.Path = files[0].name
	c.Hash = hex.EncodeToString(sum[:])
	c.applyDefaults()
	ps := make(sources, len(files))
	for i, f := range files {
		ps[i] = positions{name: f.name, src: f.data}
	}
	if err := c.validate(ps); err != nil {
		return nil, err
	}
	return c, nil
}

// mergeTables merges table src into dst: a table into a table key by key, anything else
// replacing what was there.
func mergeTables(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				mergeTables(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}

func (c *Config) applyDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Socket, "/run/rtshimd/rtshimd.sock")
	def(&c.StateRoot, "/var/lib/rtshimd")
	def(&c.RunRoot, "/run/rtshimd")
	def(&c.CgroupDriver, CgroupfsDriver)
	def(&c.LogLevel, "info")
	def(&c.Image.StorageDriver, "overlay")
	def(&c.Network.ConfDir, "/etc/cni/net.d")
	def(&c.Network.Timeout, "2m")
	def(&c.Streaming.Addr, "127.0.0.1:0")
	def(&c.Network.CacheDir, filepath.Join(c.StateRoot, "cni"))
	if len(c.Network.BinDirs) == 0 {
		c.Network.BinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}
	}
	if c.CDI.SpecDirs == nil {
		c.CDI.SpecDirs = []string{"/etc/cdi", "/var/run/cdi"} // the CDI specification's
	}
	// The NRI adaptation's own defaults (containerd's too).
	def(&c.NRI.SocketPath, "/var/run/nri/nri.sock")
	def(&c.NRI.PluginPath, "/opt/nri/plugins")
	def(&c.NRI.PluginConfigPath, "/etc/nri/conf.d")
	if c.NRI.RegistrationTimeout.Duration == 0 {
		c.NRI.RegistrationTimeout.Duration = 5 * time.Second
	}
	if c.NRI.RequestTimeout.Duration == 0 {
		c.NRI.RequestTimeout.Duration = 2 * time.Second
	}
	if c.Image.MaxParallelDownloads == 0 {
		c.Image.MaxParallelDownloads = 3 // containerd's default
	}
	for name, h := range c.Handlers {
		if h == nil {
			continue
		}
		def(&h.RuntimeRoot, filepath.Join(c.RunRoot, name))
	}
}

// HandlerNames lists the configured handlers, sorted.
func (c *Config) HandlerNames() []string {
	names := make([]string, 0, len(c.Handlers))
	for n := range c.Handlers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func (c *Config) validate(p sources) error {
	for _, f := range []struct{ key, val string }{
		{"socket", c.Socket}, {"state_root", c.StateRoot}, {"run_root", c.RunRoot},
		{"monitor_path", c.MonitorPath}, {"pause_path", c.PausePath},
	} {
		if f.val != "" && !filepath.IsAbs(f.val) {
			return p.errf(f.key, "%s must be an absolute path, got %q", f.key, f.val)
		}
	}
	if c.CgroupDriver != CgroupfsDriver && c.CgroupDriver != SystemdDriver {
		return p.errf("cgroup_driver", "cgroup_driver must be %q or %q, got %q", CgroupfsDriver, SystemdDriver, c.CgroupDriver)
	}
	if _, err := logrus.ParseLevel(c.LogLevel); err != nil {
		return p.errf("log_level", "log_level %q is not a level (panic, fatal, error, warn, info, debug, trace)", c.LogLevel)
	}
	for _, f := range []struct{ key, val string }{{"network.cni_conf_dir", c.Network.ConfDir}, {"network.cni_cache_dir", c.Network.CacheDir}} {
		if !filepath.IsAbs(f.val) {
			return p.errf(f.key, "%s must be an absolute path, got %q", f.key, f.val)
		}
	}
	if _, _, err := net.SplitHostPort(c.Streaming.Addr); err != nil {
		return p.errf("streaming.addr", "streaming.addr %q is not host:port", c.Streaming.Addr)
	}
	if t := c.Tracing; t.Enabled {
		if _, _, err := net.SplitHostPort(t.Endpoint); err != nil {
			return p.errf("tracing.endpoint", "tracing.endpoint %q is not host:port", t.Endpoint)
		}
	}
	if r := c.Tracing.SamplingRatePerMillion; r < 0 || r > 1000000 {
		return p.errf("tracing.sampling_rate_per_million", "tracing.sampling_rate_per_million must be between 0 and 1000000, got %d", r)
	}
	if k := c.Node.Kubeconfig; k != "" && !filepath.IsAbs(k) {
		return p.errf("node.kubeconfig", "node.kubeconfig must be an absolute path, got %q", k)
	}
	if c.Metrics.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Metrics.Addr); err != nil {
			return p.errf("metrics.addr", "metrics.addr %q is not host:port", c.Metrics.Addr)
		}
	}
	if sock := c.Debug.PprofSocket; sock != "" {
		if !filepath.IsAbs(sock) {
			return p.errf("debug.pprof_socket", "debug.pprof_socket must be an absolute path, got %q", sock)
		}
		if len(sock) > 107 {
			return p.errf("debug.pprof_socket", "debug.pprof_socket %q is longer than a unix socket path can be (107 bytes)", sock)
		}
	}
	if (c.Streaming.TLSCertFile == "") != (c.Streaming.TLSKeyFile == "") {
		return p.errf("streaming", "streaming.tls_cert_file and streaming.tls_key_file go together: set both or neither")
	}
	if d, err := time.ParseDuration(c.Network.Timeout); err != nil || d <= 0 {
		return p.errf("network.cni_timeout", "network.cni_timeout %q is not a positive duration (such as \"2m\" or \"30s\")", c.Network.Timeout)
	}
	for i, d := range c.Network.BinDirs {
		if !filepath.IsAbs(d) {
			return p.errf("network.cni_bin_dirs", "network.cni_bin_dirs[%d] must be an absolute path, got %q", i, d)
		}
	}
	for i, d := range c.CDI.SpecDirs {
		if !filepath.IsAbs(d) {
			return p.errf("cdi.spec_dirs", "cdi.spec_dirs[%d] must be an absolute path, got %q", i, d)
		}
	}
	for _, f := range []struct{ key, val string }{
		{"nri.socket_path", c.NRI.SocketPath}, {"nri.plugin_path", c.NRI.PluginPath}, {"nri.plugin_config_path", c.NRI.PluginConfigPath},
	} {
		if !filepath.IsAbs(f.val) {
			return p.errf(f.key, "%s must be an absolute path, got %q", f.key, f.val)
		}
	}
	// A unix socket's path has room for 107 bytes (sun_path).
	if len(c.NRI.SocketPath) > 107 {
		return p.errf("nri.socket_path", "nri.socket_path %q is longer than a unix socket path can be (107 bytes)", c.NRI.SocketPath)
	}
	for _, f := range []struct {
		key string
		val time.Duration
	}{{"nri.plugin_registration_timeout", c.NRI.RegistrationTimeout.Duration}, {"nri.plugin_request_timeout", c.NRI.RequestTimeout.Duration}} {
		if f.val < 0 {
			return p.errf(f.key, "%s must be positive, got %v", f.key, f.val)
		}
	}
	if d := c.Stats.CollectionPeriod.Duration; d != 0 && d < time.Second {
		return p.errf("stats.collection_period", "stats.collection_period must be \"0\" (read at each call) or at least 1s, got %v", d)
	}
	if c.Image.RegistriesConf != "" && !filepath.IsAbs(c.Image.RegistriesConf) {
		return p.errf("image.registries_conf", "image.registries_conf must be an absolute path, got %q", c.Image.RegistriesConf)
	}
	if d := c.Image.StorageDriver; d != "overlay" && d != "vfs" {
		return p.errf("image.storage_driver", "image.storage_driver must be \"overlay\" or \"vfs\", got %q", d)
	}
	if c.Image.MaxParallelDownloads < 0 {
		return p.errf("image.max_parallel_downloads", "image.max_parallel_downloads must be positive, got %d", c.Image.MaxParallelDownloads)
	}
	if d := c.Image.PullProgressTimeout.Duration; d < 0 {
		return p.errf("image.pull_progress_timeout", "image.pull_progress_timeout must be \"0\" (no timeout) or positive, got %v", d)
	}
	for _, f := range []struct{ key, val string }{
		{"image.signature_policy", c.Image.SignaturePolicy},
		{"image.signature_policy_dir", c.Image.SignaturePolicyDir},
		{"image.registries_d", c.Image.RegistriesD},
	} {
		if f.val != "" && !filepath.IsAbs(f.val) {
			return p.errf(f.key, "%s must be an absolute path, got %q", f.key, f.val)
		}
	}
	for i, r := range c.Image.Registries {
		if r.Prefix == "" && r.Location == "" {
			return p.errf("image.registries", "image.registries[%d]: prefix or location is required", i)
		}
		for j, m := range r.Mirrors {
			if m.Location == "" {
				return p.errf("image.registries", "image.registries[%d].mirrors[%d]: location is required", i, j)
			}
		}
	}
	var err error
	if c.Checkpoints.MaxSizeBytes, err = ParseMemory(c.Checkpoints.MaxSize); err != nil || c.Checkpoints.MaxSizeBytes <= 0 {
		return p.errf("checkpoints.max_size", "checkpoints.max_size %q is not a positive size (\"16Gi\")", c.Checkpoints.MaxSize)
	}
	for i, k := range c.Checkpoints.TrustedKeys {
		if !filepath.IsAbs(k) {
			return p.errf("checkpoints.trusted_keys", "checkpoints.trusted_keys[%d] %q must be an absolute path", i, k)
		}
	}
	if len(c.Handlers) == 0 {
		return p.errf("", "no handlers configured: add at least one [handlers.NAME] table")
	}
	for _, name := range c.HandlerNames() {
		h := c.Handlers[name]
		key := "handlers." + name
		if len(name) > 63 || !dns1123Label.MatchString(name) {
			return p.errf(key, "handler name %q is not a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters, like a RuntimeClass handler)", name)
		}
		if h == nil || h.RuntimePath == "" {
			return p.errf(key, "handler %q: runtime_path is required", name)
		}
		if !filepath.IsAbs(h.RuntimePath) {
			return p.errf(key+".runtime_path", "handler %q: runtime_path must be an absolute path, got %q", name, h.RuntimePath)
		}
		if !filepath.IsAbs(h.RuntimeRoot) {
			return p.errf(key+".runtime_root", "handler %q: runtime_root must be an absolute path, got %q", name, h.RuntimeRoot)
		}
		if h.CNIConfDir != "" && !filepath.IsAbs(h.CNIConfDir) {
			return p.errf(key+".cni_conf_dir", "handler %q: cni_conf_dir must be an absolute path, got %q", name, h.CNIConfDir)
		}
		for i, pat := range h.PodAnnotations {
			// containerd ignores a malformed pattern at each match, so it passes nothing
			// without a word; path.Match finds every malformed one against "".
			why := "is empty"
			if _, err := path.Match(pat, ""); err != nil {
				why = err.Error()
			} else if pat != "" {
				continue
			}
			return p.errf(key+".pod_annotations", "handler %q: pod_annotations[%d] %q: %s: want a glob pattern of annotation keys (path.Match syntax, such as \"io.katacontainers.*\")", name, i, pat, why)
		}
		seen := map[string]bool{}
		for i, u := range h.DefaultUlimits {
			l, err := ParseUlimit(u)
			if err == nil && seen[l.Type] {
				err = fmt.Errorf("%s is set twice", l.Type)
			}
			if err != nil {
				return p.errf(key+".default_ulimits", "handler %q: default_ulimits[%d] %q: %v", name, i, u, err)
			}
			seen[l.Type] = true
		}
		if err := h.resolveType(); err != nil {
			k := key + ".runtime_type"
			if h.RuntimeType == "" || h.Sandbox != "" && strings.Contains(err.Error(), "sandbox") {
				k = key + ".sandbox"
			}
			return p.errf(k, "handler %q: %v", name, err)
		}
		if h.SeccompProfile != "" {
			if err := checkSeccompProfile(h.SeccompProfile); err != nil {
				return p.errf(key+".seccomp_profile", "handler %q: seccomp_profile %q: %v", name, h.SeccompProfile, err)
			}
		}
		if h.ImageStore != "" && h.ImageStore != ImageStoreShared && h.ImageStore != ImageStoreSeparate {
			return p.errf(key+".image_store", "handler %q: image_store must be %q or %q, got %q", name, ImageStoreShared, ImageStoreSeparate, h.ImageStore)
		}
		if len(h.ShimOptions) > 0 && h.RuntimeType != "shim-v2" {
			return p.errf(key+".shim_options", "handler %q: shim_options are for runtime_type \"shim-v2\" rows, this one is %q", name, h.RuntimeType)
		}
		if _, err := shimopts.For(h.RuntimePath, h.ShimOptions, false); err != nil {
			return p.errf(key+".shim_options", "handler %q: shim_options: %v", name, err)
		}
		h.CheckpointOn, h.CheckpointKey = c.Checkpoints.Checkpoint, "checkpoints.checkpoint"
		if h.Checkpoint != nil {
			h.CheckpointOn, h.CheckpointKey = *h.Checkpoint, key+".checkpoint"
		}
		h.RestoreOn, h.RestoreKey = c.Checkpoints.Restore, "checkpoints.restore"
		if h.Restore != nil {
			h.RestoreOn, h.RestoreKey = *h.Restore, key+".restore"
		}
		if h.Overhead.MemoryBytes, err = ParseMemory(h.Overhead.Memory); err != nil {
			return p.errf(key+".overhead.memory", "handler %q: overhead.memory: %v", name, err)
		}
		if h.Overhead.MilliCPU, err = ParseCPU(h.Overhead.CPU); err != nil {
			return p.errf(key+".overhead.cpu", "handler %q: overhead.cpu: %v", name, err)
		}
	}
	if c.DefaultHandler == "" {
		return p.errf("default_handler", "default_handler is required (one of: %s)", strings.Join(c.HandlerNames(), ", "))
	}
	if _, ok := c.Handlers[c.DefaultHandler]; !ok {
		return p.errf("default_handler", "default_handler %q is not a configured handler (configured: %s)", c.DefaultHandler, strings.Join(c.HandlerNames(), ", "))
	}
	return nil
}

// runtimeTypes are the kinds of runtime a handler can name (internal/kind; kept here as strings
// so the config stays free of runtime code).
var runtimeTypes = []string{"oci", "oci-sandbox", "shim-v2"}

// resolveType settles RuntimeType from runtime_type or the deprecated sandbox key.
func (h *Handler) resolveType() error {
	var fromSandbox string
	switch h.Sandbox {
	case "":
	case SandboxNamespaces:
		fromSandbox = "oci"
	case SandboxShared:
		fromSandbox = "oci-sandbox"
	default:
		return fmt.Errorf("sandbox must be %q or %q, got %q (sandbox is deprecated: use runtime_type, one of %s)", SandboxNamespaces, SandboxShared, h.Sandbox, strings.Join(runtimeTypes, ", "))
	}
	switch {
	case h.RuntimeType == "" && fromSandbox != "":
		h.RuntimeType = fromSandbox
	case h.RuntimeType == "":
		h.RuntimeType = "oci"
	case fromSandbox != "" && fromSandbox != h.RuntimeType:
		return fmt.Errorf("runtime_type %q contradicts the deprecated sandbox = %q (which means %q): drop sandbox", h.RuntimeType, h.Sandbox, fromSandbox)
	}
	for _, t := range runtimeTypes {
		if h.RuntimeType == t {
			return nil
		}
	}
	return fmt.Errorf("runtime_type must be one of %s, got %q", strings.Join(runtimeTypes, ", "), h.RuntimeType)
}

// ParseMemory parses a Kubernetes-style memory quantity ("64Mi", "1G", "1048576").
func ParseMemory(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := map[string]int64{
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
		"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "": 1,
	}
	num := strings.TrimRight(s, "KMGTik")
	m, ok := mult[s[len(num):]]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n < 0 || n > math.MaxInt64/m {
		return 0, fmt.Errorf("%q is not a memory quantity (examples: 64Mi, 1Gi, 500M)", s)
	}
	return n * m, nil
}

// ParseCPU parses a Kubernetes-style CPU quantity ("100m", "0.5", "2") into millicores.
func ParseCPU(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if strings.HasSuffix(s, "m") {
		n, err := strconv.ParseInt(strings.TrimSuffix(s, "m"), 10, 64)
		if err == nil && n >= 0 {
			return n, nil
		}
	} else if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 && f <= 1e9 && (f == 0 || f >= 0.001) {
		return int64(math.Round(f * 1000)), nil
	}
	return 0, fmt.Errorf("%q is not a CPU quantity (examples: 100m, 0.5, 2)", s)
}

// RestartNeeded names the settings that differ between old and cfg and take effect only
// when the daemon restarts. The handler table, the default handler, image.registries_conf,
// image.registries, the signature settings, log_level and stats.collection_period are
// applied by a reload.
func RestartNeeded(old, cfg *Config) []string {
	var out []string
	differ := func(key string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, key)
		}
	}
	differ("socket", old.Socket, cfg.Socket)
	differ("state_root", old.StateRoot, cfg.StateRoot)
	differ("run_root", old.RunRoot, cfg.RunRoot)
	differ("cgroup_driver", old.CgroupDriver, cfg.CgroupDriver)
	differ("monitor_path", old.MonitorPath, cfg.MonitorPath)
	differ("pause_path", old.PausePath, cfg.PausePath)
	differ("strict_selinux", old.StrictSELinux, cfg.StrictSELinux)
	differ("image.pinned", old.Image.Pinned, cfg.Image.Pinned)
	differ("image.storage_driver", old.Image.StorageDriver, cfg.Image.StorageDriver)
	differ("image.max_parallel_downloads", old.Image.MaxParallelDownloads, cfg.Image.MaxParallelDownloads)
	differ("image.pull_progress_timeout", old.Image.PullProgressTimeout, cfg.Image.PullProgressTimeout)
	differ("network", old.Network, cfg.Network)
	differ("streaming", old.Streaming, cfg.Streaming)
	differ("metrics", old.Metrics, cfg.Metrics)
	differ("tracing", old.Tracing, cfg.Tracing)
	differ("node", old.Node, cfg.Node)
	differ("cdi", old.CDI, cfg.CDI)
	differ("nri", old.NRI, cfg.NRI)
	differ("debug", old.Debug, cfg.Debug)
	differ("mechanisms", old.Mechanisms, cfg.Mechanisms)
	// A row's image store is chosen once (image.Stores): no image moves under its pods.
	for _, name := range cfg.HandlerNames() {
		if o, n := old.Handlers[name], cfg.Handlers[name]; o != nil && n != nil && o.separate() != n.separate() {
			out = append(out, "handlers."+name+".image_store")
		}
	}
	return out
}

// checkSeccompProfile: an absolute path to a Docker-format JSON seccomp profile that parses.
func checkSeccompProfile(p string) error {
	if !filepath.IsAbs(p) {
		return errors.New("not an absolute path")
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if _, err := seccomp.LoadProfile(string(data), &specs.Spec{Process: &specs.Process{}}); err != nil {
		return fmt.Errorf("not a seccomp profile: %w", err)
	}
	return nil
}
