package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/fsafe/mountpoint"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/nsfile"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/registry"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Recover loads every stored sandbox and reconciles it with the node: ready sandboxes
// whose namespaces or sandbox container are gone become NOTREADY, sandbox containers that
// still run are watched again, and sandboxes that were half-created when the previous
// daemon died are cleaned up, as are run directories nobody owns.
func (m *Manager) Recover(ctx context.Context) error {
	m.mu.Lock()
	m.left = map[string]bool{}
	m.mu.Unlock()
	_, err := m.index.Recover(ctx, registry.Recovery[*Sandbox]{
		Store: m.opts.Store, RunDir: m.opts.RunDir, Field: "sandbox", Object: "pod",
		Unwritten: func(id string, log *logrus.Entry) {
			// Nothing ran yet.
			log.Info("sandbox record without metadata (created when the daemon stopped); cleaning up")
			m.cleanupOrphan(id)
		},
		Decode: m.decodeRecord,
		Leave: func(id string, err error) bool {
			if !errors.Is(err, handlers.ErrNoRuntime) {
				return false
			}
			// Not ours to undo: a later rtshimd that knows its runtime takes it up.
			logrus.WithError(err).WithField("sandbox", id).Error("sandbox record left as it is")
			m.mu.Lock()
			m.left[id] = true
			m.mu.Unlock()
			return true
		},
		Settle: func(sb *Sandbox, log *logrus.Entry) (bool, string) {
			if sb.Status().State == StateCreating {
				log.Info("sandbox was half-created when the daemon stopped; cleaning up")
				if err := m.cleanup(sb); err != nil {
					log.WithError(err).Error("clean up half-created sandbox")
				}
				return false, ""
			}
			m.reconcile(sb)
			return true, ""
		},
		State:       func(sb *Sandbox) string { return sb.Status().State },
		Quarantined: m.settleQuarantined,
		// One that still runs is kept; only what no runtime runs is removed.
		Unrecorded: m.recoverUnrecorded,
	})
	return err
}

// recoverUnrecorded settles a pod that has no usable record: kept, with its pins and
// files, when it may still run (its sandbox container runs, or its namespaces are still
// pinned: its containers may run in them); otherwise its directory is cleaned up.
func (m *Manager) recoverUnrecorded(ctx context.Context, id string) {
	log := logrus.WithFields(logrus.Fields{"sandbox": id, "dir": filepath.Join(m.opts.RunDir, id)})
	if path := registry.KeptEntry(m.opts.Store, id); path != "" {
		// Kept by an earlier start and not yet decided on.
		m.keep(id, path)
		log.WithField("quarantined_at", path).Warn("pod without a record still kept; " + store.KeepHint(id))
		return
	}
	alive, why := m.podAlive(ctx, id)
	if !alive {
		log.Info("removing run directory of unknown sandbox")
		m.cleanupOrphan(id)
		return
	}
	path, err := m.opts.Store.SetAside(id, "record lost (a damaged record journal, or none written); the pod still ran at recovery: "+why)
	if err == nil {
		err = store.MarkKept(path, true)
	}
	if err != nil {
		log.WithError(err).Error("pod without a record still runs; its quarantine entry could not be written, it is kept as it is")
	}
	m.keep(id, path)
	log.WithFields(logrus.Fields{"quarantined_at": path, "why": why}).Error("pod without a record still runs: kept, not removed; " + store.KeepHint(id))
}

// keep keeps pod id, which has no usable record, under its quarantine entry path, and
// reserves its name (every attempt) where its sandbox container's bundle names it:
// kubelet, which cannot see the pod, would run it again beside it, with the same UID and
// volumes. A pod without a sandbox container is named by its kept containers' bundles
// (NameKept, from the container manager's recovery); one whose containers all ended
// holds only its namespaces, and reserves nothing.
func (m *Manager) keep(id, path string) {
	m.index.Keep(id, path)
	if spec, err := oci.ReadBundle(m.unrecordedTask(id).Dir); err == nil {
		a := spec.Annotations
		if md := (&runtimeapi.PodSandboxMetadata{Name: a[oci.AnnotationSandboxName], Namespace: a[oci.AnnotationSandboxNS], Uid: a[oci.AnnotationSandboxUID]}); md.Name != "" {
			m.NameKept(id, md)
		}
	}
}

// NameKept reserves the name of the kept pod id, as md (from a bundle of the pod) gives
// it, for every attempt: RunPodSandbox for it is refused until an operator has decided on
// the pod.
func (m *Manager) NameKept(id string, md *runtimeapi.PodSandboxMetadata) {
	m.index.KeepName(id, registry.Family(MakeName(md)))
}

// Unready says why the node must take no pods now, "" when it may: the pod records'
// journal could not be read, and pods that still ran are kept without their records.
// kubelet, which sees none of them, would run every one again beside it; this holds until
// an operator has stopped them (or adopted their records, the daemon stopped).
func (m *Manager) Unready() string {
	if !m.opts.Store.Unreadable() {
		return ""
	}
	if n := len(m.index.KeptIDs()); n > 0 {
		return fmt.Sprintf("%d pods still run, kept, whose records were lost with the unreadable pod record journal (%s)", n, m.opts.Store.Damage())
	}
	return ""
}

// podAlive says whether a pod without a usable record may still run, and why: a runtime
// still runs its sandbox container (or cannot say), or its namespaces are still pinned.
func (m *Manager) podAlive(ctx context.Context, id string) (bool, string) {
	dir := filepath.Join(m.opts.RunDir, id)
	for _, k := range []nsfile.Kind{nsfile.Net, nsfile.IPC, nsfile.UTS} {
		if p := filepath.Join(dir, "ns", string(k)); m.host().IsPinned(p) {
			return true, "its " + string(k) + " namespace is still pinned"
		}
	}
	sctx, cancel := context.WithTimeout(ctx, kind.DefaultTimeout)
	defer cancel()
	task := m.unrecordedTask(id)
	found, err := m.opts.Handlers.FindUnrecorded(sctx, task)
	if err != nil {
		return true, "a runtime could not say whether its sandbox runs: " + err.Error()
	}
	if len(found) > 0 {
		return true, "its sandbox container runs in " + strings.Join(found, ", ")
	}
	return false, ""
}

// unrecordedTask is the sandbox task of a pod without a record, by its directory.
func (m *Manager) unrecordedTask(id string) kind.Task {
	dir := filepath.Join(m.opts.RunDir, id)
	bundle := filepath.Join(dir, id)
	if _, err := os.Stat(filepath.Join(dir, "infra", "config.json")); err == nil {
		bundle = filepath.Join(dir, "infra") // an earlier release's layout
	}
	return kind.Task{ID: id, PodID: id, Sandbox: true, Dir: bundle, PodDir: bundle}
}

// BundleOf is the sandbox container bundle of pod id, listed or not (a pod kept without
// a record): a pod-wide supervisor is found by it.
func (m *Manager) BundleOf(id string) string {
	if sb, err := m.Get(id); err == nil {
		return sb.ContainerDir()
	}
	if !store.ValidID(id) {
		return ""
	}
	return m.unrecordedTask(id).PodDir
}

// FindUnrecorded names the rows whose runtime still runs task, whose record was lost
// (the container manager's recovery uses it).
func (m *Manager) FindUnrecorded(ctx context.Context, task kind.Task) ([]string, error) {
	return m.opts.Handlers.FindUnrecorded(ctx, task)
}

// Kept says whether the pod id is kept without a usable record: its containers are kept
// with it.
func (m *Manager) Kept(id string) bool { return m.index.Kept(id) }

// Holds says whether id is a pod this daemon keeps on the node: listed, kept without a
// usable record, or recorded for a runtime it does not have. The pin home releases only
// what it does not hold.
func (m *Manager) Holds(id string) bool {
	if m.index.Listed(id) || m.index.Kept(id) {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.left[id]
}

// StopRequested stops the kept pods an operator asked to stop (`rtshimd quarantine
// stop`): first their containers (before, which the daemon gives the container
// manager's), then their sandbox containers, network and pins, then their files. It
// returns the pods stopped.
func (m *Manager) StopRequested(ctx context.Context, before func(pod string)) []string {
	return m.index.StopKept(m.opts.Store, "sandbox", func(e store.Quarantined) bool { return e.StopRequested },
		func(id string, _ *logrus.Entry) bool {
			if before != nil {
				before(id)
			}
			return m.stopQuarantined(ctx, id)
		})
}

func (m *Manager) decodeRecord(id string, meta, status []byte) (*Sandbox, error) {
	if meta == nil {
		return nil, errors.New("no metadata")
	}
	sb := &Sandbox{exited: registry.NewExit()}
	if err := json.Unmarshal(meta, &sb.Metadata); err != nil {
		return nil, err
	}
	if err := checkPaths(id, &sb.Metadata); err != nil {
		return nil, err
	}
	var err error
	if sb.status, err = store.LoadTracked(status, Status{State: StateCreating}); err != nil {
		return nil, err
	}
	cfg, err := store.UnmarshalConfig[runtimeapi.PodSandboxConfig](sb.Config, "sandbox config")
	if err != nil {
		return nil, err
	}
	sb.config = cfg
	if sb.Runtime == nil {
		return nil, errors.New("no runtime in the record")
	}
	sb.Kind = handlers.TypeOfRecord(sb.Kind, sb.Sandbox == config.SandboxShared)
	if sb.rt, err = m.opts.Runtimes.For(sb.Kind, sb.Runtime); err != nil {
		return nil, err
	}
	return sb, nil
}

func (m *Manager) reconcile(sb *Sandbox) {
	if sb.TmpfsHome && m.host().IsLent(sb.Tmpfs) {
		// A copy lent before the restart: kept for a container's hooks on the node, or
		// left by a crash during a create. It stays until the pod's removal; a new lend
		// must not stack another on it, whose return would take both.
		sb.lentKept = true
	}
	if sb.Status().State != StateReady {
		if sb.SandboxContainer {
			sb.exited.Mark()
		}
		return
	}
	notReady := func(why string) {
		logrus.WithFields(logrus.Fields{"sandbox": sb.ID, "reason": why}).Warn("sandbox not ready after restart")
		_ = m.update(sb, func(st *Status) { st.State = StateNotReady })
	}
	for _, p := range []string{sb.NetNS, sb.IPCNS, sb.UTSNS, sb.UserNS} {
		if p != "" && !m.host().IsPinned(p) {
			notReady("pinned namespace " + p + " is gone")
			if sb.SandboxContainer {
				sb.exited.Mark()
			}
			return
		}
	}
	if sb.SandboxContainer {
		// The runtime follows the sandbox container again: one that exited while the daemon was down
		// is reported at once, one that lost its supervisor is followed or ended by it.
		m.watch(sb)
	}
}

// settleQuarantined settles a pod whose record recovery set aside as bad (named in the log and
// in Status verbose). A pod that still runs is kept running with its files, for an
// operator to stop or adopt; StopQuarantined cleans up after one that does not.
func (m *Manager) settleQuarantined(ctx context.Context, id, path string, log *logrus.Entry) {
	if alive, how := m.podAlive(ctx, id); alive {
		if err := store.MarkKept(path, true); err != nil {
			log.WithError(err).Warn("mark a kept pod's quarantine entry")
		}
		m.keep(id, path)
		log.WithField("why", how).Error("bad sandbox record quarantined; the pod still runs and is kept, not stopped; " + store.KeepHint(id))
		return
	}
	log.Error("bad sandbox record quarantined; what is left of its pod is cleaned up once its containers are")
	m.mu.Lock()
	m.quarantined = append(m.quarantined, id)
	m.mu.Unlock()
}

// StopQuarantined ends the pods whose records recovery quarantined, once the container
// manager's recovery has removed their containers (their records name a pod no longer
// known; a pod-wide supervisor such as a shim v2 must still run for that): each sandbox
// container is found in the runtimes' own state and stopped, the network torn down from
// libcni's cache, and the namespaces and mounts released.
func (m *Manager) StopQuarantined(ctx context.Context) {
	m.mu.Lock()
	ids := m.quarantined
	m.quarantined = nil
	m.mu.Unlock()
	for _, id := range ids {
		m.stopQuarantined(ctx, id)
	}
}

// stopQuarantined stops the pod id, which has no usable record, wherever a runtime
// still runs it, tears its network down and releases its pins and files; false when
// it could not be stopped (its files are kept).
func (m *Manager) stopQuarantined(ctx context.Context, id string) bool {
	log := logrus.WithField("sandbox", id)
	sctx, cancel := context.WithTimeout(ctx, StopTimeout+kind.DefaultTimeout)
	defer cancel()
	found, err := m.opts.Handlers.StopUnrecorded(sctx, m.unrecordedTask(id))
	if err != nil {
		log.WithError(err).Error("sandbox of a quarantined record could not be stopped; its files are kept")
		return false
	}
	log.WithField("handlers", found).Warn("pod of a quarantined record stopped")
	if m.opts.Network != nil {
		if err := m.opts.Network.TeardownUnrecorded(sctx, id); err != nil {
			log.WithError(err).Error("network of a quarantined sandbox: CNI DEL failed")
		}
	}
	return m.cleanupOrphan(id)
}

// StopUnrecorded ends a task whose record was lost wherever a row of the live handler
// table knows it (the container manager's recovery uses it).
func (m *Manager) StopUnrecorded(ctx context.Context, task kind.Task) ([]string, error) {
	return m.opts.Handlers.StopUnrecorded(ctx, task)
}

// Damage says what was wrong with the pod records' journal at start, if anything.
func (m *Manager) Damage() string { return m.opts.Store.Damage() }

// Quarantined lists the sandbox records set aside as unreadable.
func (m *Manager) Quarantined() []store.Quarantined {
	return registry.Quarantined(m.opts.Store, "sandbox")
}

// cleanupOrphan releases what a sandbox directory may hold when no usable record says
// what it is; false when its mounts could not be undone (the directory is kept).
func (m *Manager) cleanupOrphan(id string) bool {
	dir := filepath.Join(m.opts.RunDir, id)
	var errs []error
	for _, k := range []nsfile.Kind{nsfile.Net, nsfile.IPC, nsfile.UTS, nsfile.User} {
		if err := m.host().Unpin(filepath.Join(dir, "ns", string(k))); err != nil {
			errs = append(errs, err)
		}
	}
	// Every tmpfs a sandbox of this release or an earlier one may have mounted. <dir>/shm
	// goes before <dir>/shm/mnt: where it is a mount (the earliest layout) it is the pod's
	// /dev/shm, and mnt in it a name the pod's containers chose (a symlink to a node
	// mount, say). So mnt is looked at only once that tmpfs is gone, and unmounted only
	// where it is a directory, not followed, that is a mount point (the next layout's
	// /dev/shm).
	unmount := func(p string) bool {
		if err := m.host().Unmount(p); err != nil {
			errs = append(errs, err)
			return false
		}
		return true
	}
	unmount(filepath.Join(dir, TmpfsDir))
	if unmount(filepath.Join(dir, ShmDir)) {
		p := filepath.Join(dir, ShmDir, ShmMount)
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			if mounted, err := mountpoint.IsMountPoint(p); err != nil {
				errs = append(errs, err)
			} else if mounted {
				unmount(p)
			}
		}
	}
	unmount(filepath.Join(dir, FilesDir))
	if m.host().TmpfsInHome() {
		// The pod's tmpfs in the pin home (nothing when it has none there).
		if err := m.host().UnmountPodTmpfsInHome(id); err != nil {
			errs = append(errs, err)
		}
	}
	log := logrus.WithField("dir", dir)
	if len(errs) > 0 {
		// Never remove through a mount that is still there.
		log.WithError(errors.Join(errs...)).Error("orphan sandbox dir kept: its mounts could not be undone")
		return false
	}
	if err := os.RemoveAll(dir); err != nil {
		log.WithError(err).Error("remove orphan sandbox dir")
	}
	_ = m.opts.Store.Delete(id)
	return true
}

// checkPaths refuses a record kept under id that names another pod, or paths that are not
// the pod's own: recovery and removal delete its directory whole, unmount and delete its
// namespace pins and delete its bundle, so each must lie where the daemon puts them
// (<run dir>/<id>, <dir>/ns/<kind>, below <dir>). Empty paths are allowed (nothing is
// removed then).
func checkPaths(id string, md *Metadata) error {
	if md.ID != id {
		return fmt.Errorf("the record kept as %s names pod sandbox %q", id, md.ID)
	}
	if err := store.CheckOwnDir(md.Dir, id); err != nil {
		return err
	}
	for k, p := range map[nsfile.Kind]string{nsfile.Net: md.NetNS, nsfile.IPC: md.IPCNS, nsfile.UTS: md.UTSNS, nsfile.User: md.UserNS} {
		if p != "" && (md.Dir == "" || p != filepath.Join(md.Dir, "ns", string(k))) {
			return fmt.Errorf("%s namespace pin %q is not the pod's own (<dir>/ns/%s)", k, p, k)
		}
	}
	if t := md.Tmpfs; t != "" && (md.Dir == "" || t != filepath.Join(md.Dir, TmpfsDir)) {
		return fmt.Errorf("pod tmpfs %q is not the pod's own (<dir>/%s)", t, TmpfsDir)
	}
	// shm and files in the pod's tmpfs, or (earlier releases) a tmpfs each in the pod's dir.
	shms, files := []string{filepath.Join(md.Dir, ShmDir, ShmMount), filepath.Join(md.Dir, ShmDir)}, []string{filepath.Join(md.Dir, FilesDir)}
	if md.Tmpfs != "" {
		shms, files = []string{filepath.Join(md.Tmpfs, ShmSub)}, []string{filepath.Join(md.Tmpfs, FilesSub)}
	}
	if p := md.Shm; p != "" && (md.Dir == "" || !slices.Contains(shms, p)) {
		return fmt.Errorf("shm %q is not the pod's own (%s)", p, strings.Join(shms, " or "))
	}
	if p := md.Files; p != "" && (md.Dir == "" || !slices.Contains(files, p)) {
		return fmt.Errorf("files %q is not the pod's own (%s)", p, files[0])
	}
	if b := md.BundleDir; b != "" && (md.Dir == "" || filepath.Clean(b) != b || filepath.Dir(b) != md.Dir || b == md.Dir) {
		return fmt.Errorf("bundle dir %q is not below the pod's dir %q", b, md.Dir)
	}
	return nil
}
