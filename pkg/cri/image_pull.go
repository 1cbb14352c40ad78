package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/pkg/image"
)

// PullImage pulls an image with the request's credentials and returns its ID.
func (s *Server) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	a := req.GetAuth()
	id, err := s.Images.Pull(ctx, req.GetImage().GetImage(), image.Auth{
		Username: a.GetUsername(), Password: a.GetPassword(), Auth: a.GetAuth(),
		IdentityToken: a.GetIdentityToken(), RegistryToken: a.GetRegistryToken(),
	})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PullImageResponse{ImageRef: id}, nil
}
