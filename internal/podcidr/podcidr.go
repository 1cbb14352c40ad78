// Package podcidr keeps the pod CIDR kubelet gives the runtime (UpdateRuntimeConfig's
// runtime_config.network_config.pod_cidr): checked, in memory, and in a file under the
// state root, so a restarted daemon reports it without waiting for kubelet to send it
// again. Nothing renders it into a CNI config: rtshimd has no CNI config templates
// (containerd's conf_template); the node's CNI config carries its own ranges.
package podcidr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Field is the request field the value comes from, for messages.
const Field = "runtime_config.network_config.pod_cidr"

// file is what is kept on disk.
type file struct {
	PodCIDR string `json:"pod_cidr"`
}

// Store holds the pod CIDR; its methods are safe for concurrent use.
type Store struct {
	path string

	mu    sync.RWMutex
	value string
}

// Open reads the pod CIDR kept at path, if any. The Store is usable even with an error,
// which says why the kept value was not read (it starts with none: kubelet sends the pod
// CIDR again when it starts).
func Open(path string) (*Store, error) {
	s := &Store{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read pod CIDR: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return s, fmt.Errorf("read pod CIDR %s: %w", path, err)
	}
	if _, err := Parse(f.PodCIDR); err != nil {
		return s, fmt.Errorf("read pod CIDR %s: %w", path, err)
	}
	s.value = f.PodCIDR
	return s, nil
}

// Get returns the pod CIDR ("" while none was given).
func (s *Store) Get() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.value
}

// Set checks value and keeps it, on disk before it is served; it returns the value it
// replaced. An empty value changes nothing: kubelet sends one while the node has no pod
// CIDR yet, and the CRI says to omit it then.
func (s *Store) Set(value string) (previous string, err error) {
	value = strings.TrimSpace(value)
	if _, err := Parse(value); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	previous = s.value
	if value == "" || value == previous {
		return previous, nil
	}
	b, err := json.Marshal(file{PodCIDR: value})
	if err != nil {
		return "", err
	}
	if err := store.WriteFileAtomic(s.path, b, 0o600); err != nil {
		return "", fmt.Errorf("keep pod CIDR: %w", err)
	}
	s.value = value
	return previous, nil
}

// Parse splits a pod CIDR as kubelet sends it (one CIDR, or one per IP family joined by
// commas for a dual-stack node) and checks each; "" has none.
func Parse(value string) ([]netip.Prefix, error) {
	if value == "" {
		return nil, nil
	}
	var out []netip.Prefix
	for _, part := range strings.Split(value, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %q is not a CIDR (want e.g. 10.244.1.0/24, or an IPv4 and an IPv6 one joined by a comma): %w", Field, value, part, errdefs.ErrInvalidArgument)
		}
		out = append(out, p)
	}
	if len(out) > 2 || (len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4()) {
		return nil, fmt.Errorf("%s %q: at most one CIDR per IP family: %w", Field, value, errdefs.ErrInvalidArgument)
	}
	return out, nil
}
