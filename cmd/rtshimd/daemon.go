package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/boot"
	"github.com/rtshimd/rtshimd/internal/cdidevices"
	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/cri"
	"github.com/rtshimd/rtshimd/internal/events"
	"github.com/rtshimd/rtshimd/internal/failpoint"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/lsm"
	"github.com/rtshimd/rtshimd/internal/metrics"
	"github.com/rtshimd/rtshimd/internal/network"
	"github.com/rtshimd/rtshimd/internal/nodelabels"
	"github.com/rtshimd/rtshimd/internal/nrihost"
	"github.com/rtshimd/rtshimd/internal/nsfile"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/pause"
	"github.com/rtshimd/rtshimd/internal/podcidr"
	"github.com/rtshimd/rtshimd/internal/pprofsock"
	"github.com/rtshimd/rtshimd/internal/protocache"
	"github.com/rtshimd/rtshimd/internal/reload"
	"github.com/rtshimd/rtshimd/internal/rootlock"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/sdnotify"
	"github.com/rtshimd/rtshimd/internal/stats"
	"github.com/rtshimd/rtshimd/internal/store"
	"github.com/rtshimd/rtshimd/internal/stream"
	"github.com/rtshimd/rtshimd/internal/tracing"
)

type daemon struct {
	cfg        *config.Config
	table      *handlers.Live
	reloader   *reload.Reloader
	runtimes   *handlers.Runtimes
	sandboxes  *sandbox.Manager
	images     *image.Stores
	containers *container.Manager
	stats      *stats.Service
	network    *network.Manager
	streaming  *stream.Server
	events     *events.Bus
	podCIDR    *podcidr.Store
	nri        *nrihost.Host // nil when [nri] enable = false
	home       *nsfile.Home  // where pods' namespaces are pinned; nil: on the node
	metrics    *http.Server
	pprof      *pprofsock.Server
	tracer     *tracing.Tracer    // nil when [tracing] enabled = false
	nodeLabels *nodelabels.Syncer // nil when [node] kubeconfig is empty
	lock       *rootlock.Lock     // this daemon's roots, held for its life
	// logLevelFlag is --log-level, which wins over log_level in any version of the file.
	logLevelFlag string
	hup          <-chan os.Signal // SIGHUP, caught from the start
}

// Running reports what runs now, for the metrics endpoint.
func (d *daemon) Running() (pods, containers map[string]int, monitors int) {
	pods, sandboxContainers := d.sandboxes.ReadyByHandler()
	containers = d.containers.RunningByHandler()
	monitors = sandboxContainers
	for _, n := range containers {
		monitors += n
	}
	return pods, containers, monitors
}

// monitorPath is the monitor binary the config names, or by default the rtshim-monitor
// beside rtshimd. Containers whose monitor was another binary (an earlier release's, or
// monitor_path changed across a restart) are recovered all the same: the daemon speaks to
// a running monitor only through its files and socket (docs/monitor-protocol.md).
func monitorPath(cfg *config.Config) string {
	return chooseMonitor(cfg.MonitorPath, besideSelf)
}

// chooseMonitor is monitorPath with the helper lookup given (beside: a binary's path).
func chooseMonitor(configured string, beside func(string) string) string {
	if configured != "" {
		return configured
	}
	return beside(defaultMonitor)
}

const defaultMonitor = "rtshim-monitor"

// executable: a regular file someone may run.
func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// checkMonitor fails unless the monitor monitorPath chooses may be run: a daemon that
// cannot start one would fail every container.
func checkMonitor(cfg *config.Config) error {
	mon := monitorPath(cfg)
	switch {
	case executable(mon):
		return nil
	case cfg.MonitorPath != "":
		return fmt.Errorf("monitor_path %q is missing or not executable: name an installed %s, or leave monitor_path empty for the one beside rtshimd", mon, defaultMonitor)
	default:
		return fmt.Errorf("monitor_path is empty and %s is not an executable in %s: `make install` puts it there, or set monitor_path", defaultMonitor, filepath.Dir(mon))
	}
}

// discover prepares the pause rootfs, makes each handler's runtime and runs handler
// discovery; the probe settings serve later reloads.
func discover(ctx context.Context, cfg *config.Config, runRoot, pauseDir, probeDir string) (*handlers.Table, *handlers.Runtimes, handlers.Probe, error) {
	var probe handlers.Probe
	pausePath := cfg.PausePath
	if pausePath == "" {
		pausePath = besideSelf("rtshim-pause")
	}
	rootfs, err := pause.Prepare(pauseDir, pausePath)
	if err != nil {
		return nil, nil, probe, err
	}
	if err := os.MkdirAll(probeDir, 0o700); err != nil {
		return nil, nil, probe, fmt.Errorf("create probe dir: %w", err)
	}
	probe = handlers.Probe{Rootfs: rootfs, Dir: probeDir, CgroupDriver: cfg.CgroupDriver}
	rts := handlers.NewRuntimes(handlers.Env{MonitorPath: monitorPath(cfg), CgroupDriver: cfg.CgroupDriver, RunRoot: runRoot,
		PlainStart: !cfg.Mechanisms.ExecFifoStart})
	protocache.Plain(!cfg.Mechanisms.KeptListEncoding)
	table, err := handlers.Discover(ctx, cfg, rts, probe)
	if err != nil {
		rts.Close()
		return nil, nil, probe, err
	}
	return table, rts, probe, nil
}

func newDaemon(ctx context.Context, cfg *config.Config) (*daemon, error) {
	// First: nothing of a running daemon's is touched by a second one on its roots.
	lock, err := rootlock.Acquire(cfg.StateRoot, cfg.RunRoot)
	if err != nil {
		return nil, fmt.Errorf("another rtshimd runs on these roots: %w", err)
	}
	d, err := newLockedDaemon(ctx, cfg)
	if err != nil {
		lock.Release()
		return nil, err
	}
	d.lock = lock
	return d, nil
}

func newLockedDaemon(ctx context.Context, cfg *config.Config) (*daemon, error) {
	// Before discovery, whose probes start monitors and which leaves runtimes to close.
	if err := checkMonitor(cfg); err != nil {
		return nil, err
	}
	for _, dir := range []string{cfg.StateRoot, cfg.RunRoot} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
		// As containerd's roots: searchable by others, because the root of a pod in a user
		// namespace is another user on the node and runc reaches the rootfs as that user.
		if err := os.Chmod(dir, 0o711); err != nil {
			return nil, fmt.Errorf("chmod %s: %w", dir, err)
		}
	}
	first, rts, probe, err := discover(ctx, cfg, cfg.RunRoot, filepath.Join(cfg.StateRoot, "pause"), filepath.Join(cfg.RunRoot, "probe"))
	if err != nil {
		return nil, err
	}
	table := handlers.NewLive(ctx, first, rts, probe)
	rootfs := probe.Rootfs
	st, err := store.New(filepath.Join(cfg.StateRoot, "sandboxes"))
	if err != nil {
		return nil, err
	}
	netw := network.New(network.Options{ConfDir: cfg.Network.ConfDir, BinDirs: cfg.Network.BinDirs, CacheDir: cfg.Network.CacheDir, Timeout: cfg.Network.CNITimeout()})
	for _, h := range first.List() {
		if h.Config.CNIConfDir != "" {
			netw.AddDir(h.Config.CNIConfDir)
		}
	}
	netw.Watch(ctx, 2*time.Second)
	bus := events.NewBus()
	// NRI is made first (the managers relay events to it) and opened to plugins after
	// recovery, so that Synchronize finds every pod and container.
	var nri *nrihost.Host
	var podNRI sandbox.NRI
	var ctrNRI container.NRI
	if cfg.NRI.Enable {
		if nri, err = nrihost.New(cfg.NRI, cri.Version); err != nil {
			return nil, err
		}
		podNRI, ctrNRI = nri, nri
	}
	host := lsm.Detect()
	host.StrictSELinux = cfg.StrictSELinux
	// Before the sandboxes' recovery, which checks their pins.
	home, err := nsfile.OpenHome(cfg.RunRoot)
	switch {
	case errors.Is(err, nsfile.ErrHomeHeld):
		// Its pods' namespaces are in it: going on without it would lose them.
		return nil, err
	case err != nil:
		logrus.WithError(err).Warn("pods' namespaces are pinned in the node's mount table, where each runc reads them")
		home = nil
	}
	// The containers' index, before either manager: the container manager lists its
	// containers there, and the pods' events carry their statuses from it.
	ctrIndex := container.NewIndex()
	mgr, err := sandbox.NewManager(sandbox.Options{
		Node:           sandbox.HostNode{Home: home, PinOnNode: !cfg.Mechanisms.PinHome},
		LSM:            host,
		Handlers:       table,
		Store:          st,
		RunDir:         filepath.Join(cfg.RunRoot, "sandboxes"),
		Runtimes:       rts,
		PauseRootfs:    rootfs,
		CgroupDriver:   cfg.CgroupDriver,
		OOMScoreAdjMin: sandbox.ReadOOMScoreAdj(),
		Network:        netw,
		Events:         bus,
		NRI:            podNRI,
		Containers:     ctrIndex,
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Recover(ctx); err != nil {
		return nil, fmt.Errorf("recover sandboxes: %w", err)
	}
	// Each row's image store is chosen at start (a reload's change applies at restart);
	// a row a reload adds chooses at its first use.
	separate := map[string]bool{}
	for name, hc := range cfg.Handlers {
		separate[name] = hc.ImageStore == config.ImageStoreSeparate
	}
	images, err := image.NewStores(image.Options{StateRoot: cfg.StateRoot, RunRoot: cfg.RunRoot, Config: cfg.Image},
		func(h string) (string, bool, error) { return table.Table().ImageStore(h) }, separate)
	if err != nil {
		mgr.Close()
		return nil, err
	}
	rebooted, bootedAt, err := boot.Since(cfg.StateRoot)
	if err != nil {
		logrus.WithError(err).Warn("could not tell whether the node restarted; each container is checked as it is recovered")
	}
	var rebootedAt time.Time
	if rebooted {
		rebootedAt = bootedAt
		logrus.WithField("booted_at", bootedAt).Info("the node restarted since the records were written: their containers ended with it")
	}
	cstore, err := store.New(filepath.Join(cfg.StateRoot, "containers"))
	if err != nil {
		return nil, err
	}
	ckptKey, trustedKeys, err := checkpointKeys(cfg)
	if err != nil {
		return nil, err
	}
	ctrs, err := container.NewManager(container.Options{
		LSM:               host,
		Store:             cstore,
		RunDir:            filepath.Join(cfg.RunRoot, "containers"),
		CheckpointDir:     filepath.Join(cfg.StateRoot, "checkpoints"),
		RestoreDir:        filepath.Join(cfg.StateRoot, "restores"),
		Rows:              table,
		MaxCheckpointSize: cfg.Checkpoints.MaxSizeBytes,
		CheckpointKey:     ckptKey,
		RequireSignature:  cfg.Checkpoints.RequireSignature,
		TrustedKeys:       trustedKeys,
		Runtimes:          rts,
		Images:            images,
		Sandboxes:         mgr,
		Index:             ctrIndex,
		CgroupDriver:      cfg.CgroupDriver,
		OOMScoreAdjMin:    sandbox.ReadOOMScoreAdj(),
		Capabilities:      oci.GrantableCapabilities(),
		Events:            bus,
		CDI:               cdidevices.New(cfg.CDI.SpecDirs),
		NRI:               ctrNRI,
		RebootedAt:        rebootedAt,
	})
	if err != nil {
		return nil, err
	}
	statsSvc := stats.New(stats.Options{Containers: ctrs, Pods: mgr, Images: images, CgroupDriver: cfg.CgroupDriver,
		Period: cfg.Stats.CollectionPeriod.Duration})
	if err := ctrs.Recover(ctx); err != nil {
		return nil, fmt.Errorf("recover containers: %w", err)
	}
	// After the containers: those of a pod whose record was quarantined went as orphans,
	// through the pod's supervisor, which must still run for that.
	mgr.StopQuarantined(ctx)
	// Stops an operator asked for while no daemon ran.
	stopRequested(ctx, mgr, ctrs)
	if home != nil {
		// Only what this daemon holds nothing of: pods kept without a record, and records
		// left for a later rtshimd, keep their pins and tmpfs.
		home.Collect(mgr.Holds)
	}
	logrus.WithField("sandboxes", mgr.Count()).Info("state recovered")
	if err := boot.Record(cfg.StateRoot); err != nil {
		logrus.WithError(err).Warn("the next start will not know whether the node restarted")
	}
	if nri != nil {
		if err := nri.Start(mgr, ctrs); err != nil {
			nri.Stop() // plugins it launched before its socket failed
			return nil, err
		}
	}
	srv, err := stream.New(cfg.Streaming.Addr, cfg.Streaming.TLSCertFile, cfg.Streaming.TLSKeyFile, ctrs, mgr)
	if err != nil {
		if nri != nil {
			nri.Stop()
		}
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	cidr, err := podcidr.Open(filepath.Join(cfg.StateRoot, "pod-cidr.json"))
	if err != nil {
		logrus.WithError(err).Warn("the kept pod CIDR is unusable; none until kubelet sends it again")
	}
	d := &daemon{cfg: cfg, table: table, runtimes: rts, sandboxes: mgr, images: images, containers: ctrs, stats: statsSvc, network: netw, streaming: srv, events: bus, podCIDR: cidr, nri: nri, home: home}
	d.reloader = reload.New(cfg, d.apply)
	if d.metrics, err = metrics.Serve(cfg.Metrics.Addr, d); err != nil {
		if nri != nil {
			nri.Stop()
		}
		return nil, err
	}
	if d.pprof, err = pprofsock.Serve(cfg.Debug.PprofSocket); err != nil {
		if d.metrics != nil {
			_ = d.metrics.Close()
		}
		if nri != nil {
			nri.Stop()
		}
		return nil, err
	}
	d.nodeLabels, err = nodelabels.New(cfg.Node.Kubeconfig, cfg.Node.Name, func() []*handlers.Handler { return table.Table().List() })
	if err == nil {
		d.tracer, err = tracing.New(context.Background(), cfg.Tracing, cri.Version)
	}
	if err != nil {
		// What started above stops again; the syncer and the exporter hold nothing yet.
		if d.metrics != nil {
			_ = d.metrics.Close()
		}
		if d.pprof != nil {
			_ = d.pprof.Close()
		}
		if nri != nil {
			nri.Stop()
		}
		return nil, err
	}
	return d, nil
}

// apply serves cfg, which a reload read: the handler table (rows added, changed, removed;
// new rows probed in the background), the default handler, the handlers' CNI dirs, the
// registries, the log level and the stats collection period. The registries are checked
// before anything is swapped, so a refused reload changes nothing.
func (d *daemon) apply(ctx context.Context, old, cfg *config.Config) (any, []string, error) {
	restart := config.RestartNeeded(old, cfg)
	next, err := d.table.Prepare(cfg)
	if err != nil {
		return nil, nil, err
	}
	oi, ni := old.Image, cfg.Image
	if !reflect.DeepEqual(oi.Registries, ni.Registries) || oi.RegistriesConf != ni.RegistriesConf ||
		oi.SignaturePolicy != ni.SignaturePolicy || oi.SignaturePolicyDir != ni.SignaturePolicyDir || oi.RegistriesD != ni.RegistriesD {
		if err := d.images.SetRegistries(old.Image, cfg.Image); err != nil {
			return nil, nil, fmt.Errorf("%s: image registries: %w", cfg.Path, err)
		}
		if err := failpoint.Fail("reload/registries-set"); err != nil {
			// Refused means nothing applied: the registries served go back to the old.
			if rerr := d.images.SetRegistries(cfg.Image, old.Image); rerr != nil {
				logrus.WithError(rerr).Error("config reload refused, but the previous image registries could not be set back")
			}
			return nil, nil, err
		}
	}
	for _, hc := range cfg.Handlers {
		if hc.CNIConfDir != "" {
			d.network.AddDir(hc.CNIConfDir)
		}
	}
	if lvl, err := logrus.ParseLevel(cfg.LogLevel); err == nil && d.logLevelFlag == "" && cfg.LogLevel != old.LogLevel {
		logrus.SetLevel(lvl)
	}
	if p := cfg.Stats.CollectionPeriod.Duration; p != old.Stats.CollectionPeriod.Duration {
		d.stats.SetPeriod(p)
		logrus.WithField("collection_period", p.String()).Info("stats collection period changed")
	}
	d.table.Publish(next)
	return next.Change(), restart, nil
}

func (d *daemon) serve(ctx context.Context) error {
	go d.reloader.Run(ctx, d.hup)
	go watchStopRequests(ctx, d.sandboxes, d.containers)
	if d.nodeLabels != nil {
		// A row turning ready (its probe) or gone (a reload) shows within the period.
		go d.nodeLabels.Run(ctx, 2*time.Second, 5*time.Minute)
	}
	srv := &cri.Server{Config: d.cfg, Reload: d.reloader, Handlers: d.table, Sandboxes: d.sandboxes, Images: d.images, Containers: d.containers, Stats: d.stats, Network: d.network, Streaming: d.streaming, Events: d.events, PodCIDR: d.podCIDR, NRI: d.nri, Tracer: d.tracer, NodeLabels: d.nodeLabels}
	return srv.Serve(ctx, func() {
		if err := sdnotify.Notify("READY=1"); err != nil {
			logrus.WithError(err).Warn("sd_notify READY")
		}
	})
}

func (d *daemon) close() {
	_ = sdnotify.Notify("STOPPING=1")
	_ = d.streaming.Stop()
	if d.metrics != nil {
		_ = d.metrics.Close()
	}
	if d.pprof != nil {
		_ = d.pprof.Close()
	}
	if d.tracer != nil {
		// The last calls' spans go out, or are dropped after a moment: a collector
		// that is down must not hold the stop.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := d.tracer.Shutdown(ctx); err != nil {
			logrus.WithError(err).Warn("send the last trace spans")
		}
		cancel()
	}
	if d.nri != nil {
		d.nri.Stop()
	}
	d.stats.Close()
	d.containers.Close()
	d.sandboxes.Close()
	d.table.Wait()
	d.runtimes.Close()
	d.images.Close()
	if d.home != nil {
		// Last, and it waits for a pin under way: a handler the server's stop did not
		// wait for may still be starting a pod.
		d.home.Close()
	}
	d.lock.Release()
	logrus.Info("rtshimd stopped; pods keep running")
}
