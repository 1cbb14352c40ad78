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

	"github.com/rtshimd/rtshimd/pkg/config"
	"github.com/rtshimd/rtshimd/pkg/oci"
	"github.com/rtshimd/rtshimd/pkg/pause"
)

// ProbeTimeout bounds the test container each handler runs at discovery.
const ProbeTimeout = 30 * time.Second

// Probe says where discovery may run its test containers.
type Probe struct {
	Rootfs       string // the pause rootfs (pkg/pause)
	Dir          string // scratch space for bundles
	CgroupDriver string
}

// Discover finds out, for every handler at once, its version, its features and whether it
// can run a container on this node at all (by running the pause program once).
func (t *Table) Discover(ctx context.Context, p Probe) {
	var wg sync.WaitGroup
	for _, h := range t.byName {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.discover(ctx, p)
			log := logrus.WithFields(logrus.Fields{"handler": h.Name, "version": h.Version, "ready": h.Ready})
			if h.Ready {
				log.WithField("features", fmt.Sprintf("%+v", h.Features)).Info("handler ready")
			} else {
				log.WithField("reason", h.Reason).Warn("handler not ready")
			}
		}()
	}
	wg.Wait()
}

func (h *Handler) discover(ctx context.Context, p Probe) {
	h.Ready, h.Reason, h.Notes = false, "", nil
	fi, err := os.Stat(h.Runtime.Path)
	if err != nil {
		h.Reason = fmt.Sprintf("runtime_path %s: not installed (%v)", h.Runtime.Path, unwrapPathErr(err))
		return
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		h.Reason = fmt.Sprintf("runtime_path %s is not an executable file", h.Runtime.Path)
		return
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if h.Version, err = h.Kind.Version(vctx); err != nil {
		h.Reason = err.Error()
		return
	}

	// Defaults by kind: a runtime that runs the pod in its own sandbox (gVisor's kernel, a
	// VM) cannot share the node's PID or IPC namespace with it.
	host := h.Kind.Plan().HostNamespaces
	h.Features = Features{HostNetwork: true, HostPID: host, HostIPC: host}
	if f, err := h.Kind.Features(vctx); err == nil {
		rro := slices.Contains(f.MountOptions, "rro") && kernelAtLeast(5, 12)
		h.Features.RecursiveReadOnlyMounts = rro
		h.Notes = append(h.Notes, "features: from `"+filepath.Base(h.Runtime.Path)+" features`")
	} else {
		h.Notes = append(h.Notes, "features: the runtime does not say; defaults for runtime_type "+h.Type)
	}
	// rtshimd does not set up pod user namespaces (idmapped mounts) yet, whatever the runtime can do.
	h.Features.UserNamespaces = false
	applyDeclared(&h.Features, h.declared, &h.Notes)
	if h.declared.UserNamespaces != nil && *h.declared.UserNamespaces {
		h.Features.UserNamespaces = false
		h.Notes = append(h.Notes, "user_namespaces: declared, but rtshimd does not support pod user namespaces yet")
	}

	start := time.Now()
	if err := h.probe(ctx, p); err != nil {
		h.Reason = "probe container failed: " + err.Error()
		return
	}
	h.Notes = append(h.Notes, fmt.Sprintf("probe: ran a container in %v", time.Since(start).Round(time.Millisecond)))
	h.Ready = true
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
func (h *Handler) probe(ctx context.Context, p Probe) error {
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := "rtshimd-probe-" + h.Name + "-" + hex.EncodeToString(b[:])
	bundle := filepath.Join(p.Dir, id)
	defer os.RemoveAll(bundle)
	spec := oci.InfraSpec(oci.InfraOptions{
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
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	// The kind leaves nothing of the probe behind, whatever happened.
	return h.Kind.Probe(ctx, id, bundle)
}

// probeCgroup puts the probe at the top of the hierarchy so its removal leaves nothing.
func probeCgroup(driver, id string) string {
	if driver == config.SystemdDriver {
		return oci.CgroupsPath(driver, "", id)
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
