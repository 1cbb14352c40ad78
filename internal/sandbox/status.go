package sandbox

import (
	"encoding/json"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// All returns every sandbox, whatever its state.
func (m *Manager) All() []*Sandbox { return m.index.All() }

// Get finds a sandbox by ID or unique ID prefix.
func (m *Manager) Get(id string) (*Sandbox, error) { return m.index.Get(id) }

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
func (m *Manager) Count() int { return m.index.Len() }

// ReadyByHandler counts ready sandboxes by handler, and the sandbox containers among them
// (each has a monitor).
func (m *Manager) ReadyByHandler() (byHandler map[string]int, sandboxContainers int) {
	byHandler = map[string]int{}
	for _, sb := range m.index.All() {
		if sb.Status().State == StateReady {
			byHandler[sb.Handler]++
			if sb.SandboxContainer {
				sandboxContainers++
			}
		}
	}
	return byHandler, sandboxContainers
}
