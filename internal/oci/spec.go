package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/store"
)

// Annotations both containerd and CRI-O set; sandboxing runtimes (runsc, kata) read them
// to tell an sandbox container from the containers that join it.
const (
	AnnotationContainerType = "io.kubernetes.cri.container-type"
	AnnotationSandboxID     = "io.kubernetes.cri.sandbox-id"
	AnnotationSandboxName   = "io.kubernetes.cri.sandbox-name"
	AnnotationSandboxNS     = "io.kubernetes.cri.sandbox-namespace"
	AnnotationSandboxUID    = "io.kubernetes.cri.sandbox-uid"
	AnnotationCRIOType      = "io.kubernetes.cri-o.ContainerType"
	AnnotationCRIOSandboxID = "io.kubernetes.cri-o.SandboxID"

	ContainerTypeSandbox   = "sandbox"
	ContainerTypeContainer = "container"
)

// The pod's size as kubelet sends it (linux.resources of the pod config), under
// containerd's names: runtimes that size a VM once, when the pod starts (Kata with
// static_sandbox_resource_mgmt), read them from the sandbox container's spec.
const (
	AnnotationSandboxCPUPeriod = "io.kubernetes.cri.sandbox-cpu-period"
	AnnotationSandboxCPUQuota  = "io.kubernetes.cri.sandbox-cpu-quota"
	AnnotationSandboxCPUShares = "io.kubernetes.cri.sandbox-cpu-shares"
	AnnotationSandboxMemory    = "io.kubernetes.cri.sandbox-memory"
)

// AddSandboxSizing sets the sizing annotations in a from the pod's linux.resources; a pod
// config without them (an older kubelet, crictl) gets none, as with containerd. Unlike
// containerd, rtshimd sets them on every container's spec too: a pod of the oci kind may
// have no sandbox container to carry them.
func AddSandboxSizing(a map[string]string, pod *runtimeapi.PodSandboxConfig) {
	r := pod.GetLinux().GetResources()
	if r == nil {
		return
	}
	a[AnnotationSandboxCPUPeriod] = strconv.FormatInt(r.GetCpuPeriod(), 10)
	a[AnnotationSandboxCPUQuota] = strconv.FormatInt(r.GetCpuQuota(), 10)
	a[AnnotationSandboxCPUShares] = strconv.FormatInt(r.GetCpuShares(), 10)
	a[AnnotationSandboxMemory] = strconv.FormatInt(r.GetMemoryLimitInBytes(), 10)
}

// Annotation keys under these prefixes are rtshimd's own (containerd's and CRI-O's names):
// neither a pod's nor a container's annotations set them, so no pod can claim another's
// sandbox or size.
var reservedAnnotationPrefixes = []string{"io.kubernetes.cri.", "io.kubernetes.cri-o."}

func reservedAnnotation(key string) bool {
	for _, p := range reservedAnnotationPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Pod annotation keys under these prefixes are read by the runtime or by CRIU: runc gives
// org.criu.config to CRIU as its configuration file (options, plugins, action scripts run
// as root at restore), and crun reads run.oci.* as settings of its own. A glob in a row's
// pod_annotations (Kata users write "*") must not hand them to a tenant; only a pattern
// that is the key itself, an operator's deliberate choice, passes one.
var exactOnlyAnnotationPrefixes = []string{"org.criu.", "run.oci."}

func exactOnlyAnnotation(key string) bool {
	for _, p := range exactOnlyAnnotationPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// PassedPodAnnotations returns the pod's annotations whose key matches one of patterns
// (path.Match globs: a handler row's pod_annotations, as containerd's), and the keys that
// matched but are never passed: rtshimd's own (reserved prefixes), and the runtime's and
// CRIU's (exactOnlyAnnotationPrefixes) where only a glob, not the key itself, matched.
func PassedPodAnnotations(pod *runtimeapi.PodSandboxConfig, patterns []string) (passed map[string]string, reserved []string) {
	if len(patterns) == 0 {
		return nil, nil
	}
	for k, v := range pod.GetAnnotations() {
		if !slices.ContainsFunc(patterns, func(p string) bool { ok, _ := path.Match(p, k); return ok }) {
			continue
		}
		if reservedAnnotation(k) || (exactOnlyAnnotation(k) && !slices.Contains(patterns, k)) {
			reserved = append(reserved, k)
			continue
		}
		if passed == nil {
			passed = map[string]string{}
		}
		passed[k] = v
	}
	slices.Sort(reserved)
	return passed, reserved
}

// AddPodAnnotations adds to a the pod annotations patterns pass (PassedPodAnnotations)
// where a has no such key: called last, so what rtshimd sets, and a container's own
// annotation of the same key (as in containerd), win over the pod's.
func AddPodAnnotations(a map[string]string, pod *runtimeapi.PodSandboxConfig, patterns []string) {
	passed, _ := PassedPodAnnotations(pod, patterns)
	for k, v := range passed {
		if _, ok := a[k]; !ok {
			a[k] = v
		}
	}
}

// SpecVersion is the ociVersion we write: the newest every runtime here accepts (crun 1.8
// refuses versions it does not know, and runc and runsc 2022 speak 1.0.2-dev).
const SpecVersion = "1.0.2-dev"

// DefaultMaskedPaths and DefaultReadonlyPaths are what containerd and CRI-O hide from
// unprivileged containers.
var (
	DefaultMaskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
	DefaultReadonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// SandboxContainerOptions describe a sandbox container (the pause process).
type SandboxContainerOptions struct {
	ID          string
	Rootfs      string
	Args        []string
	Hostname    string
	Namespaces  []specs.LinuxNamespace
	CgroupsPath string
	OOMScoreAdj *int
	Annotations map[string]string
	Sysctls     map[string]string
	User        specs.User
	// ShmPath is bind-mounted on /dev/shm; empty gives the container its own tmpfs.
	ShmPath string
	// Resources bound the sandbox container's cgroup (for sandboxing runtimes, the whole pod).
	Resources *specs.LinuxResources
	// IDMappings are the mappings of the user namespace among Namespaces (nil: none).
	IDMappings *IDMappings
	// Security modules' labels for the pod ("" = none).
	ApparmorProfile, SelinuxLabel, MountLabel string
	// Seccomp is the pod's filter (SandboxSeccomp; nil = none).
	Seccomp *specs.LinuxSeccomp
}

// IDMappings are a pod user namespace's ID mappings. The runtime joins the namespace by
// path; the spec carries its mappings too, which runc needs to own /dev and the mounts
// for the container's root.
type IDMappings struct {
	UIDs []specs.LinuxIDMapping `json:"uids"`
	GIDs []specs.LinuxIDMapping `json:"gids"`
}

// SandboxContainerSpec builds the spec of an sandbox container: the pause program on a read-only
// rootfs, no capabilities, no new privileges, the pod's seccomp filter.
func SandboxContainerSpec(o SandboxContainerOptions) *specs.Spec {
	shm := specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
		Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}
	if o.ShmPath != "" {
		shm = specs.Mount{Destination: "/dev/shm", Type: "bind", Source: o.ShmPath,
			Options: []string{"rbind", "nosuid", "noexec", "nodev"}}
	}
	spec := &specs.Spec{
		Version:  SpecVersion,
		Hostname: o.Hostname,
		Root:     &specs.Root{Path: o.Rootfs, Readonly: true},
		Process: &specs.Process{
			Args:            o.Args,
			Cwd:             "/",
			Env:             []string{"PATH=/"},
			User:            o.User,
			NoNewPrivileges: true,
			Capabilities:    sandboxContainerCapabilities(),
			OOMScoreAdj:     o.OOMScoreAdj,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			shm,
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			SysMount("ro", o.IDMappings != nil && !slices.ContainsFunc(o.Namespaces, func(n specs.LinuxNamespace) bool {
				return n.Type == specs.NetworkNamespace
			})),
		},
		Annotations: o.Annotations,
		Linux: &specs.Linux{
			Namespaces:    o.Namespaces,
			CgroupsPath:   o.CgroupsPath,
			Resources:     trimmed(o.Resources, o.CgroupsPath),
			Sysctl:        o.Sysctls,
			MaskedPaths:   slices.Clone(DefaultMaskedPaths),
			ReadonlyPaths: slices.Clone(DefaultReadonlyPaths),
		},
	}
	o.IDMappings.apply(spec.Linux)
	spec.Annotations = scopeIsCgroup(spec.Annotations, o.CgroupsPath)
	spec.Process.ApparmorProfile, spec.Process.SelinuxLabel, spec.Linux.MountLabel = o.ApparmorProfile, o.SelinuxLabel, o.MountLabel
	spec.Linux.Seccomp = o.Seccomp
	return spec
}

// sandboxContainerCapabilities are the sandbox container's: none. SandboxSeccomp judges the default
// profile against them.
func sandboxContainerCapabilities() *specs.LinuxCapabilities { return &specs.LinuxCapabilities{} }

func (m *IDMappings) apply(l *specs.Linux) {
	if m != nil {
		l.UIDMappings, l.GIDMappings = slices.Clone(m.UIDs), slices.Clone(m.GIDs)
	}
}

// WriteBundle writes spec as dir/config.json.
func WriteBundle(dir string, spec *specs.Spec) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("create bundle %s: %w", dir, err)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	return store.WriteFileAtomic(filepath.Join(dir, "config.json"), data, 0o600)
}

// ReadBundle reads dir/config.json: what a bundle says of a task whose record was lost.
func ReadBundle(dir string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("read bundle %s: %w", dir, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("read bundle %s: %w", dir, err)
	}
	return &spec, nil
}

// crunSubgroupAnnotation names the cgroup crun makes below a systemd scope and puts the
// container in, with the limits ("container" by default on cgroup v2; crun(1)).
const crunSubgroupAnnotation = "run.oci.systemd.subgroup"

// scopeIsCgroup sets crun's subgroup empty where cgroupsPath is systemd's
// slice:prefix:name: crun then puts the container in the scope itself, as runc and the
// runc shim do, and the scope is where rtshimd reads stats, limits and OOM kills
// (cgpath.Dir) whatever the runtime. Other runtimes ignore the annotation; one the pod or
// container sets is kept. a is copied, not changed.
func scopeIsCgroup(a map[string]string, cgroupsPath string) map[string]string {
	if cgroupsPath == "" || strings.HasPrefix(cgroupsPath, "/") || strings.Count(cgroupsPath, ":") != 2 {
		return a
	}
	if _, set := a[crunSubgroupAnnotation]; set {
		return a
	}
	out := make(map[string]string, len(a)+1)
	for k, v := range a {
		out[k] = v
	}
	out[crunSubgroupAnnotation] = ""
	return out
}
