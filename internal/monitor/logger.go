package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"syscall"

	"github.com/rtshimd/rtshimd/internal/store"
)

// LoggerConfigFile is the LoggerConfig in a logger's directory, written by the daemon.
const LoggerConfigFile = "logger.json"

// LoggerMode is the monitor's first argument in logger mode: `rtshim-monitor logger <dir>`.
const LoggerMode = "logger"

// LoggerConfig configures the monitor in logger mode: a shim v2 starts it as the binary
// logger of one container (containerd's binary:// protocol: the container's stdout and
// stderr on fds 3 and 4). It writes the CRI log and serves monitor.sock in its directory
// with the attach and reopen commands, until the container's output ends.
type LoggerConfig struct {
	// LogPath receives the output in the CRI log format; empty discards it.
	LogPath string `json:"log_path,omitempty"`
	// LogDir is the pod's log directory (see Config.LogDir).
	LogDir string `json:"log_dir,omitempty"`
	// Stdin is the stdin FIFO the shim was given ("" for none): attach clients' input is
	// written into it. StdinOnce closes the logger's end when the first client's stdin
	// ends (the container sees EOF once the shim's CloseIO closes the shim's end too).
	Stdin     string `json:"stdin,omitempty"`
	StdinOnce bool   `json:"stdin_once,omitempty"`
	// Terminal: the container has a terminal, whose output comes as stdout alone.
	Terminal bool `json:"terminal,omitempty"`
	// Stdout and Stderr are the output FIFOs the shim was given, when the daemon starts
	// the logger (StartLogger) rather than the shim; Stderr is "" with a terminal.
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
}

// StartLogger starts binary in logger mode on the FIFOs cfg names (written to dir first),
// in a session of its own so it outlives the daemon, and returns once it holds the stdin
// FIFO's write end and serves attach: then the shim may open the FIFOs.
func StartLogger(ctx context.Context, binary, dir string, cfg LoggerConfig) error {
	if err := WriteLoggerConfig(dir, cfg); err != nil {
		return err
	}
	p, r, err := spawn(binary, []string{LoggerMode, dir}, dir, nil, "CONTAINER_ID="+filepath.Base(dir))
	if err != nil {
		return fmt.Errorf("start logger %s: %w", binary, err)
	}
	defer r.Close()
	ready := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r) // fd 3 closes when the logger is ready
		close(ready)
	}()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("waiting for the logger: %w", ctx.Err())
	}
}

// WriteLoggerConfig writes cfg into dir for the logger that LoggerURI(..., dir) starts.
func WriteLoggerConfig(dir string, cfg LoggerConfig) error {
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := store.WriteFileAtomic(filepath.Join(dir, LoggerConfigFile), data, 0o600); err != nil {
		return fmt.Errorf("write logger config: %w", err)
	}
	return nil
}

// LoggerURI is the stdout URI to give a shim so that it runs monitorBinary in logger
// mode for dir: binary:///path/rtshim-monitor?logger=<dir>, which the shim runs as
// `rtshim-monitor logger <dir>`.
func LoggerURI(monitorBinary, dir string) string {
	u := url.URL{Scheme: "binary", Path: monitorBinary, RawQuery: url.Values{LoggerMode: {dir}}.Encode()}
	return u.String()
}
