package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/container"
	"github.com/rtshimd/rtshimd/internal/rootlock"
	"github.com/rtshimd/rtshimd/internal/sandbox"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Pods and containers recovery could not use a record for (unreadable, undecodable, or
// lost with a damaged journal) and that still ran are kept, not stopped: their entries
// in <state_root>/{sandboxes,containers}.quarantine say so (a file "kept"). An operator
// asks for a stop with a file "stop" there (`rtshimd quarantine stop`), which the daemon
// looks for every few seconds, or puts a mended record back with `rtshimd quarantine
// adopt` while no daemon runs.

// stopRequestPeriod is how often the daemon looks for stop requests.
const stopRequestPeriod = 2 * time.Second

// stopRequested stops what an operator asked to stop: the containers first (a pod's
// kept containers go before it), then the pods.
func stopRequested(ctx context.Context, pods *sandbox.Manager, ctrs *container.Manager) {
	ctrs.StopRequested(ctx, nil)
	pods.StopRequested(ctx, func(pod string) { ctrs.StopRequested(ctx, []string{pod}) })
}

func watchStopRequests(ctx context.Context, pods *sandbox.Manager, ctrs *container.Manager) {
	t := time.NewTicker(stopRequestPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			stopRequested(ctx, pods, ctrs)
		}
	}
}

const quarantineUsage = `usage: rtshimd quarantine [list] [--config FILE]   records recovery set aside, and what is kept running
       rtshimd quarantine stop ID [--config FILE]    stop a kept pod (and its kept containers) or container, and remove its files
       rtshimd quarantine adopt ID [--config FILE]   with the daemon stopped: put a mended record back; the next start takes it up
`

func quarantineCmd(args []string) error {
	sub := "list"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		sub, args = args[0], args[1:]
	}
	var id string
	if sub == "stop" || sub == "adopt" {
		if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
			return fmt.Errorf("quarantine %s: want an ID\n%s", sub, quarantineUsage)
		}
		id, args = args[0], args[1:]
	}
	cfg, err := loadConfig(args, func(*flag.FlagSet) {})
	if err != nil {
		return err
	}
	dirs := []struct{ what, dir string }{
		{"pod", filepath.Join(cfg.StateRoot, "sandboxes")},
		{"container", filepath.Join(cfg.StateRoot, "containers")},
	}
	switch sub {
	case "list":
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "KIND\tID\tSTATE\tREASON\tPATH")
		for _, d := range dirs {
			q, err := store.ListQuarantinedIn(d.dir)
			if err != nil {
				return err
			}
			for _, e := range q {
				state := "stopped"
				switch {
				case e.Kept && e.StopRequested:
					state = "kept, stop asked"
				case e.Kept:
					state = "kept running"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.what, e.ID, state, e.Reason, e.Path)
			}
			aside, _ := filepath.Glob(filepath.Join(d.dir, "journal.damaged-*"))
			more, _ := filepath.Glob(d.dir + ".journal-unreadable-*")
			for _, p := range append(aside, more...) {
				fmt.Fprintf(w, "%s journal\t-\tkept aside\ta damaged or unreadable record journal, for an operator to read\t%s\n", d.what, p)
			}
		}
		return w.Flush()
	case "stop":
		var marked []string
		for _, d := range dirs {
			m, err := store.RequestStop(d.dir, id)
			if err != nil {
				return err
			}
			marked = append(marked, m...)
		}
		if len(marked) == 0 {
			return fmt.Errorf("quarantine stop %s: no kept pod or container of that ID (see `rtshimd quarantine`)", id)
		}
		if !rootlock.Held(cfg.StateRoot) {
			fmt.Printf("%s: stop asked; no daemon runs on %s, the next start stops it\n", id, cfg.StateRoot)
			return nil
		}
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			left := 0
			for _, d := range dirs {
				q, _ := store.ListQuarantinedIn(d.dir)
				for _, e := range q {
					if e.ID == id && e.Kept {
						left++
					}
				}
			}
			if left == 0 {
				fmt.Printf("%s: stopped, its files removed\n", id)
				return nil
			}
			time.Sleep(500 * time.Millisecond)
		}
		return fmt.Errorf("quarantine stop %s: asked, but the daemon (pid %s) has not stopped it yet; its log says why", id, rootlock.Holder(cfg.StateRoot))
	case "adopt":
		lock, err := rootlock.Acquire(cfg.StateRoot)
		if err != nil {
			return fmt.Errorf("quarantine adopt needs the daemon stopped: %w", err)
		}
		defer lock.Release()
		logrus.SetLevel(logrus.WarnLevel)
		var errs []error
		for _, d := range dirs {
			q, _ := store.ListQuarantinedIn(d.dir)
			has := false
			for _, e := range q {
				has = has || e.ID == id
			}
			if !has {
				continue
			}
			st, err := store.New(d.dir)
			if err != nil {
				return err
			}
			err = st.Adopt(id)
			st.Close()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Printf("%s %s: record put back; the next start takes it up\n", d.what, id)
			return nil
		}
		if len(errs) == 0 {
			return fmt.Errorf("quarantine adopt %s: no quarantined record of that ID", id)
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("quarantine %s: unknown subcommand\n%s", sub, quarantineUsage)
}
