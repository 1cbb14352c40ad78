package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/protocache"
)

// ListContainers lists containers from memory (filters: id, state, sandbox, labels). The
// items go out as the index keeps them encoded (as its field "containers").
func (s *Server) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	resp := &runtimeapi.ListContainersResponse{}
	if protocache.IsPlain() {
		resp.Containers = s.Containers.List(req.GetFilter())
		return resp, nil
	}
	protocache.SetRepeated(resp, "containers", s.Containers.ListEncoded(req.GetFilter()))
	return resp, nil
}
