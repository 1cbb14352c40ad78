//go:build integration

package integration

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/rtshimd/rtshimd/internal/protocache"
)

// listFloorEnv names the socket a re-executed test binary serves the list floor on.
const listFloorEnv = "RTSHIMD_LIST_FLOOR_SOCK"

// startListFloor is the floor of kubelet's List and Version calls: a gRPC server in a
// process of its own (this test binary, re-executed) that answers with the daemon's own
// answers, encoded beforehand, and does nothing else, over a Unix socket, to the same
// client (cri-client) the daemon is timed with. What it takes is the transport, a wake-up
// of another process and the client's decode of an answer of that size; what the daemon
// takes beyond it is the daemon's.
// stop ends the server and closes the client (the benchmark's cleanups do too).
func startListFloor(b *testing.B, pods []*runtimeapi.PodSandbox, ctrs []*runtimeapi.Container) (rs internalapi.RuntimeService, stop func()) {
	dir := b.TempDir()
	sock := filepath.Join(dir, "floor.sock")
	for file, msg := range map[string]proto.Message{
		sock + ".pods": &runtimeapi.ListPodSandboxResponse{Items: pods},
		sock + ".ctrs": &runtimeapi.ListContainersResponse{Containers: ctrs},
	} {
		raw, err := proto.Marshal(msg)
		if err == nil {
			err = os.WriteFile(file, raw, 0o600)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), listFloorEnv+"="+sock)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Gone with the benchmark, even one killed before its cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	killServer := func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	b.Cleanup(killServer)
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(end) {
			b.Fatal("list floor server did not start")
		}
	}
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + sock).WithConnectionTimeout(time.Minute).Build(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	var closeOnce sync.Once
	closeClient := func() {
		closeOnce.Do(func() {
			if c, ok := rs.(interface{ Close(context.Context) error }); ok {
				_ = c.Close(context.Background())
			}
		})
	}
	b.Cleanup(closeClient)
	return rs, func() { closeClient(); killServer() }
}

// serveListFloor is the floor server's process (TestMain runs it when listFloorEnv is
// set): it serves the answers written beside sock until killed.
func serveListFloor(sock string) error {
	f := &listFloor{}
	var pods runtimeapi.ListPodSandboxResponse
	var ctrs runtimeapi.ListContainersResponse
	for file, msg := range map[string]proto.Message{sock + ".pods": &pods, sock + ".ctrs": &ctrs} {
		raw, err := os.ReadFile(file)
		if err == nil {
			err = proto.Unmarshal(raw, msg)
		}
		if err != nil {
			return err
		}
	}
	// Kept as the daemon keeps them (internal/protocache): each item encoded once.
	for _, p := range pods.Items {
		raw, err := proto.Marshal(p)
		if err != nil {
			return err
		}
		f.pods = append(f.pods, raw)
	}
	for _, c := range ctrs.Containers {
		raw, err := proto.Marshal(c)
		if err != nil {
			return err
		}
		f.ctrs = append(f.ctrs, raw)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	// The daemon's message limits; no interceptor, no logging.
	g := grpc.NewServer(grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(16<<20))
	runtimeapi.RegisterRuntimeServiceServer(g, f)
	return g.Serve(ln)
}

type listFloor struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	pods, ctrs [][]byte
}

func (f *listFloor) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "floor", RuntimeVersion: "0", RuntimeApiVersion: "v1"}, nil
}

func (f *listFloor) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	resp := &runtimeapi.ListPodSandboxResponse{}
	protocache.SetRepeated(resp, "items", f.pods)
	return resp, nil
}

func (f *listFloor) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	resp := &runtimeapi.ListContainersResponse{}
	protocache.SetRepeated(resp, "containers", f.ctrs)
	return resp, nil
}
