package cri

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// CheckpointContainer writes a checkpoint archive of a running container (CRIU, through
// the runtime's checkpoint; the container keeps running) to request.location. A timeout
// of 0 is the CRI default: the call's own deadline.
func (s *Server) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	if t := req.GetTimeout(); t < 0 {
		return nil, fmt.Errorf("timeout %d is negative (seconds; 0 for the default): %w", t, errdefs.ErrInvalidArgument)
	}
	timeout := time.Duration(req.GetTimeout()) * time.Second
	if err := s.Containers.Checkpoint(ctx, req.GetContainerId(), req.GetLocation(), timeout); err != nil {
		return nil, err
	}
	return &runtimeapi.CheckpointContainerResponse{}, nil
}
