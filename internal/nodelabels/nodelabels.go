// Package nodelabels keeps the node's labels in step with the handler table, so that a
// scheduler places pods of a RuntimeClass only where its handler is ready (the
// RuntimeClasses `rtshimd runtimeclasses` writes select these labels). It writes only
// labels under its own prefixes, through the node's own credentials (a kubeconfig such as
// kubelet's, which NodeRestriction lets label its own Node under other prefixes than
// kubernetes.io's), and removes its labels that no longer hold.
package nodelabels

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rtshimd/rtshimd/internal/handlers"
)

const (
	// Prefix is the ready label's: runtime.rtshimd.io/<handler>=true.
	Prefix = "runtime.rtshimd.io/"
	// FeaturePrefix is a feature's: features.runtime.rtshimd.io/<handler>.<feature>=true.
	FeaturePrefix = "features.runtime.rtshimd.io/"
)

// Want is the labels of this package's prefixes that the rows call for.
func Want(rows []*handlers.Handler) map[string]string {
	out := map[string]string{}
	for _, h := range rows {
		if !h.Ready {
			continue
		}
		out[Prefix+h.Name] = "true"
		f := h.Features
		for _, x := range []struct {
			name string
			on   bool
		}{
			{"host-network", f.HostNetwork}, {"host-pid", f.HostPID}, {"host-ipc", f.HostIPC},
			{"user-namespaces", f.UserNamespaces}, {"recursive-read-only-mounts", f.RecursiveReadOnlyMounts},
		} {
			if x.on {
				out[FeaturePrefix+h.Name+"."+x.name] = "true"
			}
		}
	}
	return out
}

func ours(key string) bool {
	return strings.HasPrefix(key, Prefix) || strings.HasPrefix(key, FeaturePrefix)
}

// Syncer writes Want of the live table to the Node.
type Syncer struct {
	kubeconfig string
	// client and url are set once the kubeconfig is read (connect), by New or by the first
	// Sync that finds it.
	client *http.Client
	url    string // the Node object's
	node   string
	table  func() []*handlers.Handler

	mu     sync.Mutex
	status Status
}

// Status is what the syncer last did, for Status verbose.
type Status struct {
	Node   string            `json:"node"`
	Labels map[string]string `json:"labels,omitempty"` // as last written
	Synced time.Time         `json:"synced,omitempty"`
	Error  string            `json:"error,omitempty"`
}

// New is a syncer for node (the hostname, lowercased, when empty) through kubeconfig, or
// nil when kubeconfig is empty. A kubeconfig that exists must be usable now: a mistake in
// it is refused at start. One that does not exist yet is waited for, as kubelet's is on a
// kubeadm node: `kubeadm join` writes /etc/kubernetes/kubelet.conf only after kubelet has
// registered, which needs the runtime running first.
func New(kubeconfig, node string, table func() []*handlers.Handler) (*Syncer, error) {
	if kubeconfig == "" {
		return nil, nil
	}
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node.name: the hostname: %w", err)
		}
		node = strings.ToLower(h)
	}
	s := &Syncer{kubeconfig: kubeconfig, node: node, table: table, status: Status{Node: node}}
	if _, err := os.Stat(kubeconfig); errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err := s.connect(); err != nil {
		return nil, err
	}
	return s, nil
}

// connect reads the kubeconfig and makes the client.
func (s *Syncer) connect() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		return fmt.Errorf("node.kubeconfig %s: %w", s.kubeconfig, err)
	}
	cfg.Timeout = 10 * time.Second
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("node.kubeconfig %s: %w", s.kubeconfig, err)
	}
	s.client, s.url = client, strings.TrimSuffix(cfg.Host, "/")+"/api/v1/nodes/"+url.PathEscape(s.node)
	return nil
}

// Status is what the syncer last did.
func (s *Syncer) Status() Status {
	if s == nil {
		return Status{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Labels = maps.Clone(st.Labels)
	return st
}

// Run syncs at once, then whenever the table's labels change (checked every period), and
// again every resync (someone may have edited the node), until ctx ends. A kubeconfig not
// written yet, a node not registered yet, or an API server that fails, is tried again at
// the next check. Sync is called from one goroutine at a time.
func (s *Syncer) Run(ctx context.Context, period, resync time.Duration) {
	var last map[string]string
	var lastSync time.Time
	// lastErr: a failure is a warning once, its repeats (every period while a kubeconfig
	// is not written yet, say) debug lines, so a node being joined does not log one a tick.
	var lastErr string
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		want := Want(s.table())
		if last == nil || !maps.Equal(want, last) || time.Since(lastSync) >= resync {
			err := s.Sync(ctx, want)
			s.mu.Lock()
			s.status.Error = ""
			if err != nil {
				s.status.Error = err.Error()
			} else {
				s.status.Labels, s.status.Synced = want, time.Now()
			}
			s.mu.Unlock()
			switch log := logrus.WithError(err).WithField("node", s.node); {
			case err == nil:
				last, lastSync, lastErr = want, time.Now(), ""
			case err.Error() == lastErr:
				log.Debug("node labels not written; trying again")
			default:
				lastErr = err.Error()
				log.Warn("node labels not written; trying again (said once until it changes or succeeds)")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sync makes the node's labels under this package's prefixes exactly want, leaving every
// other label alone: one merge patch, which sets the wanted ones and deletes the rest of
// ours.
func (s *Syncer) Sync(ctx context.Context, want map[string]string) error {
	if s.client == nil {
		if _, err := os.Stat(s.kubeconfig); err != nil {
			return fmt.Errorf("node.kubeconfig %s: waiting for it: %w", s.kubeconfig, err)
		}
		if err := s.connect(); err != nil {
			return err
		}
	}
	var node struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	b, err := s.do(ctx, http.MethodGet, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &node); err != nil {
		return fmt.Errorf("node %s: %w", s.node, err)
	}
	patch := map[string]any{}
	for k, v := range node.Metadata.Labels {
		if ours(k) {
			if _, keep := want[k]; !keep {
				patch[k] = nil // deleted by the merge patch
			} else if want[k] == v {
				continue
			}
		}
	}
	for k, v := range want {
		if node.Metadata.Labels[k] != v {
			patch[k] = v
		}
	}
	if len(patch) == 0 {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": patch}})
	if err != nil {
		return err
	}
	if _, err := s.do(ctx, http.MethodPatch, body); err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(patch))
	logrus.WithFields(logrus.Fields{"node": s.node, "changed": keys}).Info("node labels written")
	return nil
}

func (s *Syncer) do(ctx context.Context, method string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/merge-patch+json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", s.node, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", s.node, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("node %s: %s %s: %s", s.node, method, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}
