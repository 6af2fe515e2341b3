package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// committer owns what may be committed and through which generation: the
// epochs of a generation and the generation itself change together, under
// one lock, so an offset is only ever committed through the generation that
// assigned its partition. It commits on a ticker and once more at stop; the
// fetcher knows nothing of commits.
type committer struct {
	topic    string
	tracker  *Tracker
	interval time.Duration
	log      *slog.Logger

	mu  sync.Mutex
	gen *kafka.Generation // nil between generations
}

// begin starts the epochs of a new generation, from the group's committed
// offsets (negative when none).
func (c *committer) begin(gen *kafka.Generation, offsets map[int]int64) map[int]*Assignment {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen = gen
	return c.tracker.Assign(offsets)
}

// end forgets a generation that is over: nothing is committed through it or
// for its partitions, and its messages not yet delivered are dropped.
func (c *committer) end(gen *kafka.Generation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.gen = nil
		c.tracker.Revoke()
	}
}

// Commit commits, through the current generation, every current epoch's
// settled prefix that lies above what the group has committed.
func (c *committer) Commit(ctx context.Context) error {
	c.mu.Lock()
	gen := c.gen
	epochs := c.tracker.Commitable()
	c.mu.Unlock()
	if gen == nil || len(epochs) == 0 {
		return nil
	}
	offsets := make(map[int]int64, len(epochs))
	for a, o := range epochs {
		offsets[a.partition] = o
	}
	// CommitOffsets takes no context; a stalled coordinator must not hold
	// the caller past its deadline.
	done := make(chan error, 1)
	go func() { done <- gen.CommitOffsets(map[string]map[int]int64{c.topic: offsets}) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("commit offsets of %d partitions: %w", len(offsets), err)
		}
	case <-ctx.Done():
		return fmt.Errorf("commit offsets: %w", ctx.Err())
	}
	c.tracker.Committed(epochs)
	return nil
}

// Loop commits every interval until ctx ends. Failures are logged and
// retried at the next tick: a late commit loses nothing, it only means
// more is redelivered after a crash.
func (c *committer) Loop(ctx context.Context) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := c.Commit(cctx); err != nil && ctx.Err() == nil {
				c.log.Warn("commit failed, retrying at next interval", "err", err)
			}
			cancel()
		}
	}
}
