package cri

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/network"
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
		{fmt.Errorf("handler \"kata\" cannot checkpoint: %w", errdefs.ErrNotImplemented), codes.Unimplemented, `handler "kata" cannot checkpoint`},
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

func TestSendPages(t *testing.T) {
	items := make([]int, 2*streamPage+50)
	for i := range items {
		items[i] = i
	}
	var sizes []int
	next := 0
	err := sendPages(items, func(p []int) error {
		sizes = append(sizes, len(p))
		for _, v := range p {
			if v != next {
				t.Fatalf("item %d out of order (want %d)", v, next)
			}
			next++
		}
		return nil
	})
	if err != nil || fmt.Sprint(sizes) != fmt.Sprint([]int{streamPage, streamPage, 50}) || next != len(items) {
		t.Errorf("pages %v, %v; sent %d of %d", sizes, err, next, len(items))
	}
	calls := 0
	_ = sendPages([]int{}, func([]int) error { calls++; return nil })
	if calls != 0 {
		t.Error("an empty list sent a message; the stream should just end")
	}
}

// The socket is 0660 and a directory made for it 0700, whatever the umask.
func TestListenSocketModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "sock")
	path := filepath.Join(dir, "rtshimd.sock")
	for i := 0; i < 2; i++ { // the second time over a stale socket
		ln, err := listenSocket(path)
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o660} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("%s mode %#o, want %#o", p, got, want)
			}
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		c.Close()
		ln.Close()
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("socket dir holds %d entries, want the socket alone", len(entries))
	}
}

func TestRuntimeReadyCondition(t *testing.T) {
	ready := &handlers.Handler{Name: "runc", Discovery: handlers.Discovery{Ready: true}}
	broken := &handlers.Handler{Name: "kata", Discovery: handlers.Discovery{Reason: "binary not found"}}
	if c := runtimeReady([]*handlers.Handler{broken, ready}); !c.Status {
		t.Errorf("with a ready handler: %v", c)
	}
	c := runtimeReady([]*handlers.Handler{broken})
	if c.Status || c.Reason != "NoRuntimeHandlerReady" || !strings.Contains(c.Message, "kata: binary not found") {
		t.Errorf("with none ready: %v", c)
	}
}

// Objects kept after an unreadable record journal make the runtime not ready, naming
// them and `rtshimd quarantine` (audit R7); with none kept the handlers decide.
func TestRecordsReadyCondition(t *testing.T) {
	if c := recordsReady("", ""); c != nil {
		t.Errorf("with nothing kept: %v", c)
	}
	c := recordsReady("2 pods still run, kept", "")
	if c == nil || c.Status || c.Type != runtimeapi.RuntimeReady || c.Reason != "RecordJournalUnreadable" ||
		!strings.Contains(c.Message, "2 pods still run") || !strings.Contains(c.Message, "rtshimd quarantine stop") {
		t.Errorf("with pods kept: %v", c)
	}
}

// kubelet sends mounts' noexec/nodev/nosuid (mount_options) only to a runtime whose
// Status says it honours them; internal/oci/mounts.go does.
func TestStatusAdvertisesFeatures(t *testing.T) {
	table, err := handlers.New(&config.Config{}, handlers.NewRuntimes(handlers.Env{}))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{
		Handlers: handlers.NewLive(context.Background(), table, nil, handlers.Probe{}),
		Network:  network.New(network.Options{ConfDir: t.TempDir()}),
	}
	resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if f := resp.GetFeatures(); !f.GetMountOptions() || !f.GetSupplementalGroupsPolicy() || !f.GetUserNamespacesHostNetwork() {
		t.Errorf("features %v, want mount_options, supplemental_groups_policy and user_namespaces_host_network", f)
	}
}
