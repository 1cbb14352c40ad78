package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// Exec returns the URL of a streaming exec session in a running container.
func (s *Server) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	c, err := s.Containers.Get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if st := c.Status().State; st != container.StateRunning {
		return nil, fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	if len(req.GetCmd()) == 0 {
		return nil, fmt.Errorf("cmd is empty: %w", errdefs.ErrInvalidArgument)
	}
	if !req.GetStdout() && !req.GetStderr() && !req.GetStdin() {
		return nil, fmt.Errorf("one of stdin, stdout and stderr must be set: %w", errdefs.ErrInvalidArgument)
	}
	req.ContainerId = c.ID
	return s.Streaming.GetExec(req)
}

// Attach returns the URL of a session on a running container's stdio (its monitor's).
func (s *Server) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	c, err := s.Containers.Get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if st := c.Status().State; st != container.StateRunning {
		return nil, fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	if !req.GetStdout() && !req.GetStderr() && !req.GetStdin() {
		return nil, fmt.Errorf("one of stdin, stdout and stderr must be set: %w", errdefs.ErrInvalidArgument)
	}
	if req.GetTty() != c.TTY() {
		return nil, fmt.Errorf("tty %v does not match the container's tty %v: %w", req.GetTty(), c.TTY(), errdefs.ErrInvalidArgument)
	}
	req.ContainerId = c.ID
	return s.Streaming.GetAttach(req)
}

// PortForward returns the URL of a port-forward session into a pod's network namespace.
func (s *Server) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	sb, err := s.Sandboxes.Get(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	for i, p := range req.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, fmt.Errorf("port[%d] %d is not a TCP port: %w", i, p, errdefs.ErrInvalidArgument)
		}
	}
	req.PodSandboxId = sb.ID
	return s.Streaming.GetPortForward(req)
}
