package sandbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/rtshimd/rtshimd/internal/network"
)

// cniPod describes the sandbox to CNI: its netns, identity and hostPorts.
func (m *Manager) cniPod(sb *Sandbox) network.Pod {
	md := sb.config.GetMetadata()
	p := network.Pod{SandboxID: sb.ID, NetNS: sb.NetNS, Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()}
	for _, pm := range sb.config.GetPortMappings() {
		if pm.HostPort <= 0 {
			continue
		}
		p.PortMappings = append(p.PortMappings, network.PortMapping{
			HostPort: pm.HostPort, ContainerPort: pm.ContainerPort,
			Protocol: strings.ToLower(pm.Protocol.String()), HostIP: pm.HostIp,
		})
	}
	return p
}

// teardownNetwork runs CNI DEL once for a pod that was attached; it is retried by the
// next Stop or Remove if it fails.
func (m *Manager) teardownNetwork(ctx context.Context, sb *Sandbox) error {
	if sb.Network == "" || sb.Status().NetworkDown || m.opts.Network == nil {
		return nil
	}
	if err := m.opts.Network.Teardown(ctx, sb.NetworkDir, sb.Network, m.cniPod(sb)); err != nil {
		return fmt.Errorf("pod sandbox %s: %w", sb.ID, err)
	}
	// A pod without its network is not ready, in the same write: a crash between the two
	// must not leave it listed ready with no address.
	return m.update(sb, func(st *Status) {
		st.NetworkDown, st.IPs = true, nil
		if st.State == StateReady {
			st.State = StateNotReady
		}
	})
}
