package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/lsm"
)

// bindMount is a CRI mount or a pod file, checked and ready to become a spec mount.
type bindMount struct {
	dst, src    string
	readonly    bool
	rro         bool
	propagation runtimeapi.MountPropagation
	options     []string // extra options (CRI mount_options), or the full option list of a pod file
}

// defaultMounts are the kernel filesystems every container gets, as containerd sets them.
// /sys and /sys/fs/cgroup are read-only unless privileged; /dev/shm is a private tmpfs
// only when the pod has no shared one; nodeSys: /sys is the node's (SysMount).
func defaultMounts(privileged, privateShm, nodeSys bool) []specs.Mount {
	mode := "ro"
	if privileged {
		mode = "rw"
	}
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
	}
	if privateShm {
		ms = append(ms, specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}})
	}
	return append(ms,
		specs.Mount{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		SysMount(mode, nodeSys),
		specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", mode}},
	)
}

// SysMount is a container's /sys, read-only unless mode is "rw": a sysfs of its own, or with
// nodeSys the node's /sys bound recursively read-only, whatever mode says (ro beside rro: a
// runtime that does not know rro takes it for mount data, which a bind ignores, and would
// leave the bind read-write). nodeSys is for a
// pod in a user namespace on the node's network (KEP-5607): sysfs shows the mounter's
// network namespace, and the kernel refuses (EPERM) to mount it from a user namespace that
// does not own that network namespace, the node's. containerd does the same; the node's
// files are owned by IDs the pod's user namespace does not map, so its root cannot write
// them either way.
func SysMount(mode string, nodeSys bool) specs.Mount {
	if nodeSys {
		return specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "ro", "rro", "nosuid", "noexec", "nodev"}}
	}
	return specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", mode}}
}

// IsImageMount reports whether a CRI mount is an image volume (KEP-4639): it names an
// image instead of a host path.
func IsImageMount(m *runtimeapi.Mount) bool { return m.GetImage().GetImage() != "" }

// imageVolumeOptions are the options of every image volume's bind: it is read-only (set
// apart) and carries neither devices nor set-user-ID programs; kubelet's mount_options may
// add to them. Not noexec: KEP-4639 dropped it (kubernetes/enhancements#5354), since shipping
// tools to a pod is what image volumes are for, and critest v1.37 runs a program from one.
var imageVolumeOptions = []string{"nosuid", "nodev"}

// imageVolumeUndo are the mount options that would undo imageVolumeOptions or the
// read-only bind: refused on an image volume.
var imageVolumeUndo = []string{"suid", "dev", "rw", "defaults"}

// criMounts checks config.mounts: container_path absolute, host_path present (created as a
// directory when missing; symlinks followed, as the CRI asks), recursive_read_only only with
// readonly and private propagation and where the pod's row has the feature (rro),
// selinux_relabel carried out where the node has SELinux
// (the host path gets mountLabel; an image volume is refused), left out with a warning
// where it has not, unless strict_selinux refuses it. An image mount binds its entry of imageVolumes,
// read-only.
func criMounts(config *runtimeapi.ContainerConfig, imageVolumes map[int]string, host lsm.Host, mountLabel string, rro bool) ([]bindMount, error) {
	var out []bindMount
	var relabels [][2]string // field, host path
	for i, m := range config.GetMounts() {
		field := func(f string) string { return "config.mounts[" + strconv.Itoa(i) + "]." + f }
		if m == nil {
			return nil, invalidf("config.mounts[%d] is empty", i)
		}
		dst := m.GetContainerPath()
		if !filepath.IsAbs(dst) {
			return nil, invalidf("%s %q is not an absolute path", field("container_path"), dst)
		}
		dst = filepath.Clean(dst)
		if dst == "/" {
			return nil, invalidf("%s %q: cannot mount over the root filesystem", field("container_path"), m.GetContainerPath())
		}
		image := IsImageMount(m)
		switch {
		case image && m.GetHostPath() != "":
			return nil, invalidf("%s %q and %s %q are both set; a mount has one or the other", field("host_path"), m.GetHostPath(), field("image.image"), m.GetImage().GetImage())
		case !image && m.GetImage() != nil && m.GetHostPath() == "":
			return nil, invalidf("%s is empty", field("image.image"))
		case !image && m.GetHostPath() == "":
			return nil, invalidf("%s is empty", field("host_path"))
		case !image && m.GetImageSubPath() != "":
			return nil, invalidf("%s %q is set but %s is not", field("image_sub_path"), m.GetImageSubPath(), field("image.image"))
		case image && !m.GetReadonly():
			// The CRI: "All image mounts are per feature definition readonly"; kubelet
			// always sets it. Refused rather than made read-only behind the caller's back.
			return nil, invalidf("%s is false for %s %q: an image volume is read-only", field("readonly"), field("image.image"), m.GetImage().GetImage())
		}
		switch m.GetPropagation() {
		case runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
			runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER,
			runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		default:
			return nil, invalidf("%s %d is not PRIVATE, HOST_TO_CONTAINER or BIDIRECTIONAL", field("propagation"), m.GetPropagation())
		}
		// An image mount is read-only by definition.
		ro := m.GetReadonly() || image
		if m.GetRecursiveReadOnly() {
			if !ro {
				return nil, invalidf("%s is set but readonly is not", field("recursive_read_only"))
			}
			if m.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_PRIVATE {
				return nil, invalidf("%s needs PRIVATE propagation, not %s", field("recursive_read_only"), m.GetPropagation())
			}
			if !rro {
				return nil, invalidf("%s is set but the pod's runtime handler lacks feature recursive_read_only_mounts", field("recursive_read_only"))
			}
		}
		for j, o := range m.GetMountOptions() {
			if o == "" || strings.ContainsAny(o, ", \t\n") {
				return nil, invalidf("%s[%d] %q is not a mount option", field("mount_options"), j, o)
			}
		}
		if m.GetSelinuxRelabel() {
			what := fmt.Sprintf("%s %q", field("host_path"), m.GetHostPath())
			if image {
				what = fmt.Sprintf("%s %q", field("image.image"), m.GetImage().GetImage())
			}
			relabel, err := host.CheckRelabel(field("selinux_relabel"), what)
			if err != nil {
				return nil, err
			}
			if relabel && image {
				// Its layers are read-only and shared by every user of the image.
				return nil, invalidf("%s is set for %s: an image volume is not relabeled", field("selinux_relabel"), what)
			}
		}
		if image {
			// mount_options add to an image volume's options, never undo them.
			for j, o := range m.GetMountOptions() {
				if slices.Contains(imageVolumeUndo, o) {
					return nil, invalidf("%s[%d] %q would undo the image volume's nosuid, nodev or read-only mount of %s %q",
						field("mount_options"), j, o, field("image.image"), m.GetImage().GetImage())
				}
			}
			src, ok := imageVolumes[i]
			if !ok {
				return nil, fmt.Errorf("%s %q: the image is not mounted", field("image.image"), m.GetImage().GetImage())
			}
			out = append(out, bindMount{
				dst: dst, src: src, readonly: true, rro: m.GetRecursiveReadOnly(),
				propagation: m.GetPropagation(), options: append(slices.Clone(imageVolumeOptions), m.GetMountOptions()...),
			})
			continue
		}
		// Created last, once the rest is valid: kubelet leaves a hostPath volume of no type whose source is missing to the
		// runtime; containerd and CRI-O create it as a directory.
		if _, err := os.Stat(m.GetHostPath()); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(m.GetHostPath(), 0o755); err != nil {
				return nil, invalidf("%s %q: create missing directory: %s", field("host_path"), m.GetHostPath(), errText(err))
			}
		}
		src, err := filepath.EvalSymlinks(m.GetHostPath())
		if err != nil {
			return nil, invalidf("%s %q: %s", field("host_path"), m.GetHostPath(), errText(err))
		}
		if m.GetSelinuxRelabel() && host.SELinux {
			relabels = append(relabels, [2]string{field("selinux_relabel"), src})
		}
		out = append(out, bindMount{
			dst: dst, src: src, readonly: ro, rro: m.GetRecursiveReadOnly(),
			propagation: m.GetPropagation(), options: slices.Clone(m.GetMountOptions()),
		})
	}
	// Relabeled once every mount is valid: a label, unlike a missing directory, changes
	// what other users of the host path may read.
	for _, r := range relabels {
		if err := host.Relabel(r[0], r[1], mountLabel); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// errText is the reason of a file-system error without the path the caller names itself.
func errText(err error) string {
	var pe interface{ Unwrap() error }
	if errors.As(err, &pe) {
		if inner := pe.Unwrap(); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}

// podFileMounts are the pod's /etc/hostname, /etc/hosts, /etc/resolv.conf (read-only with a
// read-only rootfs, as containerd does) and its shared /dev/shm.
func podFileMounts(o ContainerOptions, readonlyRootfs bool) []bindMount {
	var out []bindMount
	// The pod's hostname and DNS config are the pod's, not a container's to change (and a
	// write would reach every container of the pod); /etc/hosts stays writable, as in
	// containerd, unless the rootfs is read-only.
	for _, f := range []struct {
		dst, src string
		ro       bool
	}{
		{"/etc/hostname", o.HostnamePath, true},
		{"/etc/hosts", o.HostsPath, readonlyRootfs},
		{"/etc/resolv.conf", o.ResolvPath, true},
	} {
		if f.src != "" {
			// The flags of the pod files' tmpfs, repeated: a read-only remount in a pod user
			// namespace must keep them (the kernel locks them), and runc 1.1 does not add them.
			out = append(out, bindMount{dst: f.dst, src: f.src, readonly: f.ro, options: []string{"nosuid", "nodev", "noexec"}})
		}
	}
	if o.ShmPath != "" {
		out = append(out, bindMount{dst: "/dev/shm", src: o.ShmPath,
			options: []string{"nosuid", "noexec", "nodev"}})
	}
	return out
}

// buildMounts merges the default mounts, the pod files and the CRI mounts as containerd
// does: a CRI mount replaces a pod file or default mount with the same destination, a CRI
// mount of /dev drops every default mount under it, and the bind mounts are ordered by depth
// so a parent never hides a child. It returns the mounts and linux.rootfsPropagation.
func buildMounts(defaults []specs.Mount, pod, cri []bindMount) ([]specs.Mount, string) {
	binds := slices.Clone(cri)
	for _, p := range pod {
		if !slices.ContainsFunc(cri, func(c bindMount) bool { return c.dst == p.dst }) {
			binds = append(binds, p)
		}
	}
	slices.SortStableFunc(binds, func(a, b bindMount) int {
		return strings.Count(a.dst, "/") - strings.Count(b.dst, "/")
	})

	taken := make(map[string]bool)
	for _, b := range binds {
		taken[b.dst] = true
	}
	var out []specs.Mount
	for _, m := range defaults {
		dst := filepath.Clean(m.Destination)
		if taken[dst] || (taken["/dev"] && strings.HasPrefix(dst, "/dev/")) {
			continue
		}
		out = append(out, m)
	}

	rootfsPropagation := ""
	for _, b := range binds {
		opts := []string{"rbind"}
		switch b.propagation {
		case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
			opts = append(opts, "rshared")
			rootfsPropagation = "rshared"
		case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
			opts = append(opts, "rslave")
			if rootfsPropagation != "rshared" {
				rootfsPropagation = "rslave"
			}
		default:
			opts = append(opts, "rprivate")
		}
		switch {
		case b.rro:
			// ro too: a runtime that does not know rro (runc before 1.1, a wrapper)
			// takes it for mount data, which a bind ignores; the bind is then at least
			// read-only at its top.
			opts = append(opts, "ro", "rro")
		case b.readonly:
			opts = append(opts, "ro")
		default:
			opts = append(opts, "rw")
		}
		out = append(out, specs.Mount{Destination: b.dst, Type: "bind", Source: b.src,
			Options: append(opts, b.options...)})
	}
	return out, rootfsPropagation
}
