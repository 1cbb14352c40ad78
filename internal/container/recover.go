package container

import (
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
		m.index.Keep(id, path)
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
		return false
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
	m.index.Keep(id, path)
	log.WithFields(logrus.Fields{"quarantined_at": path, "why": why, "sandbox": task.PodID}).Error("container without a usable record still runs: kept, not stopped, its files kept; " + store.KeepHint(id))
	return true
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
	if err := m.removeLeftovers(id); err != nil {
		log.WithError(err).Error("files of a container without a usable record could not be removed")
	}
	return true
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
// its rootfs and the directory.
func (m *Manager) removeLeftovers(id string) error {
	dir := filepath.Join(m.opts.RunDir, id)
	if err := unmountUsernsMounts(dir); err != nil {
		return err
	}
	_ = m.opts.Images.RemoveVolumes(id)
	_ = m.opts.Images.RemoveRootfs(id)
	return os.RemoveAll(dir)
}

// decodeRecord reads the record kept under id. Recovery removes what a record names
// (its directory, with RemoveAll), so a record that names another container or a
// directory not its own is refused (and quarantined), whatever else it holds.
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
