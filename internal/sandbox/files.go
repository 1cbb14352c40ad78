package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/oci"
)

// Files every container of the pod gets bind-mounted from the sandbox directory.
const (
	HostnameFile = "hostname"
	ResolvFile   = "resolv.conf"
	HostsFile    = "hosts"
	// TmpfsDir is the pod's one tmpfs: its /dev/shm (ShmSub) and its files (FilesSub).
	// One mount, not two: every runc reads the node's whole mount table several times
	// per container, so each pod's lines there cost every later start.
	TmpfsDir = "tmpfs"
	ShmSub   = "shm"
	FilesSub = "files"
	// Pods of earlier releases: a tmpfs for /dev/shm at ShmDir/ShmMount (or at ShmDir
	// itself), and one for the files at FilesDir.
	ShmDir     = "shm"
	ShmMount   = "mnt"
	FilesDir   = "files"
	shmSize    = 64 << 20 // what containerd and CRI-O give a pod by default
	filesLimit = 1 << 20
)

// mountPodTmpfs mounts the pod's tmpfs at path, with ShmSub (1777: it is /dev/shm inside)
// and FilesSub in it. Its root is 0700 and belongs to the pod's root (its host IDs in a
// user namespace, who must pass it when runc 1.1 mounts from inside the namespace): the
// sandbox directory is searchable by all (for user-namespaced pods) and its mounts are
// listed in /proc/mounts, so without that any local user could read and write the pod's
// shared memory. Its size is /dev/shm's and the files' together: a container that fills
// its /etc/hosts fills the pod's tmpfs, never the node's /run.
func mountPodTmpfs(path string, owner *oci.IDMappings) error {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return fmt.Errorf("create pod tmpfs dir: %w", err)
	}
	if err := unix.Mount("rtshimd-pod", path, "tmpfs", podTmpfsFlags, podTmpfsData(owner)); err != nil {
		return fmt.Errorf("mount pod tmpfs at %s: %w", path, err)
	}
	if err := makePodTmpfsDirs(path); err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		return err
	}
	return nil
}

const podTmpfsFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// podTmpfsData is the pod tmpfs's mount options: mode, size and owner.
func podTmpfsData(owner *oci.IDMappings) string {
	opts := fmt.Sprintf("mode=0700,size=%d", shmSize+filesLimit)
	if owner != nil && len(owner.UIDs) > 0 && len(owner.GIDs) > 0 {
		opts += fmt.Sprintf(",uid=%d,gid=%d", owner.UIDs[0].HostID, owner.GIDs[0].HostID)
	}
	return opts
}

// makePodTmpfsDirs makes ShmSub and FilesSub in the pod tmpfs at root.
func makePodTmpfsDirs(root string) error {
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{ShmSub, 0o1777}, {FilesSub, 0o755}} {
		p := filepath.Join(root, d.name)
		err := os.Mkdir(p, d.mode)
		if err == nil {
			err = os.Chmod(p, d.mode) // past the umask
		}
		if err != nil {
			return fmt.Errorf("pod tmpfs: %w", err)
		}
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

// LendTmpfs puts a copy of the pod's tmpfs, which is in the pin home (TmpfsHome), at
// sb.Tmpfs on the node while a runtime creates a container: runc binds the container's
// /dev/shm and pod files from there into the container's own mount namespace, which
// keeps them. giveBack takes the copy off the node once no other create of the pod needs
// it; keep leaves it there until the pod goes (a container whose hooks run on the node
// after create). A pod whose tmpfs is on the node needs nothing.
func (m *Manager) LendTmpfs(sb *Sandbox) (giveBack func(keep bool), err error) {
	if !sb.TmpfsHome {
		return func(bool) {}, nil
	}
	sb.lendMu.Lock()
	defer sb.lendMu.Unlock()
	if sb.lent == 0 && !sb.lentKept {
		if err := m.host().LendPodTmpfs(sb.ID, sb.Tmpfs); err != nil {
			return nil, err
		}
	}
	sb.lent++
	return func(keep bool) {
		sb.lendMu.Lock()
		defer sb.lendMu.Unlock()
		sb.lent--
		sb.lentKept = sb.lentKept || keep
		if sb.lent == 0 && !sb.lentKept {
			if err := m.host().Unmount(sb.Tmpfs); err != nil {
				// One line left in the node's table, until the pod's removal.
				logrus.WithError(err).WithField("sandbox", sb.ID).Warn("take the pod's lent tmpfs off the node")
			}
		}
	}, nil
}
