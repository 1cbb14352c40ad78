package cri

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/image"
	"github.com/rtshimd/rtshimd/internal/metrics"
)

// PullImage pulls an image with the request's credentials and returns its ID.
func (s *Server) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	if err := s.checkImageHandler("image", req.GetImage()); err != nil {
		return nil, err
	}
	a := req.GetAuth()
	start := time.Now()
	id, err := s.Images.Pull(ctx, req.GetImage().GetRuntimeHandler(), req.GetImage().GetImage(), image.Auth{
		ServerAddress: a.GetServerAddress(),
		Username:      a.GetUsername(), Password: a.GetPassword(), Auth: a.GetAuth(),
		IdentityToken: a.GetIdentityToken(), RegistryToken: a.GetRegistryToken(),
	}, req.GetSandboxConfig().GetMetadata().GetNamespace())
	if err != nil {
		metrics.PullDuration.WithLabelValues("error").Observe(time.Since(start).Seconds())
		return nil, err
	}
	metrics.PullDuration.WithLabelValues("ok").Observe(time.Since(start).Seconds())
	if im, err := s.Images.Status(req.GetImage().GetRuntimeHandler(), id); err == nil {
		metrics.PullBytes.Add(float64(im.Size))
	}
	return &runtimeapi.PullImageResponse{ImageRef: id}, nil
}
