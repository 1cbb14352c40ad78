// Package network attaches pod network namespaces to CNI networks through libcni: it
// watches the CNI config directories, reports whether a usable network exists, and runs
// ADD and DEL for pods. It does not create namespaces (internal/nsfile does) or know sandboxes.
package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/nsfile"
)

// Options configure a Manager.
type Options struct {
	ConfDir  string   // default network configs
	BinDirs  []string // plugin binaries
	CacheDir string   // libcni's cache of results, so DEL works after a restart
	// Timeout bounds each CNI operation (ADD, DEL, loading a config); 0: DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout bounds one CNI operation when the caller's context ends no earlier.
// kubelet gives up on a request after its runtime-request-timeout (2 minutes by default)
// and containerd uses the request's context alone, but a caller with no deadline (crictl
// without --timeout, cleanup, a config reload) must not have a hung plugin pin the pod's
// name and a goroutine for ever; so the same 2 minutes, per operation.
const DefaultTimeout = 2 * time.Minute

// Network is one loaded CNI network.
type Network struct {
	List *libcni.NetworkConfigList
	File string
}

// Manager loads CNI networks and runs plugins.
type Manager struct {
	opts Options
	cni  *libcni.CNIConfig

	mu      sync.RWMutex
	loaded  map[string]*Network // conf dir (and network name) → network
	errs    map[string]error
	watched map[string]bool
	// seen is the last listing (names, sizes, times) of the watched dirs: reloading
	// validates every plugin by running it, so it happens only when something changed.
	seen string
}

// New returns a Manager; call Watch to keep its view of the config dirs current.
func New(opts Options) *Manager {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	return &Manager{
		opts:    opts,
		cni:     libcni.NewCNIConfigWithCacheDir(opts.BinDirs, opts.CacheDir, newPluginExec()),
		loaded:  map[string]*Network{},
		errs:    map[string]error{},
		watched: map[string]bool{opts.ConfDir: true},
	}
}

// AddDir makes the Manager watch another config dir (a handler's own cni_conf_dir).
func (m *Manager) AddDir(dir string) {
	m.mu.Lock()
	m.watched[dir] = true
	m.mu.Unlock()
}

// Watch reloads the config dirs now and then every interval until ctx ends. Polling a
// directory listing is cheap and needs no inotify limits.
func (m *Manager) Watch(ctx context.Context, interval time.Duration) {
	m.reload(ctx)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if fp := m.fingerprint(); fp != m.lastSeen() {
					m.reload(ctx)
				}
			}
		}
	}()
}

func key(dir, name string) string { return dir + "\x00" + name }

func (m *Manager) lastSeen() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.seen
}

// fingerprint describes the watched dirs' contents cheaply (no file is read).
func (m *Manager) fingerprint() string {
	m.mu.RLock()
	dirs := make([]string, 0, len(m.watched))
	for d := range m.watched {
		dirs = append(dirs, d)
	}
	m.mu.RUnlock()
	sort.Strings(dirs)
	var b strings.Builder
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		fmt.Fprintf(&b, "%s:%v;", d, err)
		for _, e := range entries {
			if info, err := e.Info(); err == nil {
				fmt.Fprintf(&b, "%s/%d/%d;", e.Name(), info.Size(), info.ModTime().UnixNano())
			}
		}
	}
	return b.String()
}

// reload loads, for every watched dir, the first valid network in name order (as kubelet
// and containerd choose the default network), and every network by name.
func (m *Manager) reload(ctx context.Context) {
	fp := m.fingerprint()
	m.mu.RLock()
	dirs := make([]string, 0, len(m.watched))
	for d := range m.watched {
		dirs = append(dirs, d)
	}
	m.mu.RUnlock()
	loaded, errs := map[string]*Network{}, map[string]error{}
	for _, dir := range dirs {
		files, err := libcni.ConfFiles(dir, []string{".conflist", ".conf", ".json"})
		if err != nil {
			errs[dir] = fmt.Errorf("read network configs: %v", err)
			continue
		}
		if len(files) == 0 {
			errs[dir] = fmt.Errorf("no network config in %s", dir)
			continue
		}
		sort.Strings(files)
		var problems []string
		for _, f := range files {
			n, err := m.load(ctx, f)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if _, ok := loaded[key(dir, "")]; !ok {
				loaded[key(dir, "")] = n
			}
			loaded[key(dir, n.List.Name)] = n
		}
		if _, ok := loaded[key(dir, "")]; !ok {
			errs[dir] = fmt.Errorf("no valid network config in %s: %s", dir, strings.Join(problems, "; "))
		}
	}
	m.mu.Lock()
	changed := len(loaded) != len(m.loaded)
	for k, n := range loaded {
		if old, ok := m.loaded[k]; !ok || string(old.List.Bytes) != string(n.List.Bytes) {
			changed = true
		}
	}
	m.loaded, m.errs, m.seen = loaded, errs, fp
	m.mu.Unlock()
	if changed {
		for k, n := range loaded {
			if strings.HasSuffix(k, "\x00") {
				logrus.WithFields(logrus.Fields{"network": n.List.Name, "file": n.File}).Info("CNI network loaded")
			}
		}
	}
}

// bounded is ctx ending after the configured timeout at the latest, and a message for
// the error of an operation that ran out of it.
func (m *Manager) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.opts.Timeout)
}

func (m *Manager) timedOut(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (each CNI operation is bounded by network.cni_timeout = %v, or the request's deadline)", err, m.opts.Timeout)
	}
	return err
}

func (m *Manager) load(ctx context.Context, file string) (*Network, error) {
	var list *libcni.NetworkConfigList
	var err error
	if strings.HasSuffix(file, ".conflist") {
		list, err = libcni.NetworkConfFromFile(file)
	} else {
		var conf *libcni.PluginConfig
		// A single-plugin .conf file, which nodes still have and containerd and CRI-O read.
		if conf, err = libcni.ConfFromFile(file); err == nil { //nolint:staticcheck // see above
			list, err = libcni.ConfListFromConf(conf) //nolint:staticcheck // see above
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	// Validation runs every plugin (VERSION): a hung one must not stop the reloads.
	vctx, cancel := m.bounded(ctx)
	defer cancel()
	if _, err := m.cni.ValidateNetworkList(vctx, list); err != nil {
		return nil, fmt.Errorf("%s: %v", file, m.timedOut(err))
	}
	return &Network{List: list, File: file}, nil
}

// Ready reports whether the default network is usable, and why not.
func (m *Manager) Ready() (bool, string) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if _, ok := m.loaded[key(m.opts.ConfDir, "")]; ok {
		return true, ""
	}
	if err := m.errs[m.opts.ConfDir]; err != nil {
		return false, err.Error()
	}
	return false, "CNI configuration not loaded yet"
}

// Lookup returns the network for a pod: name ("" = the first) in dir ("" = the default).
func (m *Manager) Lookup(dir, name string) (*Network, error) {
	if dir == "" {
		dir = m.opts.ConfDir
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if n, ok := m.loaded[key(dir, name)]; ok {
		return n, nil
	}
	if name != "" {
		return nil, fmt.Errorf("CNI network %q not found in %s", name, dir)
	}
	if err := m.errs[dir]; err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no CNI network loaded from %s", dir)
}

// Pod is what a CNI call needs to know about a pod.
type Pod struct {
	SandboxID, NetNS     string
	Name, Namespace, UID string
	PortMappings         []PortMapping
}

// PortMapping is a hostPort, for the portmap plugin.
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

func runtimeConf(p Pod) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{
		ContainerID: p.SandboxID,
		NetNS:       p.NetNS,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.Namespace},
			{"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.SandboxID},
			{"K8S_POD_UID", p.UID},
		},
	}
	if len(p.PortMappings) > 0 {
		rt.CapabilityArgs = map[string]interface{}{"portMappings": p.PortMappings}
	}
	return rt
}

// Setup runs ADD for the pod and returns its IPs (the first is the primary). On error
// the plugins' own message is returned and DEL has been run, so nothing is left.
func (m *Manager) Setup(ctx context.Context, n *Network, p Pod) ([]string, error) {
	rt := runtimeConf(p)
	// On any error after ADD began, DEL runs here; the caller runs it again at cleanup
	// (DEL is idempotent), so a DEL that fails now is retried rather than forgotten.
	actx, cancel := m.bounded(ctx)
	res, err := m.cni.AddNetworkList(actx, n.List, rt)
	cancel()
	if err == nil {
		var r *current.Result
		if r, err = current.NewResultFromResult(res); err == nil {
			var ips []string
			for _, ip := range r.IPs {
				ips = append(ips, ip.Address.IP.String())
			}
			return ips, nil
		}
		err = fmt.Errorf("unreadable result: %w", err)
	}
	dctx, dcancel := m.bounded(context.WithoutCancel(ctx))
	if derr := m.cni.DelNetworkList(dctx, n.List, rt); derr != nil {
		logrus.WithError(derr).WithField("sandbox", p.SandboxID).Warn("CNI DEL after a failed ADD")
	}
	dcancel()
	return nil, fmt.Errorf("CNI network %q (%s): ADD: %w", n.List.Name, n.File, m.timedOut(err))
}

// Teardown runs DEL for the pod on network name of dir, as it was set up. It prefers
// the config the pod was set up with (libcni's cache), so a changed or removed config
// does not strand the pod's address; a netns that is already gone is fine.
func (m *Manager) Teardown(ctx context.Context, dir, name string, p Pod) error {
	rt := runtimeConf(p)
	if !nsfile.IsPinned(p.NetNS) {
		rt.NetNS = "" // gone (or a stale file): plugins release IPAM state without one
	}
	var list *libcni.NetworkConfigList
	if cached, _, err := m.cni.GetNetworkListCachedConfig(&libcni.NetworkConfigList{Name: name}, rt); err == nil && len(cached) > 0 {
		list, _ = libcni.NetworkConfFromBytes(cached)
	}
	if list == nil {
		n, err := m.Lookup(dir, name)
		if err != nil {
			return fmt.Errorf("tear down the network of pod %s: %w", p.SandboxID, err)
		}
		list = n.List
	}
	if rt.NetNS != "" {
		if res, err := m.cni.GetNetworkListCachedResult(list, rt); err == nil && res != nil {
			if err := restoreAddresses(rt.NetNS, res); err != nil {
				logrus.WithError(err).WithField("sandbox", p.SandboxID).Warn("restore the pod's addresses before CNI DEL")
			}
		}
	}
	dctx, cancel := m.bounded(ctx)
	defer cancel()
	if err := m.cni.DelNetworkList(dctx, list, rt); err != nil {
		return fmt.Errorf("CNI network %q: DEL: %w", list.Name, m.timedOut(err))
	}
	return nil
}

// TeardownUnrecorded runs DEL for every network libcni's cache says the pod sandboxID was
// attached to, from what the cache kept (config, interface, args): for a pod whose record
// was lost, so that its address and the plugins' rules are released. A netns that is no
// longer pinned is left out, as in Teardown.
func (m *Manager) TeardownUnrecorded(ctx context.Context, sandboxID string) error {
	atts, err := m.cni.GetCachedAttachments(sandboxID)
	if err != nil {
		return fmt.Errorf("cached CNI attachments of pod %s: %w", sandboxID, err)
	}
	var errs []error
	for _, a := range atts {
		list, err := libcni.NetworkConfFromBytes(a.Config)
		if err != nil {
			errs = append(errs, fmt.Errorf("cached CNI config of pod %s (%s): %w", sandboxID, a.Network, err))
			continue
		}
		rt := &libcni.RuntimeConf{ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName, Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs}
		if !nsfile.IsPinned(rt.NetNS) {
			rt.NetNS = ""
		}
		dctx, cancel := m.bounded(ctx)
		err = m.cni.DelNetworkList(dctx, list, rt)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("CNI network %q: DEL of pod %s: %w", list.Name, sandboxID, m.timedOut(err)))
		}
	}
	return errors.Join(errs...)
}

// restoreAddresses puts back, in the pod's namespace, the addresses ADD gave its
// interfaces. A runtime with a network stack of its own takes them off the host kernel's
// interface (gVisor's netstack answers for them instead), and plugins undo some of their
// work from the addresses they find: the bridge plugin's masquerade rules would stay.
func restoreAddresses(netnsPath string, result types.Result) error {
	r, err := current.NewResultFromResult(result)
	if err != nil {
		return err
	}
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	// Route sockets only: with no family named, netlink opens XFRM and netfilter sockets
	// too, and a kernel without XFRM_USER (the cgroup-v2 node's) refuses the handle.
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, ipc := range r.IPs {
		if ipc.Interface == nil || *ipc.Interface < 0 || *ipc.Interface >= len(r.Interfaces) {
			continue
		}
		iface := r.Interfaces[*ipc.Interface]
		if iface.Sandbox == "" {
			continue // the host side of a veth
		}
		link, err := h.LinkByName(iface.Name)
		if err != nil {
			continue // gone with the namespace's interfaces: nothing to restore
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: ipc.Address.IP, Mask: ipc.Address.Mask}}
		if err := h.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("%s %s: %w", iface.Name, addr.IPNet, err)
		}
	}
	return nil
}

// CacheDir is where libcni keeps results (for tests and cleanup checks).
func (m *Manager) CacheDir() string { return filepath.Clean(m.opts.CacheDir) }
