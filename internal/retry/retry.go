// Package retry runs a step again in the background until it succeeds: the cleanup of a
// container or pod whose first cleanup failed.
package retry

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Every runs fn every interval, in a goroutine counted in wg, until it returns nil or ctx
// ends (a daemon that stops leaves the record, and the next one takes it up).
func Every(ctx context.Context, wg *sync.WaitGroup, interval time.Duration, log *logrus.Entry, fn func() error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := fn(); err != nil {
				log.WithError(err).Warn("retry: still failing")
				continue
			}
			log.Info("retry: done")
			return
		}
	}()
}
