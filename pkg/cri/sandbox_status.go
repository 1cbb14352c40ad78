package cri

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus reports one sandbox from memory.
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	st, info, err := s.Sandboxes.CRIStatus(req.GetPodSandboxId(), req.GetVerbose())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: st, Info: info, Timestamp: time.Now().UnixNano()}, nil
}
