package cri

import (
	"context"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdateRuntimeConfig keeps the pod CIDR kubelet sends (Status verbose reports it as
// "pod_cidr"). Unlike containerd, nothing is rendered from it: rtshimd has no CNI config
// templates.
func (s *Server) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	cidr := req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()
	prev, err := s.PodCIDR.Set(cidr)
	if err != nil {
		return nil, err
	}
	now := s.PodCIDR.Get()
	log := logrus.WithFields(logrus.Fields{"pod_cidr": now, "previous": prev})
	if now != prev {
		log.Info("pod CIDR set (UpdateRuntimeConfig)")
	} else {
		// kubelet sends it at every start, and "" while the node has none.
		log.WithField("sent", cidr).Debug("pod CIDR unchanged")
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}
