package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/oci"
)

// Files every container of the pod gets bind-mounted from the sandbox directory.
const (
	HostnameFile = "hostname"
	ResolvFile   = "resolv.conf"
	HostsFile    = "hosts"
	// ShmDir is the directory that guards the pod's /dev/shm; the tmpfs is ShmMount in it.
	// (Pods of earlier releases have the tmpfs at ShmDir itself.)
	ShmDir   = "shm"
	ShmMount = "mnt"
	shmSize  = 64 << 20 // what containerd and CRI-O give a pod by default
	// FilesDir holds the three pod files, on a tmpfs of the pod's own: a container that
	// writes to its /etc/hosts fills that, not the node's /run (a few KiB are used).
	FilesDir   = "files"
	filesLimit = 1 << 20
)

// mountFiles mounts the tmpfs the pod files live on.
func mountFiles(path string) error {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return fmt.Errorf("create pod files dir: %w", err)
	}
	if err := unix.Mount("rtshimd-pod-files", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("mode=0755,size=%d,nr_inodes=16", filesLimit)); err != nil {
		return fmt.Errorf("mount pod files tmpfs at %s: %w", path, err)
	}
	return nil
}

// PodFile is the host path of one of the pod files (HostnameFile, HostsFile, ResolvFile).
// Pods of earlier releases have them directly in their directory.
func (s *Sandbox) PodFile(name string) string {
	if s.Files != "" {
		return filepath.Join(s.Files, name)
	}
	return filepath.Join(s.Dir, name)
}

// writePodFiles writes hostname, resolv.conf and hosts into dir.
func writePodFiles(dir, hostname string, cfg *runtimeapi.PodSandboxConfig, hostNetwork bool) error {
	if err := os.WriteFile(filepath.Join(dir, HostnameFile), []byte(hostname+"\n"), 0o644); err != nil {
		return fmt.Errorf("write hostname: %w", err)
	}
	resolv, err := resolvConf(cfg.GetDnsConfig())
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ResolvFile), resolv, 0o644); err != nil {
		return fmt.Errorf("write resolv.conf: %w", err)
	}
	hosts := []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")
	if hostNetwork {
		// The node's names, as containerd does for host-network pods.
		if b, err := os.ReadFile("/etc/hosts"); err == nil {
			hosts = b
		}
	}
	if err := os.WriteFile(filepath.Join(dir, HostsFile), hosts, 0o644); err != nil {
		return fmt.Errorf("write hosts: %w", err)
	}
	return nil
}

// resolvConf renders the pod's DNS config; with none, the pod gets the node's resolv.conf
// (kubelet's "Default" DNS policy).
func resolvConf(dns *runtimeapi.DNSConfig) ([]byte, error) {
	if dns == nil || (len(dns.Servers) == 0 && len(dns.Searches) == 0 && len(dns.Options) == 0) {
		b, err := os.ReadFile("/etc/resolv.conf")
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read node resolv.conf: %w", err)
		}
		return b, nil
	}
	var b strings.Builder
	for i, s := range dns.Servers {
		if strings.ContainsAny(s, " \t\n") || s == "" {
			return nil, fmt.Errorf("dns_config.servers[%d] %q is not an address", i, s)
		}
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	for i, s := range dns.Searches {
		if strings.ContainsAny(s, " \t\n") || s == "" {
			return nil, fmt.Errorf("dns_config.searches[%d] %q is not a domain", i, s)
		}
	}
	if len(dns.Searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(dns.Searches, " "))
	}
	for i, s := range dns.Options {
		if strings.ContainsAny(s, " \t\n") || s == "" {
			return nil, fmt.Errorf("dns_config.options[%d] %q is not a resolver option", i, s)
		}
	}
	if len(dns.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(dns.Options, " "))
	}
	return []byte(b.String()), nil
}

// mountShm gives the pod its own /dev/shm: a tmpfs its containers bind-mount, at path
// in a guard directory of mode 0700. The tmpfs is 1777 (it is /dev/shm inside), and
// the sandbox directory is searchable by all (for user-namespaced pods) and its mounts
// are listed in /proc/mounts: without the guard any local user could read and write
// the pod's shared memory. In a user namespace the guard belongs to the pod's root (its
// host IDs), who must pass it when runc 1.1 mounts it from inside the namespace.
func mountShm(path string, owner *oci.IDMappings) error {
	guard := filepath.Dir(path)
	if err := os.MkdirAll(guard, 0o700); err != nil {
		return fmt.Errorf("create shm dir: %w", err)
	}
	if err := os.Chmod(guard, 0o700); err != nil {
		return fmt.Errorf("chmod shm dir: %w", err)
	}
	if owner != nil && len(owner.UIDs) > 0 && len(owner.GIDs) > 0 {
		if err := os.Chown(guard, int(owner.UIDs[0].HostID), int(owner.GIDs[0].HostID)); err != nil {
			return fmt.Errorf("chown shm dir to the pod's root: %w", err)
		}
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return fmt.Errorf("create shm dir: %w", err)
	}
	if err := unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("mode=1777,size=%d", shmSize)); err != nil {
		return fmt.Errorf("mount pod shm at %s: %w", path, err)
	}
	return nil
}
