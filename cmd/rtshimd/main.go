// rtshimd is a CRI runtime that runs each pod through the OCI runtime its RuntimeClass
// handler names. This file holds flags, wiring and subcommands only.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/BurntSushi/toml"
	"github.com/containers/storage/pkg/reexec"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/configs"
	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/cri"
	"github.com/rtshimd/rtshimd/internal/reload"
)

const defaultConfigPath = "/etc/rtshimd/config.toml"

const usage = `usage: rtshimd [--config FILE] [--log-level LEVEL]   run the daemon
       rtshimd config default                          print the default configuration
       rtshimd config check [--config FILE]            validate a configuration file and its drop-ins
       rtshimd config dump [--config FILE]             print the configuration in effect (drop-ins merged, defaults filled)
       rtshimd handlers [--config FILE]                discover and show the handler table
       rtshimd runtimeclasses [--config FILE]          print RuntimeClass objects for the ready handlers
       rtshimd reload [--config FILE]                  make the running daemon re-read its config (as SIGHUP)
       rtshimd quarantine [list|stop ID|adopt ID]      records recovery set aside, and what it kept running
       rtshimd version                                 print the version
`

func init() {
	// The main goroutine keeps the main thread, so no other goroutine runs there. Pinning
	// namespaces leaves its locked thread in them (it is ended afterwards), and the main
	// thread cannot be ended: were it the one, /proc/self would show the daemon in a
	// pod's network namespace or in the pin home's mount namespace from then on.
	runtime.LockOSThread()
}

func main() {
	// containers/storage re-executes this binary to unpack layers in a chroot.
	if storageHelpers[filepath.Base(os.Args[0])] {
		yieldToPods()
	}
	if reexec.Init() {
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rtshimd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cmd := ""
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "":
		return serveCmd(args)
	case "version":
		fmt.Printf("rtshimd %s\n", cri.Version)
		return nil
	case "handlers":
		return handlersCmd(args)
	case "runtimeclasses":
		return runtimeclassesCmd(args)
	case "reload":
		return reloadCmd(args)
	case "quarantine":
		return quarantineCmd(args)
	case "config":
		if len(args) == 0 {
			return fmt.Errorf("config: want `default`, `check` or `dump`\n%s", usage)
		}
		switch args[0] {
		case "default":
			_, err := os.Stdout.Write(configs.DefaultConfig)
			return err
		case "check":
			cfg, err := loadConfig(args[1:], nil)
			if err != nil {
				return err
			}
			with := ""
			if len(cfg.DropIns) > 0 {
				with = fmt.Sprintf(" with %s", strings.Join(cfg.DropIns, ", "))
			}
			fmt.Printf("%s%s: ok (%d handlers, default %q)\n", cfg.Path, with, len(cfg.Handlers), cfg.DefaultHandler)
			return nil
		case "dump":
			cfg, err := loadConfig(args[1:], nil)
			if err != nil {
				return err
			}
			return dumpConfig(os.Stdout, cfg)
		}
		return fmt.Errorf("config %s: unknown subcommand\n%s", args[0], usage)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

// storageHelpers are the names containers/storage re-executes this binary as to write or
// read a layer's files (pkg/chrootarchive).
var storageHelpers = map[string]bool{"storage-untar": true, "storage-applyLayer": true, "storage-tar": true}

// yieldToPods lowers this process's CPU and I/O priority: a layer of many files keeps a
// core busy for its whole extraction, and on a small node every other pod's create then
// waits behind it (audit N3: another pod's CreateContainer p99 was 1.7x idle during a
// 100,000-file pull on 2 cores). A pull may take longer under load; starts of pods that
// are already pulled do not. containerd and CRI-O extract at the daemon's priority.
func yieldToPods() {
	_ = unix.Setpriority(unix.PRIO_PROCESS, 0, 10)
	// ioprio_set(IOPRIO_WHO_PROCESS, self, best-effort class, lowest level).
	const ioprioWhoProcess, ioprioClassBE, ioprioClassShift = 1, 2, 13
	_, _, _ = unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, 0, ioprioClassBE<<ioprioClassShift|7)
}

// loadConfig parses --config (and any extra flags the caller registered). Without
// --config, /etc/rtshimd/config.toml is used if it exists, else the built-in default.
func loadConfig(args []string, extra func(*flag.FlagSet)) (*config.Config, error) {
	fs := flag.NewFlagSet("rtshimd", flag.ContinueOnError)
	path := fs.String("config", "", "configuration file (default "+defaultConfigPath+" if it exists, else the built-in default)")
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *path == "" {
		if _, err := os.Stat(defaultConfigPath); err != nil {
			logrus.Infof("no %s; using the built-in default configuration", defaultConfigPath)
			return config.Default(), nil
		}
		*path = defaultConfigPath
	}
	return config.Load(*path)
}

// besideSelf is the path of a helper binary installed next to rtshimd.
func besideSelf(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return name
	}
	return filepath.Join(filepath.Dir(exe), name)
}

func serveCmd(args []string) error {
	hup := reload.NotifyHUP()
	var level string
	cfg, err := loadConfig(args, func(fs *flag.FlagSet) {
		fs.StringVar(&level, "log-level", "", "overrides log_level from the config")
	})
	if err != nil {
		return err
	}
	if level != "" {
		cfg.LogLevel = level
	}
	lvl, err := logrus.ParseLevel(cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logrus.SetLevel(lvl)
	logrus.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "2006-01-02T15:04:05.000000Z07:00"})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d, err := newDaemon(ctx, cfg)
	if err != nil {
		return err
	}
	d.logLevelFlag, d.hup = level, hup
	defer d.close()
	return d.serve(ctx)
}

// dumpConfig writes cfg as TOML, after a comment naming the files it was read from.
func dumpConfig(w io.Writer, cfg *config.Config) error {
	fmt.Fprintf(w, "# %s", cfg.Path)
	for _, d := range cfg.DropIns {
		fmt.Fprintf(w, " + %s", d)
	}
	fmt.Fprintf(w, " (sha256 %s)\n", cfg.Hash)
	return toml.NewEncoder(w).Encode(cfg)
}
