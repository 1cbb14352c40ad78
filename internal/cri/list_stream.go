package cri

import (
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// streamPage is how many items go in one message of a Stream* list: well under gRPC's
// 16 MiB message limit for the largest items (stats with every interface).
const streamPage = 200

// sendPages sends items in pages of at least one item each, then the stream ends.
func sendPages[T any](items []T, send func([]T) error) error {
	for len(items) > 0 {
		n := min(streamPage, len(items))
		if err := send(items[:n]); err != nil {
			return err
		}
		items = items[n:]
	}
	return nil
}

// StreamPodSandboxes is ListPodSandbox in pages, for nodes with many pods.
func (s *Server) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	return sendPages(s.Sandboxes.List(req.GetFilter()), func(p []*runtimeapi.PodSandbox) error {
		return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: p})
	})
}

// StreamContainers is ListContainers in pages.
func (s *Server) StreamContainers(req *runtimeapi.StreamContainersRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	return sendPages(s.Containers.List(req.GetFilter()), func(p []*runtimeapi.Container) error {
		return stream.Send(&runtimeapi.StreamContainersResponse{Containers: p})
	})
}

// StreamContainerStats is ListContainerStats in pages.
func (s *Server) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	return sendPages(s.Stats.ListStats(req.GetFilter()), func(p []*runtimeapi.ContainerStats) error {
		return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: p})
	})
}

// StreamPodSandboxStats is ListPodSandboxStats in pages.
func (s *Server) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	return sendPages(s.Stats.ListPodStats(req.GetFilter()), func(p []*runtimeapi.PodSandboxStats) error {
		return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: p})
	})
}

// StreamImages is ListImages in pages.
func (s *Server) StreamImages(req *runtimeapi.StreamImagesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	if err := s.checkImageHandler("filter.image", req.GetFilter().GetImage()); err != nil {
		return err
	}
	imgs, err := listImages(s.Images, req.GetFilter().GetImage())
	if err != nil {
		return err
	}
	out := make([]*runtimeapi.Image, 0, len(imgs))
	for _, im := range imgs {
		out = append(out, criImage(im))
	}
	return sendPages(out, func(p []*runtimeapi.Image) error {
		return stream.Send(&runtimeapi.StreamImagesResponse{Images: p})
	})
}
