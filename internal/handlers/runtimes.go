package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/kind/ocicli"
	"github.com/rtshimd/rtshimd/internal/kind/shimv2"
	"github.com/rtshimd/rtshimd/internal/kind/shimv2/shim"
)

// ErrNoRuntime is a row or record whose runtime cannot be made (a type this rtshimd does
// not know, written by another release): its pods are left as they are.
var ErrNoRuntime = errors.New("no runtime for this row")

// Env is what every kind of runtime may need from the daemon.
type Env struct {
	MonitorPath  string
	CgroupDriver string
	RunRoot      string // the daemon's run_root
	// PlainStart: runc containers start through `runc start` too ([mechanisms]
	// exec_fifo_start = false).
	PlainStart bool
}

// Runtimes makes the kind.Runtime of a handler row, once per distinct row: the table's
// rows and the records of running pods (which keep the row they were created with) share
// one instance, so a kind that holds per-pod connections holds each once.
type Runtimes struct {
	env Env

	mu    sync.Mutex
	byKey map[string]kind.Runtime
	// events receives shims' task events (TTRPC_ADDRESS), once a shim row exists: a shim
	// with nobody there logs every event as a failure. Exits are followed through Wait; the
	// events are only logged.
	events *shim.EventServer
}

// NewRuntimes returns an empty set of runtimes.
func NewRuntimes(env Env) *Runtimes {
	return &Runtimes{env: env, byKey: map[string]kind.Runtime{}}
}

// For returns the runtime of the given type for row. The one place that knows every
// kind: a new kind of runtime is added here and in config's list of types.
func (r *Runtimes) For(typ string, row *kind.Row) (kind.Runtime, error) {
	b, _ := json.Marshal(row)
	key := typ + "\x00" + string(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	if rt, ok := r.byKey[key]; ok {
		return rt, nil
	}
	cli := ocicli.Options{MonitorPath: r.env.MonitorPath, PlainStart: r.env.PlainStart}
	var rt kind.Runtime
	switch typ {
	case kind.OCI:
		rt = ocicli.NewOCI(row, cli)
	case kind.OCISandbox:
		rt = ocicli.NewSandbox(row, cli)
	case kind.ShimV2:
		opts := shimv2.Options{MonitorPath: r.env.MonitorPath, Address: filepath.Join(r.env.RunRoot, "shim")}
		if r.events == nil && r.env.RunRoot != "" {
			path := filepath.Join(r.env.RunRoot, "shim-events.sock")
			es, err := shim.ServeEvents(path, func(e shim.Event) {
				logrus.WithFields(logrus.Fields{"topic": e.Topic, "container": e.ContainerID, "exec": e.ProcessID}).Debug("shim event")
			})
			if err != nil {
				return nil, fmt.Errorf("handler %q: %w (%w)", row.Handler, err, ErrNoRuntime)
			}
			r.events = es
		}
		if r.events != nil {
			opts.EventsAddress = filepath.Join(r.env.RunRoot, "shim-events.sock")
		}
		rt = shimv2.New(row, opts)
	default:
		return nil, fmt.Errorf("handler %q: runtime_type %q is not known to this rtshimd (known: %v): %w", row.Handler, typ, kind.Types, ErrNoRuntime)
	}
	r.byKey[key] = rt
	return rt, nil
}

// Close stops serving shim events (shims then fail their publishes at once).
func (r *Runtimes) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.events != nil {
		_ = r.events.Close()
		r.events = nil
	}
}

// TypeOfRecord is the runtime type of a record written before records named their kind:
// the sandbox mode said it ("shared" was runsc's kind).
func TypeOfRecord(typ string, shared bool) string {
	switch {
	case typ != "":
		return typ
	case shared:
		return kind.OCISandbox
	}
	return kind.OCI
}
