// Package nrihost hosts NRI, the Node Resource Interface (github.com/containerd/nri), as
// containerd and CRI-O do: it runs NRI's adaptation (the plugin socket and the plugins
// installed on the node), gives plugins every pod and container event in NRI's form,
// applies the adjustments and updates they answer, and counts the requests. The managers
// call it through interfaces of their own (sandbox.NRI, container.NRI); with NRI off they
// hold nil and nothing here runs.
package nrihost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/metrics"
	"github.com/rtshimd/rtshimd/internal/sandbox"
)

// Pods is what the host reads of the pod sandboxes.
type Pods interface {
	Get(id string) (*sandbox.Sandbox, error)
	All() []*sandbox.Sandbox
}

// Containers is what the host reads of the containers, and how plugins' updates reach
// them (the path of UpdateContainerResources, without NRI's own events).
type Containers interface {
	Get(id string) (*container.Container, error)
	All() []*container.Container
	ApplyResources(ctx context.Context, id string, res *specs.LinuxResources) error
}

// Host is the NRI host of one daemon.
type Host struct {
	cfg  config.NRI
	nri  *adaptation.Adaptation
	pods Pods
	ctrs Containers

	// mu orders the stop and remove events of containers and pods, which come from CRI
	// calls and from exits alike: a plugin hears of each stop once, and before the removal.
	mu         sync.Mutex
	stopped    map[string]bool // containers whose StopContainer plugins have had
	podStopped map[string]bool

	plugins atomic.Int64 // connected plugins, as the adaptation counts them
	// syncing counts plugins that connected and are in Synchronize, not yet counted in
	// plugins: the adaptation counts a plugin only after its sync, so an event meanwhile
	// must be made, not skipped.
	syncing atomic.Int64
	// starting: Start is under way, whose one Synchronize is that of the plugins in
	// plugin_path; preinstalled: there were some. The adaptation does not count those
	// until it relays an event, so with any of them installed every event is made.
	starting, preinstalled atomic.Bool
	seen                   seenPlugins
}

// New makes the host and NRI's adaptation; Start (after recovery, with the managers it
// reports on) opens it to plugins.
func New(cfg config.NRI, version string) (*Host, error) {
	h := &Host{cfg: cfg, stopped: map[string]bool{}, podStopped: map[string]bool{}}
	// The adaptation keeps its timeouts in package variables.
	adaptation.SetPluginRegistrationTimeout(cfg.RegistrationTimeout.Duration)
	adaptation.SetPluginRequestTimeout(cfg.RequestTimeout.Duration)
	opts := []adaptation.Option{
		adaptation.WithSocketPath(cfg.SocketPath),
		adaptation.WithPluginPath(cfg.PluginPath),
		adaptation.WithPluginConfigPath(cfg.PluginConfigPath),
		adaptation.WithMetrics(pluginMetrics{h}),
	}
	if cfg.DisableConnections {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	}
	a, err := adaptation.New("rtshimd", version, h.synchronize, h.updateFromPlugin, opts...)
	if err != nil {
		return nil, fmt.Errorf("nri: %w", err)
	}
	h.nri = a
	return h, nil
}

// Start runs the installed plugins and listens on the socket; each plugin is synchronized
// with every pod and container of pods and ctrs, and its updates applied to ctrs. The
// managers are made after the host, which they tell of their events: they are given here,
// where the host starts to serve, never before.
func (h *Host) Start(pods Pods, ctrs Containers) error {
	h.pods, h.ctrs = pods, ctrs
	// A plugin_path NRI would refuse fails the adaptation's Start below.
	installed, _ := Installed(h.cfg.PluginPath)
	h.preinstalled.Store(len(installed) > 0)
	h.starting.Store(true)
	err := h.nri.Start()
	h.starting.Store(false)
	if err != nil {
		return fmt.Errorf("nri: start: %w", err)
	}
	logrus.WithFields(logrus.Fields{"socket": h.socketShown(), "plugin_path": h.cfg.PluginPath}).Info("NRI started")
	return nil
}

// Stop closes the socket and stops the plugins.
func (h *Host) Stop() { h.nri.Stop() }

func (h *Host) socketShown() string {
	if h.cfg.DisableConnections {
		return ""
	}
	return h.cfg.SocketPath
}

// Installed lists the plugins in dir that NRI would start, by the adaptation's rules: every
// executable file that is not a directory, named "<two digits>-<name>". A name that breaks
// the rule is an error, as it is for the adaptation, which then refuses to start.
func Installed(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nri plugin_path %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || e.IsDir() || info.Mode()&0o111 == 0 {
			continue
		}
		if _, _, err := api.ParsePluginName(e.Name()); err != nil {
			return names, fmt.Errorf("nri plugin_path %s: %s: %w (rename it \"<two digits>-<name>\", remove it or clear its x bit)", dir, e.Name(), err)
		}
		names = append(names, e.Name())
	}
	return names, nil
}

// Info is NRI's part of Status verbose.
type Info struct {
	Enabled bool   `json:"enabled"`
	Socket  string `json:"socket,omitempty"` // "" when external plugins may not connect
	// PluginPath holds the plugins the daemon starts itself.
	PluginPath string `json:"plugin_path,omitempty"`
	// Plugins is how many plugins are connected, as the adaptation counts them: it drops a
	// plugin whose connection closed at the next event it relays.
	Plugins int64 `json:"plugins"`
	// Seen are the plugins synchronized or called since the daemon started, by name. The
	// adaptation says how many plugins are connected but not which one left, so a plugin
	// here may have gone since: Plugins is the live count.
	Seen []PluginSeen `json:"plugins_seen,omitempty"`
}

// PluginSeen is what the host heard of one plugin.
type PluginSeen struct {
	Name         string    `json:"name"` // "<idx>-<name>", as NRI names it
	Synchronized time.Time `json:"synchronized,omitzero"`
	LastCall     time.Time `json:"last_call"`
	Calls        uint64    `json:"calls"`
	Errors       uint64    `json:"errors"`
	LastError    string    `json:"last_error,omitempty"`
}

// Info reports the host's state; a nil host is NRI off.
func (h *Host) Info() Info {
	if h == nil {
		return Info{}
	}
	return Info{Enabled: true, Socket: h.socketShown(), PluginPath: h.cfg.PluginPath, Plugins: h.plugins.Load(), Seen: h.seen.list()}
}

// pluginMetrics receives the adaptation's plugin metrics: Prometheus' per-plugin series,
// the live count and what Status tells of each plugin.
type pluginMetrics struct{ h *Host }

func (p pluginMetrics) RecordPluginInvocation(plugin, op string, err error) {
	metrics.NRIPluginCalls.WithLabelValues(plugin, op).Inc()
	if err != nil {
		metrics.NRIPluginCallErrors.WithLabelValues(plugin, op).Inc()
	}
	p.h.seen.call(plugin, op, err, time.Now())
}

func (p pluginMetrics) RecordPluginLatency(plugin, op string, d time.Duration) {
	metrics.NRIPluginCallDuration.WithLabelValues(plugin, op).Observe(d.Seconds())
}

func (p pluginMetrics) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {}

func (p pluginMetrics) UpdatePluginCount(n int) {
	p.h.plugins.Store(int64(n))
	if n > 0 {
		// The plugins that synchronized are counted now. (The adaptation also calls this
		// after every event, with what it has: 0 says nothing of a sync under way.)
		p.h.syncing.Store(0)
	}
	metrics.NRIPlugins.Set(float64(n))
}

// seenPlugins keeps PluginSeen by name; a plugin is there from its first call
// (Synchronize, for every plugin that connects).
type seenPlugins struct {
	mu     sync.Mutex
	byName map[string]*PluginSeen
}

func (s *seenPlugins) call(name, op string, err error, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byName == nil {
		s.byName = map[string]*PluginSeen{}
	}
	p := s.byName[name]
	if p == nil {
		p = &PluginSeen{Name: name}
		s.byName[name] = p
	}
	p.Calls++
	p.LastCall = at
	if err != nil {
		p.Errors++
		p.LastError = fmt.Sprintf("%s: %v", op, err)
	} else if op == "Synchronize" {
		p.Synchronized = at
	}
}

func (s *seenPlugins) list() []PluginSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PluginSeen, 0, len(s.byName))
	for _, p := range s.byName {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// count records one relayed event in the Prometheus counters.
func count(event string, err error) {
	metrics.NRIRequests.WithLabelValues(event).Inc()
	if err != nil {
		metrics.NRIRequestErrors.WithLabelValues(event).Inc()
	}
}

// BlockSync holds off plugins that are connecting while a pod or container is being made,
// so that each either finds it in Synchronize or hears of its events.
func (h *Host) BlockSync() (unblock func()) {
	b := h.nri.BlockPluginSync()
	return b.Unblock
}

func (h *Host) pod(id string) *api.PodSandbox {
	if h.pods == nil {
		return nil
	}
	sb, err := h.pods.Get(id)
	if err != nil {
		return nil
	}
	return podSandbox(sb)
}

// quiet reports that no plugin is connected or synchronizing, and none is installed in
// plugin_path: an event would reach no one, so neither it nor its views (a container's is its bundle's spec, read and
// converted: a millisecond of the daemon's CPU per start) are made. A plugin that starts
// its Synchronize after this check finds the pod or container there, as one that
// connects just after an event is relayed does. Only the counter of events is kept.
func (h *Host) quiet(event string) bool {
	if h.plugins.Load() > 0 || h.syncing.Load() > 0 || h.preinstalled.Load() {
		return false
	}
	count(event, nil)
	return true
}

// ctr is a container's NRI form with the spec in its bundle.
func ctr(c *container.Container) *api.Container {
	spec, err := c.Spec()
	if err != nil {
		spec = nil
	}
	return nriContainer(c, spec)
}

// RunPodSandbox tells plugins of a pod that now exists; an error fails RunPodSandbox.
func (h *Host) RunPodSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	if h.quiet("RunPodSandbox") {
		return nil
	}
	err := h.nri.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: podSandbox(sb)})
	count("RunPodSandbox", err)
	if err != nil {
		return fmt.Errorf("nri: run pod sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// StopPodSandbox tells plugins, once, that a pod stopped. As containerd, a plugin's error
// is logged: it must not keep kubelet from stopping the pod.
func (h *Host) StopPodSandbox(ctx context.Context, sb *sandbox.Sandbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopPod(ctx, sb)
}

func (h *Host) stopPod(ctx context.Context, sb *sandbox.Sandbox) {
	if h.podStopped[sb.ID] {
		return
	}
	h.podStopped[sb.ID] = true
	if h.quiet("StopPodSandbox") {
		return
	}
	err := h.nri.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: podSandbox(sb)})
	count("StopPodSandbox", err)
	if err != nil {
		logrus.WithError(err).WithField("sandbox", sb.ID).Warn("nri: stop pod sandbox")
	}
}

// RemovePodSandbox tells plugins a pod is removed (or that a failed RunPodSandbox was
// undone).
func (h *Host) RemovePodSandbox(ctx context.Context, sb *sandbox.Sandbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.podStopped, sb.ID)
	if h.quiet("RemovePodSandbox") {
		return
	}
	err := h.nri.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: podSandbox(sb)})
	count("RemovePodSandbox", err)
	if err != nil {
		logrus.WithError(err).WithField("sandbox", sb.ID).Warn("nri: remove pod sandbox")
	}
}

// CreateContainer asks plugins about a container before the runtime creates it, and
// applies their adjustment to spec (and their updates to other containers). An error
// fails CreateContainer, which then undoes everything.
func (h *Host) CreateContainer(ctx context.Context, c *container.Container, spec *specs.Spec) (bool, error) {
	if h.quiet("CreateContainer") {
		return false, nil
	}
	resp, err := h.nri.CreateContainer(ctx, &api.CreateContainerRequest{Pod: h.pod(c.SandboxID), Container: nriContainer(c, spec)})
	count("CreateContainer", err)
	if err != nil {
		// A plugin refused it: as containerd, no removal follows.
		return false, fmt.Errorf("nri: create container %s: %w", c.ID, err)
	}
	// Accepted: plugins may have reserved resources for it, so any failure from here on
	// owes them RemoveContainer.
	if err := Adjust(spec, resp.GetAdjust()); err != nil {
		return true, fmt.Errorf("nri: create container %s: %w", c.ID, err)
	}
	if err := h.apply(ctx, resp.GetUpdate()); err != nil {
		return true, fmt.Errorf("nri: create container %s: %w", c.ID, err)
	}
	return true, nil
}

// PostCreateContainer tells plugins the runtime created the container.
func (h *Host) PostCreateContainer(ctx context.Context, c *container.Container) {
	if h.quiet("PostCreateContainer") {
		return
	}
	err := h.nri.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: h.pod(c.SandboxID), Container: ctr(c)})
	count("PostCreateContainer", err)
	if err != nil {
		logrus.WithError(err).WithField("container", c.ID).Warn("nri: post-create container")
	}
}

// StartContainer tells plugins a container is about to start; an error fails the start.
func (h *Host) StartContainer(ctx context.Context, c *container.Container) error {
	if h.quiet("StartContainer") {
		return nil
	}
	err := h.nri.StartContainer(ctx, &api.StartContainerRequest{Pod: h.pod(c.SandboxID), Container: ctr(c)})
	count("StartContainer", err)
	if err != nil {
		return fmt.Errorf("nri: start container %s: %w", c.ID, err)
	}
	return nil
}

// PostStartContainer tells plugins a container started.
func (h *Host) PostStartContainer(ctx context.Context, c *container.Container) {
	if h.quiet("PostStartContainer") {
		return
	}
	err := h.nri.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: h.pod(c.SandboxID), Container: ctr(c)})
	count("PostStartContainer", err)
	if err != nil {
		logrus.WithError(err).WithField("container", c.ID).Warn("nri: post-start container")
	}
}

// UpdateContainer asks plugins about new limits for a container (UpdateContainerResources)
// and returns the limits to apply: the request's, changed by what plugins set for this
// container. Their updates to other containers are applied here.
func (h *Host) UpdateContainer(ctx context.Context, c *container.Container, res *specs.LinuxResources) (*specs.LinuxResources, error) {
	if h.quiet("UpdateContainer") {
		return res, nil
	}
	resp, err := h.nri.UpdateContainer(ctx, &api.UpdateContainerRequest{
		Pod: h.pod(c.SandboxID), Container: ctr(c), LinuxResources: api.FromOCILinuxResources(res, nil),
	})
	count("UpdateContainer", err)
	if err != nil {
		return nil, fmt.Errorf("nri: update container %s: %w", c.ID, err)
	}
	var others []*api.ContainerUpdate
	for _, u := range resp.GetUpdate() {
		if u == nil {
			continue
		}
		if u.GetContainerId() == c.ID {
			res = mergeResources(res, u.GetLinux().GetResources())
			continue
		}
		others = append(others, u)
	}
	if err := h.apply(ctx, others); err != nil {
		return nil, fmt.Errorf("nri: update container %s: %w", c.ID, err)
	}
	return res, nil
}

// UpdatePodSandbox tells plugins a pod is being resized in place, with its new resources
// and overhead; an error fails UpdatePodSandboxResources.
func (h *Host) UpdatePodSandbox(ctx context.Context, sb *sandbox.Sandbox, overhead, resources *runtimeapi.LinuxContainerResources) error {
	if h.quiet("UpdatePodSandbox") {
		return nil
	}
	_, err := h.nri.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{
		Pod: podSandbox(sb), OverheadLinuxResources: criResources(overhead), LinuxResources: criResources(resources),
	})
	count("UpdatePodSandbox", err)
	if err != nil {
		return fmt.Errorf("nri: update pod sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// PostUpdatePodSandbox tells plugins a pod was resized.
func (h *Host) PostUpdatePodSandbox(ctx context.Context, sb *sandbox.Sandbox) {
	if h.quiet("PostUpdatePodSandbox") {
		return
	}
	err := h.nri.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: podSandbox(sb)})
	count("PostUpdatePodSandbox", err)
	if err != nil {
		logrus.WithError(err).WithField("sandbox", sb.ID).Warn("nri: post-update pod sandbox")
	}
}

// PostUpdateContainer tells plugins a container's limits changed.
func (h *Host) PostUpdateContainer(ctx context.Context, c *container.Container) {
	if h.quiet("PostUpdateContainer") {
		return
	}
	err := h.nri.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: h.pod(c.SandboxID), Container: ctr(c)})
	count("PostUpdateContainer", err)
	if err != nil {
		logrus.WithError(err).WithField("container", c.ID).Warn("nri: post-update container")
	}
}

// StopContainer tells plugins, once, that a container stopped (StopContainer, or its own
// exit); they may answer with updates to other containers (resources it freed).
func (h *Host) StopContainer(ctx context.Context, c *container.Container) {
	h.mu.Lock()
	updates := h.stopContainer(ctx, c)
	h.mu.Unlock()
	if err := h.apply(ctx, updates); err != nil {
		logrus.WithError(err).WithField("container", c.ID).Warn("nri: updates after stop container")
	}
}

func (h *Host) stopContainer(ctx context.Context, c *container.Container) []*api.ContainerUpdate {
	if h.stopped[c.ID] {
		return nil
	}
	h.stopped[c.ID] = true
	if h.quiet("StopContainer") {
		return nil
	}
	resp, err := h.nri.StopContainer(ctx, &api.StopContainerRequest{Pod: h.pod(c.SandboxID), Container: ctr(c)})
	count("StopContainer", err)
	if err != nil {
		logrus.WithError(err).WithField("container", c.ID).Warn("nri: stop container")
		return nil
	}
	return resp.GetUpdate()
}

// RemoveContainer tells plugins a container is removed (or that a failed create was
// undone), stopped first if they have not heard.
func (h *Host) RemoveContainer(ctx context.Context, c *container.Container) {
	h.mu.Lock()
	updates := h.stopContainer(ctx, c)
	delete(h.stopped, c.ID)
	if !h.quiet("RemoveContainer") {
		err := h.nri.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: h.pod(c.SandboxID), Container: ctr(c)})
		count("RemoveContainer", err)
		if err != nil {
			logrus.WithError(err).WithField("container", c.ID).Warn("nri: remove container")
		}
	}
	h.mu.Unlock()
	if err := h.apply(ctx, updates); err != nil {
		logrus.WithError(err).WithField("container", c.ID).Warn("nri: updates after stop container")
	}
}

// synchronize gives a plugin that registers every pod and container there is.
func (h *Host) synchronize(ctx context.Context, cb adaptation.SyncCB) (err error) {
	if !h.starting.Load() {
		h.syncing.Add(1)
		defer func() {
			if err != nil { // the adaptation drops the plugin: it will not be counted
				h.syncing.Add(-1)
			}
		}()
	}
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	if h.pods != nil {
		for _, sb := range h.pods.All() {
			pods = append(pods, podSandbox(sb))
		}
	}
	if h.ctrs != nil {
		for _, c := range h.ctrs.All() {
			ctrs = append(ctrs, ctr(c))
		}
	}
	updates, err := cb(ctx, pods, ctrs)
	count("Synchronize", err)
	if err != nil {
		return fmt.Errorf("nri: synchronize: %w", err)
	}
	if err := h.apply(ctx, updates); err != nil {
		logrus.WithError(err).Warn("nri: updates after synchronize")
	}
	return nil
}

// updateFromPlugin applies the updates a plugin asks for on its own and returns those that
// failed. (Evictions, which NRI's protocol has, are not passed on by this adaptation.)
func (h *Host) updateFromPlugin(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	var failed []*api.ContainerUpdate
	for _, u := range updates {
		err := h.update(ctx, u)
		count("UpdateContainers", err)
		if err != nil {
			logrus.WithError(err).WithField("container", u.GetContainerId()).Warn("nri: plugin's container update")
			if !u.GetIgnoreFailure() {
				failed = append(failed, u)
			}
		}
	}
	return failed, nil
}

// apply applies plugins' updates to containers; a failure counts unless the update says
// to ignore it.
func (h *Host) apply(ctx context.Context, updates []*api.ContainerUpdate) error {
	var errs []error
	for _, u := range updates {
		if u == nil {
			continue
		}
		if err := h.update(ctx, u); err != nil && !u.GetIgnoreFailure() {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (h *Host) update(ctx context.Context, u *api.ContainerUpdate) error {
	if h.ctrs == nil {
		return fmt.Errorf("container %s: no containers yet", u.GetContainerId())
	}
	c, err := h.ctrs.Get(u.GetContainerId())
	if err != nil {
		return fmt.Errorf("update container %s: %w", u.GetContainerId(), err)
	}
	var cur *specs.LinuxResources
	if raw := c.Status().Resources; len(raw) > 0 {
		cur = &specs.LinuxResources{}
		if err := json.Unmarshal(raw, cur); err != nil {
			cur = nil
		}
	}
	if err := h.ctrs.ApplyResources(ctx, c.ID, mergeResources(cur, u.GetLinux().GetResources())); err != nil {
		return fmt.Errorf("update container %s: %w", c.ID, err)
	}
	return nil
}
