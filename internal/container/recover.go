package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Recover loads every stored container and reconciles it: running ones are watched again
// (their monitors kept them and their logs going), exits that happened while the daemon
// was down are recorded with their real code and time, and half-created containers are
// undone. Sandboxes must be recovered first.
func (m *Manager) Recover(ctx context.Context) error {
	recs, err := m.opts.Store.Load()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
		log := logrus.WithField("container", r.ID)
		if r.Err != nil {
			m.quarantine(ctx, r.ID, fmt.Sprintf("unreadable: %v", r.Err))
			continue
		}
		if r.Meta == nil {
			// A crash between the record's mkdir and its first write: nothing was created.
			log.Info("container record without metadata (created when the daemon stopped); removing what it may hold")
			if err := m.removeLeftovers(r.ID); err != nil {
				log.WithError(err).Error("container record kept: what it holds could not be removed")
				continue
			}
			_ = m.opts.Store.Delete(r.ID)
			continue
		}
		c, err := m.decodeRecord(r.ID, r.Meta, r.Status)
		if errors.Is(err, handlers.ErrNoRuntime) {
			log.WithError(err).Error("container record left as it is")
			continue
		}
		if err != nil {
			m.quarantine(ctx, r.ID, fmt.Sprintf("undecodable: %v", err))
			continue
		}
		if c.Status().State == StateCreating {
			log.Info("container was half-created when the daemon stopped; cleaning up")
			if err := m.cleanup(c); err != nil {
				log.WithError(err).Error("clean up half-created container")
			}
			continue
		}
		if st := c.Status(); st.State == StateUnknown && st.Reason == reasonCleanupFailed {
			// Kept by an earlier daemon because its cleanup failed: try again now, and keep
			// retrying while it fails.
			if err := m.cleanup(c); err == nil {
				log.Info("cleanup of a container kept for it done")
				continue
			}
			c.markExited()
			m.mu.Lock()
			m.add(c)
			m.names[c.Name] = c.ID
			m.mu.Unlock()
			m.retryCleanup(c)
			continue
		}
		if _, err := m.opts.Sandboxes.Get(c.SandboxID); err != nil {
			log.WithField("sandbox", c.SandboxID).Warn("container of a sandbox that no longer exists; removing it")
			if err := m.cleanup(c); err != nil {
				log.WithError(err).Error("clean up orphan container")
			}
			continue
		}
		m.reconcile(c)
		m.mu.Lock()
		m.add(c)
		m.names[c.Name] = c.ID
		m.mu.Unlock()
		log.WithField("state", c.Status().State).Info("container recovered")
	}
	entries, _ := os.ReadDir(m.opts.RunDir)
	for _, e := range entries {
		if e.IsDir() && !known[e.Name()] {
			if err := m.removeLeftovers(e.Name()); err != nil {
				logrus.WithError(err).WithField("container", e.Name()).Error("container directory without a record kept")
			}
		}
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

// quarantine sets aside a container record that cannot be read (kept, named in the log
// and in Status verbose) and ends the container it describes: found in the runtimes' own
// state by its ID (its bundle names its pod), stopped and deleted there. Only once nothing
// of it runs are its rootfs and files removed; a container that could not be stopped
// keeps them.
func (m *Manager) quarantine(ctx context.Context, id, why string) {
	log := logrus.WithFields(logrus.Fields{"container": id, "reason": why})
	path, err := m.opts.Store.Quarantine(id, why)
	if path == "" {
		log.WithError(err).Error("bad container record could not be set aside; left as it is, container not listed")
		return
	}
	if err != nil {
		log.WithError(err).Warn("bad container record set aside, but not all of it was synced")
	}
	log = log.WithField("quarantined_at", path)
	log.Error("bad container record quarantined; stopping the container it describes")
	dir := filepath.Join(m.opts.RunDir, id)
	task := kind.Task{ID: id, Dir: dir}
	if spec, err := oci.ReadBundle(dir); err == nil {
		task.PodID = spec.Annotations[oci.AnnotationSandboxID]
	}
	if sb, err := m.opts.Sandboxes.Get(task.PodID); err == nil {
		task.PodDir = sb.ContainerDir()
	}
	sctx, cancel := context.WithTimeout(ctx, 2*kind.DefaultTimeout)
	defer cancel()
	found, err := m.opts.Sandboxes.StopUnrecorded(sctx, task)
	if err != nil {
		log.WithError(err).Error("container of a quarantined record could not be stopped; its rootfs and files are kept")
		return
	}
	if len(found) > 0 {
		log.WithFields(logrus.Fields{"handlers": found, "sandbox": task.PodID}).Warn("container of a quarantined record stopped")
	}
	if err := m.removeLeftovers(id); err != nil {
		log.WithError(err).Error("files of a quarantined container record could not be removed")
	}
}

// Quarantined lists the container records set aside as unreadable.
func (m *Manager) Quarantined() []store.Quarantined {
	q, err := m.opts.Store.ListQuarantined()
	if err != nil {
		logrus.WithError(err).Warn("list quarantined container records")
	}
	return q
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
	c := &Container{exited: make(chan struct{})}
	if err := json.Unmarshal(meta, &c.Metadata); err != nil {
		return nil, err
	}
	if c.ID != id {
		return nil, fmt.Errorf("the record kept as %s names container %q", id, c.ID)
	}
	if err := store.CheckOwnDir(c.Dir, id); err != nil {
		return nil, err
	}
	st := Status{State: StateCreating}
	if status != nil {
		if err := json.Unmarshal(status, &st); err != nil {
			return nil, err
		}
	}
	c.status = store.NewTracked(st)
	cfg, err := decodeConfig(c.Metadata.Config)
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
		c.markExited()
		return
	case StateCreated:
		m.reconcileCreated(c)
		if c.Status().State == StateExited { // never started, and nothing left to watch
			c.markExited()
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
	c.markExited()
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
		log.WithField("runtime_state", st).Warn("container recorded as created had started; recorded as running")
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
