package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/protocache"
)

// ListPodSandbox lists sandboxes from the in-memory index (filters: id, state, labels).
// The items go out as the index keeps them encoded (as its field "items").
func (s *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	resp := &runtimeapi.ListPodSandboxResponse{}
	if protocache.IsPlain() {
		resp.Items = s.Sandboxes.List(req.GetFilter())
		return resp, nil
	}
	protocache.SetRepeated(resp, "items", s.Sandboxes.ListEncoded(req.GetFilter()))
	return resp, nil
}
