package handlers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/pause"
)

// ProbeTimeout bounds the test container each handler runs at discovery.
const ProbeTimeout = 30 * time.Second

// Probe says where discovery may run its test containers.
type Probe struct {
	Rootfs       string // the pause rootfs (internal/pause)
	Dir          string // scratch space for bundles
	CgroupDriver string
}

// discoverAll discovers every row of t at once and returns the table with what each
// found; t itself is not written.
func discoverAll(ctx context.Context, t *Table, p Probe, rts *Runtimes) *Table {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := t
	for _, h := range t.byName {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := discover(ctx, h, p, rts)
			mu.Lock()
			out = out.with(h.withDiscovery(d))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// withDiscovery returns a copy of h with what discovery found, and logs it.
func (h *Handler) withDiscovery(d Discovery) *Handler {
	n := *h
	n.Discovery = d
	if d.runtime != nil {
		n.Runtime, n.Kind = d.runtime, d.kind
	}
	log := logrus.WithFields(logrus.Fields{"handler": h.Name, "version": d.Version, "ready": d.Ready})
	if d.Ready {
		log.WithField("features", fmt.Sprintf("%+v", d.Features)).Info("handler ready")
	} else {
		log.WithField("reason", d.Reason).Warn("handler not ready")
	}
	return &n
}

// discover finds out a handler's version, its features and whether it can run a
// container on this node at all (by running the pause program once).
func discover(ctx context.Context, h *Handler, p Probe, rts *Runtimes) (d Discovery) {
	fi, err := os.Stat(h.Runtime.Path)
	if err != nil {
		d.Reason = fmt.Sprintf("runtime_path %s: not installed (%v)", h.Runtime.Path, unwrapPathErr(err))
		return d
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		d.Reason = fmt.Sprintf("runtime_path %s is not an executable file", h.Runtime.Path)
		return d
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if d.Version, err = h.Kind.Version(vctx); err != nil {
		d.Reason = err.Error()
		return d
	}

	// Defaults by kind: a runtime that runs the pod in its own sandbox (gVisor's kernel, a
	// VM) cannot share the node's PID or IPC namespace with it.
	host := h.Kind.Plan().HostNamespaces
	d.Features = Features{HostNetwork: true, HostPID: host, HostIPC: host}
	// Pod user namespaces are made by the daemon with the pod's other namespaces, so only
	// kinds whose namespaces it pins can have them, and the runtime must join a user
	// namespace by path (runc's features list "user").
	pins := h.Kind.Plan().PinIPCUTS
	noUserNS := "" // why this handler's pods cannot have user namespaces here
	switch {
	case !pins:
		noUserNS = "runtime_type " + h.Type() + " makes the pod's namespaces itself, and rtshimd makes pod user namespaces only where it makes the others"
	case !kernelHasUserNS():
		noUserNS = "the kernel has no user namespaces"
	default:
		if dir := closedAncestor(p.Rootfs); dir != "" {
			noUserNS = dir + " is not searchable by other users (o+x), and the runtime reaches a container's root filesystem as the pod's root, another user"
		}
	}
	if f, err := h.Kind.Features(vctx); err == nil {
		rro := slices.Contains(f.MountOptions, "rro") && kernelAtLeast(5, 12)
		d.Features.RecursiveReadOnlyMounts = rro
		d.Features.UserNamespaces = f.Linux != nil && slices.Contains(f.Linux.Namespaces, "user")
		d.Notes = append(d.Notes, "features: from `"+filepath.Base(h.Runtime.Path)+" features`")
	} else {
		d.Notes = append(d.Notes, "features: the runtime does not say; defaults for runtime_type "+h.Type())
	}
	applyDeclared(&d.Features, h.Config.Features, &d.Notes)
	if d.Features.UserNamespaces && noUserNS != "" {
		d.Features.UserNamespaces = false
		d.Notes = append(d.Notes, "user_namespaces: not possible: "+noUserNS)
	}

	start := time.Now()
	res, err := h.probe(ctx, p)
	if err != nil {
		d.Reason = "probe container failed: " + err.Error()
		return d
	}
	d.Notes = append(d.Notes, fmt.Sprintf("probe: ran a container in %v", time.Since(start).Round(time.Millisecond)))
	if len(res.Args) > 0 {
		// The runtime needs flags the row does not give: the handler's pods run with them
		// (and keep them in their records).
		row := *h.Runtime
		row.Args = append(slices.Clone(h.Runtime.Args), res.Args...)
		k, err := rts.For(h.Type(), &row)
		if err != nil {
			d.Reason = err.Error()
			return d
		}
		d.runtime, d.kind, d.Args, d.ArgsReason = &row, k, res.Args, res.Note
		d.Notes = append(d.Notes, "runtime_args: discovered "+strings.Join(res.Args, " ")+": "+res.Note)
	}
	d.Ready = true
	return d
}

// closedAncestor returns the first directory above path that other users cannot search
// ("" if none): a user-namespaced container's root cannot reach its rootfs past it.
func closedAncestor(path string) string {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return dir
		}
		if dir == "/" || dir == "." {
			return ""
		}
	}
}

// kernelHasUserNS: the kernel was built with user namespaces.
func kernelHasUserNS() bool {
	_, err := os.Stat("/proc/self/ns/user")
	return err == nil
}

func applyDeclared(f *Features, d config.Declared, notes *[]string) {
	set := func(name string, dst *bool, v *bool) {
		if v != nil {
			*dst = *v
			*notes = append(*notes, fmt.Sprintf("%s: declared %v in config", name, *v))
		}
	}
	set("host_network", &f.HostNetwork, d.HostNetwork)
	set("host_pid", &f.HostPID, d.HostPID)
	set("host_ipc", &f.HostIPC, d.HostIPC)
	set("user_namespaces", &f.UserNamespaces, d.UserNamespaces)
	set("recursive_read_only_mounts", &f.RecursiveReadOnlyMounts, d.RecursiveReadOnlyMounts)
}

// probe runs the pause program once (it exits at once) as a pod's sandbox container:
// the one check that catches every reason a runtime cannot work on this node (crun on
// hybrid cgroups, a VM runtime without /dev/kvm, a runtime built for another kernel).
func (h *Handler) probe(ctx context.Context, p Probe) (kind.ProbeResult, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := "rtshimd-probe-" + h.Name + "-" + hex.EncodeToString(b[:])
	bundle := filepath.Join(p.Dir, id)
	defer os.RemoveAll(bundle)
	spec := oci.SandboxContainerSpec(oci.SandboxContainerOptions{
		ID:     id,
		Rootfs: p.Rootfs,
		Args:   []string{pause.Binary, "-probe"},
		Namespaces: []specs.LinuxNamespace{
			{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
			{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
		},
		CgroupsPath: probeCgroup(p.CgroupDriver, id),
		Annotations: map[string]string{
			oci.AnnotationContainerType: oci.ContainerTypeSandbox,
			oci.AnnotationSandboxID:     id,
			oci.AnnotationCRIOType:      oci.ContainerTypeSandbox,
			oci.AnnotationCRIOSandboxID: id,
		},
	})
	if err := oci.WriteBundle(bundle, spec); err != nil {
		return kind.ProbeResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	// The kind leaves nothing of the probe behind, whatever happened.
	return h.Kind.Probe(ctx, id, bundle)
}

// probeCgroup puts the probe at the top of the hierarchy so its removal leaves nothing.
func probeCgroup(driver, id string) string {
	if driver == config.SystemdDriver {
		return cgpath.For(true, "", id)
	}
	return "/" + id
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return ma > major || (ma == major && mi >= minor)
}
