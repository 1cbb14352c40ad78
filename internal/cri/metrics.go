package cri

import (
	"context"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/stats"
)

// ListMetricDescriptors describes the cAdvisor-style metrics of ListPodSandboxMetrics.
func (s *Server) ListMetricDescriptors(ctx context.Context, req *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: stats.MetricDescriptors()}, nil
}

// ListPodSandboxMetrics returns the metrics of every ready pod and its containers.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: s.Stats.PodMetrics()}, nil
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics in pages.
func (s *Server) StreamPodSandboxMetrics(req *runtimeapi.StreamPodSandboxMetricsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	return sendPages(s.Stats.PodMetrics(), func(p []*runtimeapi.PodSandboxMetrics) error {
		return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: p})
	})
}
