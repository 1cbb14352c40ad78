package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/reload"
)

// reloadCmd asks the daemon serving the config's socket to reload, as SIGHUP does, and
// prints what the reload did. A file with a mistake is refused here already, with the
// same file:line message the daemon would log; the daemon is not asked.
func reloadCmd(args []string) error {
	cfg, err := loadConfig(args, nil)
	if err != nil {
		return fmt.Errorf("%w (not reloaded: the daemon keeps its configuration)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pid, err := socketPeer(cfg.Socket)
	if err != nil {
		return fmt.Errorf("find the daemon on %s: %w", cfg.Socket, err)
	}
	conn, err := grpc.NewClient("unix://"+cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	before, err := reloadStatus(ctx, client)
	if err != nil {
		return err
	}
	if before.Path != cfg.Path {
		return fmt.Errorf("the daemon on %s serves %q, not %q", cfg.Socket, before.Path, cfg.Path)
	}
	seq := 0
	if before.Last != nil {
		seq = before.Last.Seq
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("signal the daemon (pid %d): %w", pid, err)
	}
	for {
		st, err := reloadStatus(ctx, client)
		if err != nil {
			return err
		}
		if a := st.Last; a != nil && a.Seq > seq {
			change, _ := json.Marshal(a.Change)
			fmt.Printf("%s: %s (hash %.12s): %s\n", st.Path, a.Result, a.Hash, change)
			if len(a.RestartNeeded) > 0 {
				fmt.Printf("changed, but applied only at a restart: %s\n", strings.Join(a.RestartNeeded, ", "))
			}
			if a.Result == reload.Refused {
				return errors.New(a.Error)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the daemon (pid %d) did not report a reload: %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func reloadStatus(ctx context.Context, c runtimeapi.RuntimeServiceClient) (reload.Status, error) {
	var st reload.Status
	resp, err := c.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	raw := resp.GetInfo()["reload"]
	if err := json.Unmarshal([]byte(raw), &st); err != nil || st.Hash == "" {
		return st, fmt.Errorf("the daemon reports no reload status (an rtshimd without reload?): %q", raw)
	}
	return st, nil
}

// socketPeer is the pid of the process listening on a Unix socket (SO_PEERCRED): the
// daemon itself, with no pid file to go stale.
func socketPeer(path string) (int, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return int(cred.Pid), nil
}
