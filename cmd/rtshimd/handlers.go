package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/nodelabels"
	"github.com/rtshimd/rtshimd/internal/nrihost"
)

// discoverForCommand discovers every handler of the config in args as the daemon would,
// in a scratch run root of its own (the shims it probes must not publish to a running
// daemon's), for a command that prints what it found. done releases it all.
func discoverForCommand(args []string, extra func(*flag.FlagSet)) (cfg *config.Config, table *handlers.Table, done func(), err error) {
	logrus.SetLevel(logrus.ErrorLevel)
	cfg, err = loadConfig(args, extra)
	if err != nil {
		return nil, nil, nil, err
	}
	tmp, err := os.MkdirTemp("", "rtshimd-discover-")
	if err != nil {
		return nil, nil, nil, err
	}
	// Searchable like the daemon's roots, or discovery would find user namespaces
	// impossible because of this scratch directory alone.
	if err := os.Chmod(tmp, 0o711); err != nil {
		os.RemoveAll(tmp)
		return nil, nil, nil, err
	}
	table, rts, _, err := discover(context.Background(), cfg, tmp, tmp+"/pause", tmp+"/probe")
	if err != nil {
		os.RemoveAll(tmp)
		return nil, nil, nil, err
	}
	return cfg, table, func() { rts.Close(); os.RemoveAll(tmp) }, nil
}

// handlersCmd discovers every handler as the daemon would and prints the table.
func handlersCmd(args []string) error {
	cfg, table, done, err := discoverForCommand(args, nil)
	if err != nil {
		return err
	}
	defer done()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tTYPE\tBINARY\tVERSION\tFEATURES\tSTATUS")
	for _, h := range table.List() {
		name := h.Name
		if name == table.Default() {
			name += " (default)"
		}
		state := "ready"
		if !h.Ready {
			state = "not ready: " + h.Reason
		}
		version := h.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", name, h.Type(), h.Runtime.Path, version, featureList(h), state)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	// What discovery added to a row, and why.
	for _, h := range table.List() {
		if len(h.Args) > 0 {
			fmt.Printf("%s: runs with %s: %s\n", h.Name, strings.Join(h.Args, " "), h.ArgsReason)
		}
	}
	fmt.Println(nriLine(cfg.NRI))
	fmt.Println(nodeLabelsLine(cfg.Node, table.List()))
	return nil
}

// nodeLabelsLine says which labels the daemon keeps on its Node for these rows, and
// whether it writes them; what it last wrote only a running daemon knows (Status verbose,
// "node_labels").
func nodeLabelsLine(c config.Node, rows []*handlers.Handler) string {
	want := nodelabels.Want(rows)
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		kv = append(kv, k+"="+want[k])
	}
	labels := strings.Join(kv, " ")
	if labels == "" {
		labels = "none (no handler is ready)"
	}
	if c.Kubeconfig == "" {
		return "node labels: not written ([node] kubeconfig is empty); they would be: " + labels
	}
	name := c.Name
	if name == "" {
		name = "this host's name"
	}
	return fmt.Sprintf("node labels: kept on node %s through %s: %s", name, c.Kubeconfig, labels)
}

// nriLine says whether NRI plugins see this node's pods, where they connect and which
// plugins the daemon starts itself; which are connected only a running daemon knows
// (Status verbose, "nri").
func nriLine(c config.NRI) string {
	if !c.Enable {
		return "nri: off ([nri] enable = false)"
	}
	socket := "socket " + c.SocketPath
	if c.DisableConnections {
		socket = "no external plugins (disable_connections)"
	}
	names, err := nrihost.Installed(c.PluginPath)
	installed := "none"
	if len(names) > 0 {
		installed = strings.Join(names, ", ")
	}
	if err != nil {
		installed += "; " + err.Error() + ": the daemon will refuse to start"
	}
	return fmt.Sprintf("nri: on, %s; plugins started from %s: %s", socket, c.PluginPath, installed)
}

func featureList(h *handlers.Handler) string {
	if h.Version == "" {
		return "-"
	}
	f := h.Features
	var on []string
	for _, x := range []struct {
		name string
		v    bool
	}{
		{"host_network", f.HostNetwork}, {"host_pid", f.HostPID}, {"host_ipc", f.HostIPC},
		{"user_namespaces", f.UserNamespaces}, {"recursive_read_only_mounts", f.RecursiveReadOnlyMounts},
	} {
		if x.v {
			on = append(on, x.name)
		} else {
			on = append(on, "-"+x.name)
		}
	}
	return strings.Join(on, ",")
}
