package cri

import (
	"context"
	"errors"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/image"
)

// ImageStatus describes one image; an absent image is an empty answer, not an error.
// verbose adds the image config as JSON under "info".
func (s *Server) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	if err := s.checkImageHandler("image", req.GetImage()); err != nil {
		return nil, err
	}
	ref := req.GetImage().GetImage()
	im, err := s.Images.Status(req.GetImage().GetRuntimeHandler(), ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ImageStatusResponse{Image: criImage(im)}
	if req.GetVerbose() {
		cfg, err := s.Images.Config(req.GetImage().GetRuntimeHandler(), im.ID)
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(cfg)}
	}
	return resp, nil
}

func criImage(im *image.Image) *runtimeapi.Image {
	out := &runtimeapi.Image{
		Id:          im.ID,
		RepoTags:    im.RepoTags,
		RepoDigests: im.RepoDigests,
		Size:        im.Size,
		Pinned:      im.Pinned,
		Spec:        &runtimeapi.ImageSpec{Image: im.ID, RuntimeHandler: im.Handler},
	}
	uid, name := im.UID()
	if uid != nil {
		out.Uid = &runtimeapi.Int64Value{Value: *uid}
	}
	out.Username = name
	return out
}
