// Package shim drives one containerd shim v2 process (containerd-shim-runc-v2,
// containerd-shim-kata-v2, ...) over ttrpc with the Task API, without containerd's daemon.
// One shim serves a pod: it is started for the sandbox container, and the pod's other
// containers are created through the same Client (containerd's grouping by sandbox id).
//
// Layout, as containerd has it: every container has a bundle directory holding its
// config.json, and the bundle's base name must be the container's id (the runc shim's
// `delete` finds the bundle as ../<id> from its working directory). In the sandbox's bundle
// the shim writes `address` (its ttrpc socket, under /run/containerd/s/); this package
// adds `shim.log` (the shim's own log), `log` (a link to it, which the shim opens) and
// `shim.pid`, and `shim-task` in each bundle with a task. The runc shim adds `runtime`,
// `options.json`, `init.pid` and `log.json` to a task's bundle, and keeps runc's state
// under /run/containerd/runc/<namespace>/<id>.
package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/ttrpc"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// DefaultNamespace is the containerd namespace shims are told when Config leaves it empty.
const DefaultNamespace = "rtshimd"

// Files in the sandbox bundle.
const (
	// AddressFile is written by the shim's `start`: its ttrpc address (unix://...).
	AddressFile = "address"
	// LogFile receives the shim's own log. The shim opens "log" (containerd makes that a
	// FIFO it reads); here "log" links to this regular file, which the shim then writes
	// directly, so its log needs no reader and survives daemon restarts.
	LogFile = "shim.log"
	// PidFile records the shim's pid, so Cleanup can kill a shim that hangs.
	PidFile = "shim.pid"
	// TaskFile marks a bundle (any container's) in which a task was created and not yet
	// deleted: what Cleanup has the shim's delete clean up.
	TaskFile = "shim-task"

	shimLogLink = "log"
)

// ErrShimDied is wrapped by every error of a call whose shim connection closed: the shim
// exited or was killed. Cleanup is then what remains to do.
var ErrShimDied = errors.New("shim died")

// Config names one shim.
type Config struct {
	Binary    string // the shim binary (absolute)
	Namespace string // containerd namespace the shim is told; DefaultNamespace if empty
	ID        string // the shim's id: the pod sandbox id
	Bundle    string // the sandbox container's bundle dir (holds config.json); the shim's cwd
	// Address is what containerd passes as -address (its own gRPC socket). The shim v2
	// servers of containerd 1.3+ and Kata do not dial it: it only seeds the hash that
	// names their socket (/run/containerd/s/sha256(Address/Namespace/ID)), so it must
	// stay the same for the shim's lifetime. Events go to TTRPCAddress instead. Empty
	// means /run/rtshimd/shim (never listened on).
	Address string
	// TTRPCAddress is where the shim publishes task events (TTRPC_ADDRESS): the socket
	// of an EventServer. Empty: the runc shim fails each publish at once and logs it,
	// with its retries (7 lines per event); Kata logs the events instead. Never a path
	// where no socket file exists: the runc shim then spends 5 s dialing per event,
	// its events back up and it takes 5 s more to exit.
	TTRPCAddress string
	Debug        bool
}

func (cfg *Config) setDefaults() error {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Address == "" {
		cfg.Address = "/run/rtshimd/shim"
	}
	switch {
	case !filepath.IsAbs(cfg.Binary):
		return fmt.Errorf("shim %s: binary %q is not an absolute path: %w", cfg.ID, cfg.Binary, errdefs.ErrInvalidArgument)
	case cfg.ID == "":
		return fmt.Errorf("shim: no id: %w", errdefs.ErrInvalidArgument)
	case !filepath.IsAbs(cfg.Bundle):
		return fmt.Errorf("shim %s: bundle %q is not an absolute path: %w", cfg.ID, cfg.Bundle, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Client is a connection to one running shim. Its methods are safe for concurrent use.
type Client struct {
	cfg     Config
	address string
	pid     int
	client  *ttrpc.Client
	task    taskapi.TTRPCTaskService
	closed  atomic.Bool   // Close was called
	gone    chan struct{} // closed when the connection ends
	bundles sync.Map      // task id → bundle, from Create
}

// Start starts the shim for cfg (`<shim> ... -id ID start` in the bundle, as containerd
// does), or connects to it if it already runs, and returns a connected Client.
func Start(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if c, err := Connect(ctx, cfg); err == nil {
		return c, nil
	}
	log := logrus.WithFields(logrus.Fields{"shim": cfg.ID, "binary": cfg.Binary})
	if err := prepareLog(cfg.Bundle); err != nil {
		return nil, fmt.Errorf("shim %s: start: %w", cfg.ID, err)
	}
	args := []string{"-id", cfg.ID}
	if cfg.Debug {
		args = append(args, "-debug")
	}
	out, err := runShim(ctx, cfg, append(args, "start"))
	if err != nil {
		return nil, fmt.Errorf("shim %s: start: %w%s", cfg.ID, err, oomScoreHint(err))
	}
	address := strings.TrimSpace(string(out))
	if address == "" {
		return nil, fmt.Errorf("shim %s: start: printed no address", cfg.ID)
	}
	c, err := dial(ctx, cfg, address)
	if err != nil {
		return nil, fmt.Errorf("shim %s: start: %w", cfg.ID, err)
	}
	log.WithFields(logrus.Fields{"address": address, "pid": c.pid}).Debug("shim started")
	return c, nil
}

// oomScoreHint says what a shim that failed to lower its own oom_score_adj needs. Shims
// protect themselves from the OOM killer (gVisor's sets -999 and gives up when it cannot),
// which takes CAP_SYS_RESOURCE, or a daemon whose oom_score_adj is already that low (the
// kernel lets a process go down to the lowest value its ancestors were given): systemd
// gives rtshimd -999 through its unit's OOMScoreAdjust.
func oomScoreHint(err error) string {
	if s := err.Error(); strings.Contains(s, "oom_score_adj") && strings.Contains(s, "permission denied") {
		return " (the shim lowers its own oom_score_adj, which needs CAP_SYS_RESOURCE or a daemon started with a low oom_score_adj: run rtshimd from contrib/systemd/rtshimd.service, whose OOMScoreAdjust=-999 allows it)"
	}
	return ""
}

// prepareLog makes the bundle's "log" a link to a fresh shim.log. The shim writes it from
// offset 0 (it opens it without O_APPEND), so an old log is moved aside, not appended to.
func prepareLog(bundle string) error {
	path := filepath.Join(bundle, LogFile)
	if err := os.Rename(path, path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create shim log: %w", err)
	}
	f.Close()
	link := filepath.Join(bundle, shimLogLink)
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Symlink(LogFile, link)
}

// runShim runs the shim binary for one action in the bundle and returns its stdout; on
// failure the error carries its stderr.
func runShim(ctx context.Context, cfg Config, args []string) ([]byte, error) {
	// -publish-binary is for shims that exec a binary to publish events (before
	// containerd 1.3); empty, so nothing of ours is ever run that way.
	full := append([]string{"-namespace", cfg.Namespace, "-address", cfg.Address, "-publish-binary", ""}, args...)
	cmd := exec.CommandContext(ctx, cfg.Binary, full...)
	cmd.Dir = cfg.Bundle
	cmd.Env = shimEnv(cfg)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, as containerd does: the shim it forks stays in it, out of
	// reach of signals to the daemon's group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Should the shim it forks hold our output pipes, do not wait for it to end.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(cfg.Binary), args[len(args)-1], err, msg)
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		logrus.WithFields(logrus.Fields{"shim": cfg.ID, "action": args[len(args)-1]}).Debugf("shim stderr: %s", s)
	}
	return stdout.Bytes(), nil
}

// shimEnv is the daemon's environment with TTRPC_ADDRESS set as configured (a shim
// inherits it into its long-running process, which needs PATH to find runc).
func shimEnv(cfg Config) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TTRPC_ADDRESS=") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			env = append(env, kv)
		}
	}
	return append(env, "TTRPC_ADDRESS="+cfg.TTRPCAddress)
}

// Connect connects to the running shim of cfg, from the address its start recorded in
// the bundle: after a daemon restart. errdefs.ErrNotFound if none was started; an error
// wrapping ErrShimDied if it no longer answers.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(cfg.Bundle, AddressFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("shim %s: connect: no %s in the bundle: %w", cfg.ID, AddressFile, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("shim %s: connect: %w", cfg.ID, err)
	}
	c, err := dial(ctx, cfg, strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("shim %s: connect: %w", cfg.ID, err)
	}
	return c, nil
}

// socketPath turns a shim address into a path to dial: unix://path, or an abstract
// socket name without the scheme (the shims of containerd 1.4 and older).
func socketPath(address string) string {
	if p, ok := strings.CutPrefix(address, "unix://"); ok {
		return p
	}
	return "\x00" + address
}

func dial(ctx context.Context, cfg Config, address string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socketPath(address))
	if err != nil {
		// Nothing listens: the shim is gone (its socket may be left behind).
		return nil, fmt.Errorf("dial %s: %w (%w)", address, ErrShimDied, err)
	}
	c := &Client{cfg: cfg, address: address, gone: make(chan struct{})}
	c.client = ttrpc.NewClient(conn, ttrpc.WithOnClose(func() { close(c.gone) }))
	c.task = taskapi.NewTTRPCTaskClient(c.client)
	resp, err := c.task.Connect(ctx, &taskapi.ConnectRequest{ID: cfg.ID})
	if err != nil {
		c.client.Close()
		return nil, c.wrap("connect", cfg.ID, err)
	}
	c.pid = int(resp.ShimPid)
	if c.pid > 0 {
		if err := os.WriteFile(filepath.Join(cfg.Bundle, PidFile), []byte(strconv.Itoa(c.pid)), 0o600); err != nil {
			logrus.WithField("shim", cfg.ID).Warnf("record shim pid: %v", err)
		}
	}
	return c, nil
}

// Close closes the connection; the shim keeps running.
func (c *Client) Close() error {
	c.closed.Store(true)
	return c.client.Close()
}

// Pid is the shim's pid, as it reported it (0 if it did not).
func (c *Client) Pid() int { return c.pid }

// Address is the shim's ttrpc address.
func (c *Client) Address() string { return c.address }

// Done is closed when the connection ends: after Close, or when the shim dies.
func (c *Client) Done() <-chan struct{} { return c.gone }

// shutdownWait bounds Shutdown's wait for the shim's exit: the runc shim ignores the
// request while it has tasks, and otherwise takes up to 5 s to flush its events.
var shutdownWait = 10 * time.Second

// Shutdown asks the shim to exit, which it does once it has no tasks left (delete them
// first), and waits until it has gone and its socket with it. errdefs.ErrFailedPrecondition
// if it stays (it still has tasks).
func (c *Client) Shutdown(ctx context.Context) error {
	// A shim may exit before it answers (Kata does): a closed connection is success.
	if _, err := c.task.Shutdown(ctx, &taskapi.ShutdownRequest{ID: c.cfg.ID}); err != nil {
		if err := c.wrap("shutdown", c.cfg.ID, err); !errors.Is(err, ErrShimDied) {
			return err
		}
	}
	// The shim answers first and exits after: wait for the connection to drop.
	timer := time.NewTimer(shutdownWait)
	defer timer.Stop()
	select {
	case <-c.gone:
	case <-ctx.Done():
		return fmt.Errorf("shim %s: shutdown: %w", c.cfg.ID, ctx.Err())
	case <-timer.C:
		return fmt.Errorf("shim %s: shutdown: the shim did not exit within %v (tasks left?): %w", c.cfg.ID, shutdownWait, errdefs.ErrFailedPrecondition)
	}
	if err := waitGone(ctx, c.pid, c.cfg); err != nil {
		return fmt.Errorf("shim %s: shutdown: %w", c.cfg.ID, err)
	}
	// The shim removes its socket on the way out; make sure of it.
	removeSocket(c.address)
	removeFiles(c.cfg.Bundle)
	return nil
}

// Cleanup cleans up after the shim of cfg, which died (or hangs: it is killed first).
// If a task was created in the bundle (see TaskFile) it runs `<shim> ... -id ID delete`
// there, as containerd does for a dead shim (the runc shim force-deletes the container,
// unmounts <bundle>/rootfs and reports the exit); it removes the shim's socket and the
// files in the bundle that name it. Idempotent; nothing to do once the bundle is gone.
// For the pod's other containers, call it with ID and Bundle set to each container's.
func Cleanup(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	if _, err := os.Stat(cfg.Bundle); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if pid := readPid(cfg.Bundle); pid > 0 && isShim(pid, cfg) {
		_ = unix.Kill(pid, unix.SIGKILL)
		if err := waitGone(ctx, pid, cfg); err != nil {
			return fmt.Errorf("shim %s: cleanup: %w", cfg.ID, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Bundle, AddressFile)); err == nil {
		removeSocket(strings.TrimSpace(string(b)))
	}
	removeFiles(cfg.Bundle)
	// The shim's delete needs the task's files (the runc shim fails without the
	// "runtime" file its create writes): only a created task has anything to delete.
	if _, err := os.Stat(filepath.Join(cfg.Bundle, TaskFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if _, err := runShim(ctx, cfg, []string{"-id", cfg.ID, "-bundle", cfg.Bundle, "delete"}); err != nil {
		return fmt.Errorf("shim %s: cleanup: %w", cfg.ID, err)
	}
	_ = os.Remove(filepath.Join(cfg.Bundle, TaskFile))
	return nil
}

// DeleteLeftover runs the shim binary's delete for the task of cfg (ID and Bundle) if a
// create was sent for it (TaskFile) and the live shim does not know it: what the runtime
// made before the create was abandoned is removed. Nothing to do without TaskFile.
func DeleteLeftover(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	taskFile := filepath.Join(cfg.Bundle, TaskFile)
	if _, err := os.Stat(taskFile); err != nil {
		return nil
	}
	if _, err := runShim(ctx, cfg, []string{"-id", cfg.ID, "-bundle", cfg.Bundle, "delete"}); err != nil {
		return fmt.Errorf("shim %s: delete leftover of %s: %w", cfg.ID, cfg.ID, err)
	}
	return os.Remove(taskFile)
}

func removeSocket(address string) {
	if p, ok := strings.CutPrefix(address, "unix://"); ok {
		_ = os.Remove(p)
	}
}

// removeFiles removes what names the shim in the bundle; its log stays.
func removeFiles(bundle string) {
	for _, name := range []string{AddressFile, PidFile} {
		_ = os.Remove(filepath.Join(bundle, name))
	}
}

func readPid(bundle string) int {
	b, err := os.ReadFile(filepath.Join(bundle, PidFile))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// isShim tells whether pid is still our shim (and not a reused pid): its command line
// names our binary and id.
func isShim(pid int, cfg Config) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	if len(args) == 0 || filepath.Base(args[0]) != filepath.Base(cfg.Binary) {
		return false
	}
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-id" && args[i+1] == cfg.ID {
			return true
		}
	}
	return false
}

// waitGone waits until the shim process pid has exited (a zombie counts: its parent is
// init, not us).
func waitGone(ctx context.Context, pid int, cfg Config) error {
	if pid <= 0 {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for isShim(pid, cfg) && !zombie(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("shim process %d did not exit", pid)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}
