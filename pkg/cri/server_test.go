package cri

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rtshimd/rtshimd/pkg/errdefs"
)

func TestInterceptorRecoversPanics(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/RunPodSandbox"}
	_, err := unaryInterceptor(context.Background(), nil, info, func(ctx context.Context, req any) (any, error) {
		panic("boom")
	})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "RunPodSandbox") || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panic became %v", err)
	}
}

func TestInterceptorMapsErrorKinds(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{fmt.Errorf("pod sandbox \"x\": %w", errdefs.ErrNotFound), codes.NotFound, `pod sandbox "x"`},
		{fmt.Errorf("config.hostname \"A\" bad: %w", errdefs.ErrInvalidArgument), codes.InvalidArgument, `config.hostname "A" bad`},
		{fmt.Errorf("handler \"kata\" not ready: %w", errdefs.ErrFailedPrecondition), codes.FailedPrecondition, `handler "kata" not ready`},
		{fmt.Errorf("name used: %w", errdefs.ErrAlreadyExists), codes.AlreadyExists, "name used"},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "wait: context deadline exceeded"},
		{fmt.Errorf("runc said no"), codes.Unknown, "runc said no"},
		{status.Error(codes.Aborted, "as is"), codes.Aborted, "as is"},
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/x/Y"}
	for _, tc := range cases {
		_, err := unaryInterceptor(context.Background(), nil, info, func(ctx context.Context, req any) (any, error) {
			return nil, tc.err
		})
		st := status.Convert(err)
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%v became %v %q, want %v %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
}
