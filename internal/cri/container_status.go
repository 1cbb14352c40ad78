package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStatus reports one container from memory.
func (s *Server) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	st, info, err := s.Containers.CRIStatus(req.GetContainerId(), req.GetVerbose())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatusResponse{Status: st, Info: info}, nil
}
