package sandbox

import (
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/protocache"
)

// List returns the sandboxes that match filter, from memory. The messages are shared
// (built once per state of each sandbox): callers must not change them.
func (m *Manager) List(filter *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	return protocache.Messages(m.match(filter), (*Sandbox).listItem)
}

// ListEncoded is List's items in their wire encoding, for ListPodSandbox to send as they
// are (protocache.SetRepeated).
func (m *Manager) ListEncoded(filter *runtimeapi.PodSandboxFilter) [][]byte {
	return protocache.Encodings(m.match(filter), (*Sandbox).listItem)
}

// match picks the sandboxes filter selects. The index's lock is held only to copy it:
// the answers are built without it, so a List does not hold up a RunPodSandbox.
func (m *Manager) match(filter *runtimeapi.PodSandboxFilter) []*Sandbox {
	all := m.index.Pick(filter.GetId(), "")
	out := all[:0]
	for _, sb := range all {
		if f := filter.GetState(); f != nil && f.State != sb.criState() {
			continue
		}
		if !MatchLabels(filter.GetLabelSelector(), sb.config.Labels) {
			continue
		}
		out = append(out, sb)
	}
	return out
}

// listItem is the sandbox as List reports it, and its encoding; rebuilt when its state
// changes, the one field of it that does.
func (s *Sandbox) listItem() (*runtimeapi.PodSandbox, []byte) {
	state := s.criState()
	msg, enc := s.listed.Get(state, func() proto.Message {
		return &runtimeapi.PodSandbox{
			Id:             s.ID,
			Metadata:       s.config.Metadata,
			State:          state,
			CreatedAt:      s.CreatedAt,
			Labels:         s.config.Labels,
			Annotations:    s.config.Annotations,
			RuntimeHandler: s.RuntimeHandler,
		}
	})
	return msg.(*runtimeapi.PodSandbox), enc
}
