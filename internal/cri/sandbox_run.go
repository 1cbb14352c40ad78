package cri

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/metrics"
)

// RunPodSandbox creates and starts a pod sandbox through the handler its RuntimeClass names.
func (s *Server) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	start := time.Now()
	id, handler, err := s.Sandboxes.Run(ctx, req.GetConfig(), req.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	metrics.StartDuration.WithLabelValues("pod", handler).Observe(time.Since(start).Seconds())
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}
