package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cellttl/cellttl/internal/tick"
	"github.com/segmentio/kafka-go"
)

// committer owns what may be committed and through which generation: the
// epochs of a generation and the generation itself change together, under
// one lock, so an offset is only ever committed through the generation that
// assigned its partition. It commits on a ticker and once more at stop; the
// fetcher knows nothing of commits.
type committer struct {
	topic    string
	tracker  *tracker
	interval time.Duration
	log      *slog.Logger
	// incarnation reads the topic's id now ("" from a broker that gives
	// none); nil where no broker is asked (tests of the committer alone).
	incarnation func(context.Context) (string, error)

	mu  sync.Mutex
	gen *kafka.Generation // nil between generations
}

// begin starts the epochs of a new generation, from the group's committed
// offsets (negative when none).
func (c *committer) begin(gen *kafka.Generation, offsets map[int]int64) map[int]*epoch {
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
// settled prefix that lies above what the group has committed. It holds
// the lock until the commit is done, so that no epoch changes under it: an
// offset read from an epoch that a reset replaced meanwhile would be
// written after the reset's own.
func (c *committer) Commit(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == nil {
		return nil
	}
	epochs := c.tracker.Committable()
	if err := c.sameIncarnation(ctx, epochs); err != nil {
		return err
	}
	if len(epochs) == 0 {
		return nil
	}
	offsets := make(map[int]int64, len(epochs))
	for a, o := range epochs {
		offsets[a.partition] = o
	}
	if err := c.commit(ctx, offsets); err != nil {
		return fmt.Errorf("commit offsets of %d partitions: %w", len(offsets), err)
	}
	c.tracker.Committed(epochs)
	return nil
}

// sameIncarnation reads the topic's id, marks each current epoch whose
// offsets are of another incarnation questioned, for the fetcher, and
// takes those out of epochs, the ones to commit. Every message an epoch
// may commit was fetched before the read began, and a topic never takes
// an earlier id again: a read that finds the epoch's id proves its
// offsets are of the topic there is now. A worker paused across the
// topic's deletion and re-creation fetched at its old position in the
// new log, past its first records; committed, they would be skipped for
// good. Its position may also be the new log's end, with nothing to
// commit: so the id is read every interval, not only with a commit. When
// it cannot be read, nothing is committed this time (a late commit loses
// nothing). A broker whose metadata lags the deletion by milliseconds
// can still answer the old id: that window stays.
func (c *committer) sameIncarnation(ctx context.Context, epochs map[*epoch]int64) error {
	if c.incarnation == nil {
		return nil
	}
	current := c.tracker.Current()
	if !slices.ContainsFunc(current, func(a *epoch) bool { return a.incarnation() != "" }) {
		return nil // no incarnation to compare (a broker that gives no ids)
	}
	id, err := c.incarnation(ctx)
	switch {
	case err != nil && len(epochs) == 0:
		return nil // nothing to commit: the next interval reads it again
	case err != nil:
		return fmt.Errorf("read the id of topic %s, to commit only offsets of the topic there is: %w", c.topic, err)
	}
	for _, a := range current {
		if of := a.incarnation(); id != "" && of != "" && of != id {
			delete(epochs, a)
			if a.questioned.Swap(true) {
				continue // said at the first commit that found it
			}
			c.log.Warn("the input topic was created again: offsets of the old incarnation are not committed, and the partition is looked up again",
				"topic", c.topic, "partition", a.partition, "was", of, "now", id)
		}
	}
	return nil
}

// restart begins a new epoch of a's partition at offset, which an offset
// reset chose (the log started over, or retention passed the committed
// offset), and commits offset at once: a crash before the next commit then
// restarts from the reset, not from the stale offset. It returns nil when
// a is no longer current.
func (c *committer) restart(ctx context.Context, a *epoch, offset int64) *epoch {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.tracker.Restart(a)
	if n == nil || c.gen == nil {
		return n
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.commit(cctx, map[int]int64{a.partition: offset}); err != nil {
		c.log.Warn("commit of a reset offset failed; it is committed with the next progress", "partition", a.partition, "offset", offset, "err", err)
		return n
	}
	c.tracker.Committed(map[*epoch]int64{n: offset})
	return n
}

// commit commits offsets through the current generation; c.mu is held.
// CommitOffsets takes no context: a stalled coordinator must not hold the
// caller past its deadline.
func (c *committer) commit(ctx context.Context, offsets map[int]int64) error {
	gen := c.gen
	done := make(chan error, 1)
	go func() { done <- gen.CommitOffsets(map[string]map[int]int64{c.topic: offsets}) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Loop commits every interval until ctx ends. Failures are logged and
// retried at the next tick: a late commit loses nothing, it only means
// more is redelivered after a crash.
func (c *committer) Loop(ctx context.Context) {
	tick.Every(ctx, c.interval, func(ctx context.Context) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.Commit(cctx); err != nil && ctx.Err() == nil {
			c.log.Warn("commit failed, retrying at next interval", "err", err)
		}
	})
}
