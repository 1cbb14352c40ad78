// Package reload re-reads the daemon's config file and its drop-ins when asked (SIGHUP,
// `rtshimd reload`) or when one of them changes on disk, and hands a valid config to the
// daemon to apply. A file with a mistake is refused with the loader's `file:line: message`
// and the config being served stays. It keeps the served config and what the last attempt did, for Status and
// metrics.
package reload

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/metrics"
)

// Triggers of a reload.
const (
	Signal = "signal" // SIGHUP
	File   = "file"   // the file changed on disk
)

// Results of an attempt.
const (
	Applied   = "applied"
	Unchanged = "unchanged" // the file changed on disk, but not its bytes
	Refused   = "refused"   // the file has a mistake, or applying it failed
)

// Apply makes cfg the served config: it returns what changed (for the log and Status)
// and the settings that take effect only at a restart. On error nothing was applied.
type Apply func(ctx context.Context, old, cfg *config.Config) (change any, restartNeeded []string, err error)

// Attempt is what one reload did.
type Attempt struct {
	Seq     int       `json:"seq"`
	At      time.Time `json:"at"`
	Trigger string    `json:"trigger"`
	Result  string    `json:"result"`
	Error   string    `json:"error,omitempty"`
	Hash    string    `json:"hash,omitempty"` // of the file read
	Change  any       `json:"change,omitempty"`
	// RestartNeeded are settings that changed but take effect only when the daemon restarts.
	RestartNeeded []string `json:"restart_needed,omitempty"`
}

// Status is the served config and the last attempt, for Status verbose info.
type Status struct {
	Path string   `json:"path"`
	Hash string   `json:"hash"`
	Last *Attempt `json:"last,omitempty"`
}

// Reloader owns the served config.
type Reloader struct {
	apply Apply
	cur   atomic.Pointer[config.Config]
	last  atomic.Pointer[Attempt]

	mu  sync.Mutex // one reload at a time
	seq int
}

// New serves cfg (as loaded at start) and applies later versions of its file with apply.
func New(cfg *config.Config, apply Apply) *Reloader {
	r := &Reloader{apply: apply}
	r.cur.Store(cfg)
	metrics.ConfigHash.Set(metrics.HashValue(cfg.Hash))
	return r
}

// Config is the config being served.
func (r *Reloader) Config() *config.Config { return r.cur.Load() }

// Status says which config is served and what the last reload did.
func (r *Reloader) Status() Status {
	cfg := r.cur.Load()
	return Status{Path: cfg.Path, Hash: cfg.Hash, Last: r.last.Load()}
}

// Reload re-reads the served config's file and applies it. A file trigger whose bytes
// did not change does nothing; a signal always applies, so that rows that were not ready
// are probed again (an operator installed the runtime, then asked for a reload).
func (r *Reloader) Reload(ctx context.Context, trigger string) Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	a := Attempt{Seq: r.seq, At: time.Now(), Trigger: trigger}
	old := r.cur.Load()
	log := logrus.WithFields(logrus.Fields{"trigger": trigger, "config": old.Path})
	var err error
	var cfg *config.Config
	switch {
	case old.Path == "":
		err = errors.New("the daemon runs the built-in default configuration (no --config file); there is nothing to reload")
	default:
		cfg, err = config.Load(old.Path)
	}
	if err == nil {
		a.Hash = cfg.Hash
		if trigger == File && cfg.Hash == old.Hash {
			a.Result = Unchanged
			r.last.Store(&a)
			return a
		}
		a.Change, a.RestartNeeded, err = r.apply(ctx, old, cfg)
	}
	if err != nil {
		a.Result, a.Error = Refused, err.Error()
		metrics.ConfigReloads.WithLabelValues("failure").Inc()
		log.WithError(err).Error("config reload refused; the previous configuration keeps serving")
		r.last.Store(&a)
		return a
	}
	a.Result = Applied
	r.cur.Store(cfg)
	metrics.ConfigReloads.WithLabelValues("success").Inc()
	metrics.ConfigHash.Set(metrics.HashValue(cfg.Hash))
	log = log.WithFields(logrus.Fields{"hash": cfg.Hash[:12], "change": a.Change})
	if len(a.RestartNeeded) > 0 {
		log.WithField("restart_needed", a.RestartNeeded).Warn("config reloaded; some changed settings take effect only at a restart")
	} else {
		log.Info("config reloaded")
	}
	r.last.Store(&a)
	return a
}

// NotifyHUP starts catching SIGHUP, whose default action ends the process: a daemon calls
// it first thing, so that a reload asked for during start-up is queued, not fatal.
func NotifyHUP() <-chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// Run reloads on hup (NotifyHUP) and when the config file changes on disk, until ctx
// ends. The file's directory is watched (editors and config managers replace files by
// rename), and a burst of events makes one reload once the file has been quiet for a
// moment.
func (r *Reloader) Run(ctx context.Context, hup <-chan os.Signal) {

	var events <-chan fsnotify.Event
	var errs <-chan error
	var w *fsnotify.Watcher
	path := r.cur.Load().Path
	dropIns := ""
	if path != "" {
		dropIns = filepath.Clean(config.DropInDir(path))
		var err error
		w, err = fsnotify.NewWatcher()
		if err == nil {
			err = w.Add(filepath.Dir(path))
		}
		if err != nil {
			logrus.WithError(err).WithField("config", path).Warn("cannot watch the config file; reload with SIGHUP or `rtshimd reload`")
		} else {
			defer w.Close()
			events, errs = w.Events, w.Errors
			// The drop-in directory, where there is one; one made later is added when it
			// appears.
			_ = w.Add(dropIns)
		}
	}
	const quiet = 200 * time.Millisecond
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.Reload(ctx, Signal)
		case e := <-events:
			name := filepath.Clean(e.Name)
			switch {
			case name == filepath.Clean(path) && e.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0:
				debounce.Reset(quiet)
			case name == dropIns && e.Op&fsnotify.Create != 0:
				_ = w.Add(dropIns)
				debounce.Reset(quiet)
			case name == dropIns && e.Op&(fsnotify.Remove|fsnotify.Rename) != 0:
				debounce.Reset(quiet)
			case filepath.Dir(name) == dropIns && strings.HasSuffix(name, ".toml") &&
				e.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0:
				// A drop-in written, added, renamed or removed.
				debounce.Reset(quiet)
			}
		case err := <-errs:
			logrus.WithError(err).Warn("config file watch")
		case <-debounce.C:
			r.Reload(ctx, File)
		}
	}
}
