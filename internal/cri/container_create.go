package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CreateContainer creates a container in a ready pod sandbox from a pulled image.
func (s *Server) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	if err := s.checkContainerImageHandlers(req.GetPodSandboxId(), req.GetConfig()); err != nil {
		return nil, err
	}
	id, err := s.Containers.Create(ctx, req.GetPodSandboxId(), req.GetConfig())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}
