package network

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/rtshimd/rtshimd/internal/cmdexit"
)

// pluginExec runs CNI plugins as libcni's own RawExec does, except that a plugin still
// running when its context ends is killed with its process group (a shell plugin's
// children too), and its output pipes are not waited for beyond pipeWait: with RawExec a
// hung plugin's child holding stdout keeps ADD waiting after the deadline.
type pluginExec struct {
	invoke.DefaultExec
}

// pipeWait bounds the wait for a killed plugin's output.
const pipeWait = time.Second

func newPluginExec() *pluginExec {
	return &pluginExec{invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}}
}

func (e *pluginExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	for try := 0; ; try++ {
		var stdout, stderr bytes.Buffer
		c := exec.CommandContext(ctx, path)
		c.Env = environ
		c.Stdin = bytes.NewReader(stdin)
		c.Stdout, c.Stderr = &stdout, &stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		c.WaitDelay = pipeWait
		err := c.Run()
		switch {
		case cmdexit.Succeeded(c, err):
			// A plugin that succeeded but left a child holding its output (a daemonized
			// helper) succeeded: its answer was read before it exited.
			if stderr.Len() > 0 {
				_, _ = stderr.WriteTo(os.Stderr) // informational, as RawExec does
			}
			return stdout.Bytes(), nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%s was killed unfinished: %w", filepath.Base(path), ctx.Err())
		case errors.Is(err, syscall.ETXTBSY) && try < 5:
			// The plugin is being written (an upgrade): RawExec retries too, within the deadline.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%s: %w", filepath.Base(path), ctx.Err())
			case <-time.After(time.Second):
			}
			continue
		}
		return nil, pluginErr(err, stdout.Bytes(), stderr.Bytes())
	}
}

// pluginErr is the plugin's own error (CNI's JSON on stdout), else what it printed.
func pluginErr(err error, stdout, stderr []byte) error {
	emsg := types.Error{}
	switch {
	case len(stdout) == 0 && len(stderr) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	case len(stdout) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed: %q: %v", string(stderr), err)
	default:
		if perr := json.Unmarshal(stdout, &emsg); perr != nil {
			emsg.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", string(stdout), perr)
		}
	}
	return &emsg
}
