package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveImage removes an image by ID, tag or digest; idempotent.
func (s *Server) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	if err := s.checkImageHandler("image", req.GetImage()); err != nil {
		return nil, err
	}
	if err := s.Images.Remove(req.GetImage().GetRuntimeHandler(), req.GetImage().GetImage()); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}
