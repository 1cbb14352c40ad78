package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListImages lists images, or the one the filter names.
func (s *Server) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	if err := s.checkImageHandler("filter.image", req.GetFilter().GetImage()); err != nil {
		return nil, err
	}
	imgs, err := s.Images.List(req.GetFilter().GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ListImagesResponse{Images: make([]*runtimeapi.Image, 0, len(imgs))}
	for _, im := range imgs {
		resp.Images = append(resp.Images, criImage(im))
	}
	return resp, nil
}
