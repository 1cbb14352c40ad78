package cri

import (
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// GetContainerEvents streams container and sandbox lifecycle events until the client
// leaves; a client that falls behind is cut off with ResourceExhausted.
func (s *Server) GetContainerEvents(req *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	if s.Events == nil {
		return errors.New("events are not available")
	}
	sub := s.Events.Subscribe()
	defer s.Events.Unsubscribe(sub)
	// The header says the subscription is in place: a client that waits for it
	// (stream.Header()) is sent every event published from then on.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	for {
		select {
		case ev := <-sub.C:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-sub.Dropped:
			return status.Error(codes.ResourceExhausted, "event subscriber fell behind and was cut off; subscribe again and relist")
		case <-stream.Context().Done():
			return nil
		case <-s.stopping:
			return status.Error(codes.Unavailable, "rtshimd is shutting down; subscribe again once it is back")
		}
	}
}
