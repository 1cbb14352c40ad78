package shim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	events "github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/ttrpc/events/v1"
	"github.com/containerd/ttrpc"
	"github.com/containerd/typeurl/v2"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/rtshimd/rtshimd/internal/fsafe/unixsock"
)

// Event topics (containerd's) of the events a shim publishes.
const (
	TopicTaskExit = "/tasks/exit"
	TopicTaskOOM  = "/tasks/oom"
)

// Event is one event a shim published, decoded.
type Event struct {
	Namespace   string
	Topic       string // TopicTaskExit, TopicTaskOOM, /tasks/create, /tasks/start, /tasks/delete, /tasks/exec-added ...
	Timestamp   time.Time
	ContainerID string // the task it concerns
	// For TopicTaskExit: the process (the container id for its init, else the exec id),
	// its pid and exit.
	ProcessID string
	Pid       uint32
	Exit      Exit
}

// EventServer receives the events of shims started with Config.TTRPCAddress set to its
// socket: containerd's ttrpc Events service, which they publish to. A shim whose
// TTRPC_ADDRESS names no socket waits 5 s per event to dial it, and with a backlog of
// events blocks its task API; one whose address refuses connections (the daemon is
// down, its socket left in place) logs each event's failure and retries 5 times.
type EventServer struct {
	server *ttrpc.Server
	ln     *net.UnixListener
}

// ServeEvents listens on path (replacing a stale socket) and passes each event to handle
// (which must not block; nil discards them). The socket file stays after Close, so that
// while the daemon is down shims are refused at once rather than kept waiting.
func ServeEvents(path string, handle func(Event)) (*EventServer, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("shim events: %w", err)
	}
	ln, err := unixsock.Listen(path, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shim events: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	server, err := ttrpc.NewServer()
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("shim events: %w", err)
	}
	eventsapi.RegisterTTRPCEventsService(server, forwarder(handle))
	go func() {
		if err := server.Serve(context.Background(), ln); err != nil && !errors.Is(err, ttrpc.ErrServerClosed) {
			logrus.WithField("socket", path).Warnf("shim events: %v", err)
		}
	}()
	return &EventServer{server: server, ln: ln}, nil
}

// Close stops serving; the socket file stays.
func (s *EventServer) Close() error {
	return s.server.Close()
}

type forwarder func(Event)

func (f forwarder) Forward(ctx context.Context, req *eventsapi.ForwardRequest) (*emptypb.Empty, error) {
	env := req.GetEnvelope()
	if f == nil || env == nil {
		return &emptypb.Empty{}, nil
	}
	e := Event{Namespace: env.Namespace, Topic: env.Topic, Timestamp: timeOf(env.Timestamp)}
	if env.Event != nil {
		if v, err := typeurl.UnmarshalAny(env.Event); err == nil {
			switch v := v.(type) {
			case *events.TaskExit:
				e.ContainerID, e.ProcessID, e.Pid = v.ContainerID, v.ID, v.Pid
				e.Exit = Exit{Status: v.ExitStatus, ExitedAt: timeOf(v.ExitedAt)}
			case interface{ GetContainerID() string }:
				e.ContainerID = v.GetContainerID()
			}
		}
	}
	f(e)
	return &emptypb.Empty{}, nil
}
