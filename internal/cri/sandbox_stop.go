package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopPodSandbox stops the pod's containers, then the pod, under the pod's lifecycle lock
// (no container is made or started meanwhile), as containerd's does; idempotent, and no
// error if the pod is already gone.
func (s *Server) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	if err := s.Sandboxes.Stop(ctx, req.GetPodSandboxId(), s.Containers); err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}
