package cri

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus reports one sandbox and its containers from memory: kubelet's Evented
// PLEG reads the pod's containers from containers_statuses alone (internal/sandbox cannot ask
// internal/container, which imports it, so they are joined here).
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	st, info, err := s.Sandboxes.CRIStatus(req.GetPodSandboxId(), req.GetVerbose())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: st, Info: info}
	if s.Containers != nil {
		resp.ContainersStatuses = s.Containers.PodStatuses(st.GetId())
	}
	resp.Timestamp = time.Now().UnixNano()
	return resp, nil
}
