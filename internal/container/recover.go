package container

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/monitor"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Recover loads every stored container and reconciles it: running ones are watched again
// (their monitors kept them and their logs going), exits that happened while the daemon
// was down are recorded with their real code and time, and half-created containers are
// undone. Sandboxes must be recovered first.
func (m *Manager) Recover(ctx context.Context) error {
	known, err := m.index.Recover(ctx, registry.Recovery[*Container]{
		Store: m.opts.Store, RunDir: m.opts.RunDir, Field: "container", Object: "container",
		Unwritten: func(id string, log *logrus.Entry) {
			// Nothing was created.
			log.Info("container record without metadata (created when the daemon stopped); removing what it may hold")
			if err := m.removeLeftovers(id); err != nil {
				log.WithError(err).Error("container record kept: what it holds could not be removed")
				return
			}
			_ = m.opts.Store.Delete(id)
		},
		Decode: m.decodeRecord,
		Leave: func(id string, err error) bool {
			if !errors.Is(err, handlers.ErrNoRuntime) {
				return false
			}
			logrus.WithError(err).WithField("container", id).Error("container record left as it is")
			return true
		},
		Settle:      m.settle,
		State:       func(c *Container) string { return c.Status().State },
		Quarantined: m.settleQuarantined,
		// One a runtime still runs is kept; only what none runs is removed.
		Unrecorded: m.recoverUnrecorded,
	})
	if err != nil {
		return err
	}
	m.sweepRestores(known)
	// Image volumes whose container left neither record nor directory.
	owners, err := m.opts.Images.VolumeOwners()
	if err != nil {
		logrus.WithError(err).Warn("list image volumes")
	}
	for _, o := range owners {
		if !known[o] {
			logrus.WithField("container", o).Info("image volumes of an unknown container; removing them")
			if err := m.opts.Images.RemoveVolumes(o); err != nil {
				logrus.WithError(err).WithField("container", o).Error("remove image volumes of an unknown container")
			}
		}
	}
	return nil
}

// settle reconciles a recovered container with the node, or cleans it up; a container of
// a pod kept without a record is set aside with it.
func (m *Manager) settle(c *Container, log *logrus.Entry) (list bool, quarantine string) {
	if c.Status().State == StateCreating {
		log.Info("container was half-created when the daemon stopped; cleaning up")
		if err := m.cleanup(c); err != nil {
			log.WithError(err).Error("clean up half-created container")
		}
		return false, ""
	}
	if st := c.Status(); st.State == StateUnknown && st.Reason == reasonCleanupFailed {
		// Kept by an earlier daemon because its cleanup failed: try again now, and keep
		// retrying while it fails.
		if err := m.cleanup(c); err == nil {
			log.Info("cleanup of a container kept for it done")
			return false, ""
		}
		c.exited.Mark()
		m.index.Add(c)
		m.retryCleanup(c)
		return false, ""
	}
	if m.opts.Sandboxes.Kept(c.SandboxID) {
		// Its pod runs on without a usable record: the container is kept with it.
		return false, fmt.Sprintf("its pod %s has no usable record and is kept", c.SandboxID)
	}
	if _, err := m.opts.Sandboxes.Get(c.SandboxID); err != nil {
		log.WithField("sandbox", c.SandboxID).Warn("container of a sandbox that no longer exists; removing it")
		if err := m.cleanup(c); err != nil {
			log.WithError(err).Error("clean up orphan container")
		}
		return false, ""
	}
	m.reconcile(c)
	return true, ""
}

// settleQuarantined settles a container whose record was set aside as bad (named in the
// log and in Status verbose). One a runtime still runs is kept running with its rootfs and
// files, for an operator to stop or adopt; one that no runtime runs is deleted there and
// its files removed.
func (m *Manager) settleQuarantined(ctx context.Context, id, path string, log *logrus.Entry) {
	if m.keepIfRunning(ctx, id, path, log) {
		return
	}
	log.Error("bad container record quarantined; its container does not run and is cleaned up")
	m.stopUnrecorded(ctx, id, log)
}

// recoverUnrecorded settles a container that has no record at all: kept, with its files,
// while a runtime runs it (or cannot say); otherwise deleted in the runtimes that still
// hold its state, and its files removed.
func (m *Manager) recoverUnrecorded(ctx context.Context, id string) {
	log := logrus.WithField("container", id)
	if path := registry.KeptEntry(m.opts.Store, id); path != "" {
		m.keep(id, path)
		log.WithField("quarantined_at", path).Warn("container without a record still kept; " + store.KeepHint(id))
		return
	}
	if m.keepIfRunning(ctx, id, "", log) {
		return
	}
	log.Info("container directory without a record, whose container no runtime runs; removing it")
	m.stopUnrecorded(ctx, id, log)
}

// keepIfRunning keeps container id, which has no usable record, when a runtime still
// runs it or cannot say: marked kept in its quarantine entry at path (made when path is
// empty) and left alone. It says whether it kept it.
func (m *Manager) keepIfRunning(ctx context.Context, id, path string, log *logrus.Entry) bool {
	task := m.unrecordedTask(id)
	sctx, cancel := context.WithTimeout(ctx, kind.DefaultTimeout)
	defer cancel()
	found, ferr := m.opts.Sandboxes.FindUnrecorded(sctx, task)
	why := "it runs in " + strings.Join(found, ", ")
	if ferr != nil {
		why = "a runtime could not say whether it runs: " + ferr.Error()
	} else if len(found) == 0 {
		if why = m.releaseMonitor(ctx, id); why == "" {
			return false
		}
	}
	var err error
	if path == "" {
		path, err = m.opts.Store.SetAside(id, "record lost (a damaged record journal, or none written); the container still ran at recovery: "+why)
	}
	if err == nil {
		err = store.MarkKept(path, true)
	}
	if err != nil {
		log.WithError(err).Error("container without a usable record still runs; its quarantine entry could not be written, it is kept as it is")
	}
	m.keep(id, path)
	log.WithFields(logrus.Fields{"quarantined_at": path, "why": why, "sandbox": task.PodID}).Error("container without a usable record still runs: kept, not stopped, its files kept; " + store.KeepHint(id))
	return true
}

// keep keeps container id, which has no usable record, under its quarantine entry path,
// and reserves the name its bundle gives it, for every attempt, as kubelet would make it
// again: that of its pod where the pod is kept too (kubelet runs the pod again), else its
// own in its listed pod (kubelet creates it again there). A second copy would run beside
// it, on the same volumes.
func (m *Manager) keep(id, path string) {
	m.index.Keep(id, path)
	spec, err := oci.ReadBundle(filepath.Join(m.opts.RunDir, id))
	if err != nil {
		return
	}
	a := spec.Annotations
	pod := a[oci.AnnotationSandboxID]
	if pod == "" {
		return
	}
	if m.opts.Sandboxes.Kept(pod) {
		if a[oci.AnnotationSandboxName] != "" {
			m.opts.Sandboxes.NameKept(pod, &runtimeapi.PodSandboxMetadata{Name: a[oci.AnnotationSandboxName], Namespace: a[oci.AnnotationSandboxNS], Uid: a[oci.AnnotationSandboxUID]})
		}
		return
	}
	if sb, err := m.opts.Sandboxes.Get(pod); err == nil && a[oci.AnnotationContainerName] != "" {
		// Family of CreateContainer's name, <name>_<pod's name>_<attempt>.
		m.index.KeepName(id, a[oci.AnnotationContainerName]+"_"+sb.Name)
	}
}

// Unready says why the node must take no pods now, "" when it may: the container records'
// journal could not be read, and containers that still ran are kept without their
// records; kubelet, which sees none of them, would start each again beside it.
func (m *Manager) Unready() string {
	if !m.opts.Store.Unreadable() {
		return ""
	}
	if n := len(m.index.KeptIDs()); n > 0 {
		return fmt.Sprintf("%d containers still run, kept, whose records were lost with the unreadable container record journal (%s)", n, m.opts.Store.Damage())
	}
	return ""
}

// unrecordedTask is the task of container id as its bundle names it.
func (m *Manager) unrecordedTask(id string) kind.Task {
	dir := filepath.Join(m.opts.RunDir, id)
	task := kind.Task{ID: id, Dir: dir}
	if spec, err := oci.ReadBundle(dir); err == nil {
		task.PodID = spec.Annotations[oci.AnnotationSandboxID]
	}
	if task.PodID != "" {
		task.PodDir = m.opts.Sandboxes.BundleOf(task.PodID)
	}
	return task
}

// stopUnrecorded ends container id, which has no usable record, wherever a runtime still
// knows it, then removes its files; they are kept when it could not be stopped. It says
// whether it was stopped.
func (m *Manager) stopUnrecorded(ctx context.Context, id string, log *logrus.Entry) bool {
	task := m.unrecordedTask(id)
	sctx, cancel := context.WithTimeout(ctx, 2*kind.DefaultTimeout)
	defer cancel()
	found, err := m.opts.Sandboxes.StopUnrecorded(sctx, task)
	if err != nil {
		log.WithError(err).Error("container without a usable record could not be stopped; its rootfs and files are kept")
		return false
	}
	if len(found) > 0 {
		log.WithFields(logrus.Fields{"handlers": found, "sandbox": task.PodID}).Warn("container without a usable record stopped")
	}
	if why := m.releaseMonitor(ctx, id); why != "" {
		log.WithField("why", why).Error("container without a usable record could not be stopped; its rootfs and files are kept")
		return false
	}
	if err := m.removeLeftovers(id); err != nil {
		log.WithError(err).Error("files of a container without a usable record could not be removed")
	}
	return true
}

// releaseMonitor ends the monitor that still serves in the run directory of container
// id, which has no usable record, once no runtime knows its task: its container never
// started (a restore waiting for the start only the lost record could send), and with
// its directory gone it could never be reached again. It returns "" when no monitor
// serves there or the one that did has ended; otherwise why the directory must be kept:
// the monitor refuses (its container started, in no runtime a ready row knows) or stays.
func (m *Manager) releaseMonitor(ctx context.Context, id string) string {
	dir := filepath.Join(m.opts.RunDir, id)
	// monitor.json: a task's monitor; a shim's logger (logger.json) ends with the output.
	if _, err := os.Lstat(filepath.Join(dir, monitor.ConfigFile)); err != nil || !monitor.Alive(dir) {
		return ""
	}
	if err := monitor.Command(ctx, dir, monitor.CmdExit); err != nil {
		if _, xerr := monitor.ReadExit(dir); xerr == nil {
			return "" // its init ended: the monitor ends on its own
		}
		return fmt.Sprintf("its monitor still serves in %s and refuses to end (%v): its container started, and no ready runtime handler knows it", dir, err)
	}
	wctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	_, _, _ = monitor.Watch(wctx, dir) // returns when the monitor has gone
	if monitor.Alive(dir) {
		return fmt.Sprintf("its monitor in %s was told to end and still serves", dir)
	}
	return ""
}

// StopRequested stops the kept containers an operator asked to stop (`rtshimd
// quarantine stop`), and those of the pods in pods, whose stop was asked: each is ended
// in its runtime and its files removed. It returns the containers stopped.
func (m *Manager) StopRequested(ctx context.Context, pods []string) []string {
	return m.index.StopKept(m.opts.Store, "container", func(e store.Quarantined) bool {
		// The pod's ID is read from the bundle only when a pod's stop is asked: the daemon
		// looks for requests every 2 s, and most have none.
		return e.StopRequested || (len(pods) > 0 && slices.Contains(pods, m.unrecordedTask(e.ID).PodID))
	}, func(id string, log *logrus.Entry) bool {
		if !m.stopUnrecorded(ctx, id, log) {
			return false
		}
		log.Warn("kept container stopped as asked")
		return true
	})
}

// anyKept says whether some container is kept without a usable record.
func (m *Manager) anyKept() bool {
	return len(m.index.KeptIDs()) > 0
}

// Damage says what was wrong with the container records' journal at start, if anything.
func (m *Manager) Damage() string { return m.opts.Store.Damage() }

// Quarantined lists the container records set aside as unreadable.
func (m *Manager) Quarantined() []store.Quarantined {
	return registry.Quarantined(m.opts.Store, "container")
}

// removeLeftovers removes what a container without a usable record may hold: the mounts
// in its directory first (a pod user namespace's rootfs bind and idmapped volumes: a
// removal must never reach through them into the volume's data), then its image volumes,
// its rootfs, the checkpoint unpacked for its restore and the directory.
func (m *Manager) removeLeftovers(id string) error {
	dir := filepath.Join(m.opts.RunDir, id)
	if err := unmountUsernsMounts(dir); err != nil {
		return err
	}
	_ = m.opts.Images.RemoveVolumes(id)
	_ = m.opts.Images.RemoveRootfs(id)
	if m.opts.RestoreDir != "" && store.ValidID(id) {
		if err := os.RemoveAll(filepath.Join(m.opts.RestoreDir, id)); err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
}

// sweepRestores removes the checkpoints unpacked for restores that will not happen, each
// the memory of a checkpoint's processes: one no record names (known: the IDs recovery
// knows), and one whose container was restored already (its start removes it; a crash
// came first) or is not restored at all. A container recorded but not listed (left for a
// later daemon, or kept) keeps its own, and a created one its own until its start.
func (m *Manager) sweepRestores(known map[string]bool) {
	if m.opts.RestoreDir == "" {
		return
	}
	entries, err := os.ReadDir(m.opts.RestoreDir)
	if err != nil {
		logrus.WithError(err).WithField("dir", m.opts.RestoreDir).Warn("list unpacked checkpoints")
		return
	}
	for _, e := range entries {
		id := e.Name()
		if m.index.Listed(id) {
			// Listed: the exact ID, which Get (by prefix) then finds.
			if c, err := m.index.Get(id); err != nil || c.Restore != "" && c.Status().State != StateRunning && c.Status().State != StateExited {
				continue
			}
		} else if known[id] {
			continue
		}
		p := filepath.Join(m.opts.RestoreDir, id)
		logrus.WithFields(logrus.Fields{"container": id, "path": p}).Info("checkpoint unpacked for a restore that will not happen; removing it")
		if err := os.RemoveAll(p); err != nil {
			logrus.WithError(err).WithField("path", p).Error("remove a checkpoint unpacked for a restore")
		}
	}
}

// decodeRecord reads the record kept under id. Recovery and removal remove what a record
// names (its directory and its restore's unpacked checkpoint, with RemoveAll), so a record
// that names another container, or either path not its own, is refused (and
// quarantined), whatever else it holds.
func (m *Manager) decodeRecord(id string, meta, status []byte) (*Container, error) {
	if meta == nil {
		return nil, errors.New("no metadata")
	}
	c := &Container{exited: registry.NewExit()}
	if err := json.Unmarshal(meta, &c.Metadata); err != nil {
		return nil, err
	}
	if c.ID != id {
		return nil, fmt.Errorf("the record kept as %s names container %q", id, c.ID)
	}
	if err := store.CheckOwnDir(c.Dir, id); err != nil {
		return nil, err
	}
	if r := c.Restore; r != "" && (m.opts.RestoreDir == "" || r != filepath.Join(m.opts.RestoreDir, id)) {
		return nil, fmt.Errorf("restore %q is not the container's own (%s)", r, filepath.Join(cmp.Or(m.opts.RestoreDir, "<restore dir>"), id))
	}
	var err error
	if c.status, err = store.LoadTracked(status, Status{State: StateCreating}); err != nil {
		return nil, err
	}
	cfg, err := store.UnmarshalConfig[runtimeapi.ContainerConfig](c.Metadata.Config, "container config")
	if err != nil {
		return nil, err
	}
	c.config = cfg
	if c.Runtime == nil {
		return nil, errors.New("no runtime in the record")
	}
	c.Kind = handlers.TypeOfRecord(c.Kind, c.Shared)
	if c.rt, err = m.opts.Runtimes.For(c.Kind, c.Runtime); err != nil {
		return nil, err
	}
	return c, nil
}

// reconcile follows a recovered container again through its runtime: an exit that
// happened while the daemon was down is recorded with its real code and time, a live one
// is watched, and one whose supervisor died is ended and recorded so.
func (m *Manager) reconcile(c *Container) {
	if at := m.opts.RebootedAt; !at.IsZero() {
		if st := c.Status().State; st == StateRunning || st == StateCreated || st == StateUnknown {
			m.endedByReboot(c, st, at)
			return
		}
	}
	switch c.Status().State {
	case StateExited:
		c.exited.Mark()
		return
	case StateCreated:
		m.reconcileCreated(c)
		if c.Status().State == StateExited { // never started, and nothing left to watch
			c.exited.Mark()
			return
		}
	}
	m.watch(c, true)
}

// endedByReboot records a container the node's restart ended, as containerd records a
// task it cannot find (exit code 255, reason Unknown), at the boot's time: it ended before
// it. Nothing of it is left to watch or kill.
func (m *Manager) endedByReboot(c *Container, was string, at time.Time) {
	msg := "the node restarted while the container ran"
	if was == StateCreated {
		msg = "the node restarted before the container started"
	}
	err := m.update(c, func(s *Status) {
		s.State, s.ExitCode, s.Reason, s.Message = StateExited, 255, "Unknown", msg
		s.FinishedAt = at.UnixNano()
		if s.StartedAt == 0 || s.StartedAt > s.FinishedAt {
			s.StartedAt = s.FinishedAt
		}
	})
	if err != nil {
		logrus.WithError(err).WithField("container", c.ID).Warn("persist the exit of a container the node's restart ended")
	}
	c.exited.Mark()
	logrus.WithFields(logrus.Fields{"container": c.ID, "was": was}).Info("container ended by the node's restart")
}

// reconcileCreated asks the runtime about a container recorded as created: the start may
// have gone through while its caller went away or the daemon died before the record was
// written. Reporting such a container CREATED would make kubelet run a second copy; one
// that ran is recorded running (its exit, if any, is then read from its supervisor), and
// one the runtime cannot tell about is UNKNOWN, which kubelet stops and replaces.
func (m *Manager) reconcileCreated(c *Container) {
	ctx, cancel := context.WithTimeout(m.ctx, kind.DefaultTimeout)
	defer cancel()
	st, err := c.rt.Status(ctx, c.Task())
	log := logrus.WithField("container", c.ID)
	var fn func(*Status)
	switch {
	case err != nil:
		log.WithError(err).Warn("container recorded as created: the runtime cannot say whether it started; state unknown")
		fn = func(s *Status) {
			s.State, s.Reason, s.Message = StateUnknown, "Unknown", "recorded as created; after a restart the runtime could not say whether it started: "+err.Error()
		}
	case st == kind.TaskNeverStarted:
		log.Warn("container recorded as created never started and its runtime reports it gone (its sandbox ended); recorded as exited")
		fn = func(s *Status) {
			s.State, s.ExitCode, s.FinishedAt = StateExited, 255, time.Now().UnixNano()
			s.Reason, s.Message = "Error", "the container never started: its runtime reports it gone (its sandbox ended before the start)"
		}
	case st == kind.TaskRunning || st == kind.TaskStopped:
		// A stopped one started and ended, or its start ended it: a shim v2 cancels a
		// start whose connection drops, as the daemon's does when it dies, and runc init
		// exits 1 when runc start is killed mid-way. Its exit is read from the runtime.
		msg := "container recorded as created had started; recorded as running"
		if st == kind.TaskStopped {
			msg = "container recorded as created is stopped in its runtime (it started and ended, or the daemon's stop interrupted its start); its exit is read from the runtime"
		}
		log.WithField("runtime_state", st).Warn(msg)
		fn = func(s *Status) {
			s.State = StateRunning
			if s.StartedAt == 0 {
				s.StartedAt = c.CreatedAt // the start's own time was not recorded; it came after this
			}
		}
	default:
		return
	}
	if err := m.update(c, fn); err != nil {
		log.WithError(err).Warn("persist reconciled state")
	}
}
