package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/image"
)

// ListImages lists images, or the one the filter names.
func (s *Server) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	if err := s.checkImageHandler("filter.image", req.GetFilter().GetImage()); err != nil {
		return nil, err
	}
	imgs, err := listImages(s.Images, req.GetFilter().GetImage())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ListImagesResponse{Images: make([]*runtimeapi.Image, 0, len(imgs))}
	for _, im := range imgs {
		resp.Images = append(resp.Images, criImage(im))
	}
	return resp, nil
}

// listImages lists the images of the filter's handler's store, or of every store with no
// handler named (each image names its handler in spec.runtime_handler, which kubelet's
// image GC passes back to RemoveImage); a filter's image narrows it to that image.
func listImages(images *image.Stores, filter *runtimeapi.ImageSpec) ([]*image.Image, error) {
	h := filter.GetRuntimeHandler()
	return images.List(h, h == "", filter.GetImage())
}
