package sandbox

import (
	"encoding/json"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/idmap"
)

// All returns every sandbox, whatever its state.
func (m *Manager) All() []*Sandbox {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*Sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		out = append(out, sb)
	}
	return out
}

// Get finds a sandbox by ID or unique ID prefix.
func (m *Manager) Get(id string) (*Sandbox, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return idmap.Find(m.sandboxes, id, "pod_sandbox_id", "pod sandbox")
}

// MatchLabels reports whether labels has every key and value of the selector sel.
func MatchLabels(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (s *Sandbox) criState() runtimeapi.PodSandboxState {
	if s.Status().State == StateReady {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

// CRIStatus is the sandbox as PodSandboxStatus reports it; verbose adds the record.
func (m *Manager) CRIStatus(id string, verbose bool) (*runtimeapi.PodSandboxStatus, map[string]string, error) {
	sb, err := m.Get(id)
	if err != nil {
		return nil, nil, err
	}
	st := criStatusOf(sb)
	if !verbose {
		return st, nil, nil
	}
	info, err := json.Marshal(struct {
		Metadata *Metadata `json:"metadata"`
		Status   Status    `json:"status"`
	}{&sb.Metadata, sb.Status()})
	if err != nil {
		return nil, nil, err
	}
	return st, map[string]string{"info": string(info)}, nil
}

func networkStatus(ips []string) *runtimeapi.PodSandboxNetworkStatus {
	st := &runtimeapi.PodSandboxNetworkStatus{}
	if len(ips) > 0 {
		st.Ip = ips[0]
		for _, ip := range ips[1:] {
			st.AdditionalIps = append(st.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	return st
}

// criStatusOf is the sandbox's PodSandboxStatus, from memory.
func criStatusOf(sb *Sandbox) *runtimeapi.PodSandboxStatus {
	cfg := sb.config
	return &runtimeapi.PodSandboxStatus{
		Id:          sb.ID,
		Metadata:    cfg.Metadata,
		State:       sb.criState(),
		CreatedAt:   sb.CreatedAt,
		Network:     networkStatus(sb.Status().IPs),
		Labels:      cfg.Labels,
		Annotations: cfg.Annotations,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
		RuntimeHandler: sb.RuntimeHandler,
	}
}

// Count returns the number of sandboxes (for logs and tests).
func (m *Manager) Count() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.sandboxes)
}

// ReadyByHandler counts ready sandboxes by handler, and the sandbox containers among them
// (each has a monitor).
func (m *Manager) ReadyByHandler() (byHandler map[string]int, sandboxContainers int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	byHandler = map[string]int{}
	for _, sb := range m.sandboxes {
		if sb.Status().State == StateReady {
			byHandler[sb.Handler]++
			if sb.SandboxContainer {
				sandboxContainers++
			}
		}
	}
	return byHandler, sandboxContainers
}
