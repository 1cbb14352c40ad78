package retry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// The step runs until it succeeds, then no more; a cancelled context ends the retries.
func TestEvery(t *testing.T) {
	var wg sync.WaitGroup
	calls := 0
	Every(context.Background(), &wg, time.Millisecond, logrus.NewEntry(logrus.New()), func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	wg.Wait()
	if calls != 3 {
		t.Errorf("ran %d times, want 3", calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Every(ctx, &wg, time.Hour, logrus.NewEntry(logrus.New()), func() error { t.Error("ran after cancel"); return nil })
	wg.Wait()
}
