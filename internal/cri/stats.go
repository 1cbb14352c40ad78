package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/protocache"
)

// ContainerStats reads one container's usage from its cgroup and writable layer, at the
// call.
func (s *Server) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	st, err := s.Stats.ContainerStats(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats is the usage of the running containers the filter selects, from the
// stats collector's latest readings (stats.collection_period; stats.Service.ListStats).
// The items go out as encoded once per reading (as the field "stats").
func (s *Server) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	resp := &runtimeapi.ListContainerStatsResponse{}
	if protocache.IsPlain() {
		resp.Stats = s.Stats.ListStats(req.GetFilter())
		return resp, nil
	}
	protocache.SetRepeated(resp, "stats", s.Stats.ListStatsEncoded(req.GetFilter()))
	return resp, nil
}

// PodSandboxStats reads one pod's usage, its network and its containers', at the call.
func (s *Server) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	st, err := s.Stats.PodStats(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

// ListPodSandboxStats is the usage of the ready pods the filter selects, from the stats
// collector's latest readings (stats.Service.ListPodStats).
func (s *Server) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: s.Stats.ListPodStats(req.GetFilter())}, nil
}
