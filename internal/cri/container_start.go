package cri

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/metrics"
)

// StartContainer starts a created container.
func (s *Server) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	start := time.Now()
	if err := s.Containers.Start(ctx, req.GetContainerId()); err != nil {
		return nil, err
	}
	if c, err := s.Containers.Get(req.GetContainerId()); err == nil {
		metrics.StartDuration.WithLabelValues("container", c.Handler).Observe(time.Since(start).Seconds())
	}
	return &runtimeapi.StartContainerResponse{}, nil
}
