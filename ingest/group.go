package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/ingest/kwire"
	"github.com/cellttl/cellttl/internal/retry"
)

// generationRetry paces generations that end as soon as they start.
var generationRetry = retry.Policy{Initial: time.Second, Max: 10 * time.Second}

// generations follows the group from generation to generation.
func (c *Consumer) generations(ctx context.Context) {
	spun := false // the last generation ended at once, with nothing assigned
	pauses := generationRetry.Curve()
	unowned := time.Now() // since when this worker owns no partition
	for {
		if !pace(ctx, spun, pauses) {
			return
		}
		gen, err := c.group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			c.setErr(err)
			c.log.Warn("joining consumer group", "group", c.cfg.Group, "err", err)
			spun = true // paced as a generation that ended at once
			continue
		}
		started := time.Now()
		c.m.rebalances.Add(ctx, 1)
		c.m.rebalanced.Record(ctx, started.Sub(unowned).Seconds())
		parts := c.joined(ctx, gen)
		if len(parts) == 0 {
			gen.Start(c.watchEmptyAssignment)
		}
		// The fetcher runs until the group ends the generation; errors of a
		// partition never end it (a returning function would). Its end is
		// the generation's: whether it spun is measured from then, not from
		// its start.
		ended := make(chan struct{})
		gen.Start(func(gctx context.Context) {
			defer close(ended)
			c.fetchGeneration(ctx, gctx, gen, parts)
		})
		select {
		case <-ended:
		case <-ctx.Done():
			return
		}
		unowned = time.Now()
		spun = len(parts) == 0 && time.Since(started) < time.Second
	}
}

// pace pauses before the next generation when the last spun: it ended
// within a second of its start with nothing assigned (or the join failed),
// and reports whether ctx is still going. Such generations (the input
// topic is missing: kafka-go's partition watcher ends each at once) would
// spin: pauses go from 1s to 10s, and start over after one that did not
// spin. kafka-go holds the next generation meanwhile, heartbeating. A
// generation that ended soon with partitions is a rebalance, one of a
// rolling deploy's: every member's pause would hold the group's.
func pace(ctx context.Context, spun bool, pauses *retry.Curve) bool {
	if !spun {
		pauses.Reset()
		return true
	}
	select {
	case <-time.After(pauses.Next()):
		return true
	case <-ctx.Done():
		return false
	}
}

// joined takes up generation gen: the epochs of its partitions, from where
// the group committed them, and the partitions as the fetcher reads them,
// in partition order.
func (c *Consumer) joined(ctx context.Context, gen *kafka.Generation) []*partition {
	assigned := slices.SortedFunc(slices.Values(gen.Assignments[c.cfg.Topic]),
		func(a, b kafka.PartitionAssignment) int { return a.ID - b.ID })
	if len(assigned) == 0 {
		c.noPartitions(ctx)
	}
	offsets := make(map[int]int64, len(assigned))
	ids := make([]int, len(assigned))
	for i, a := range assigned {
		offsets[a.ID], ids[i] = a.Offset, a.ID
	}
	// Commits of each partition start over from where the group stands,
	// never from what this member knew before.
	epochs := c.committer.begin(gen, offsets)
	parts := make([]*partition, len(assigned))
	for i, a := range assigned {
		parts[i] = newPartition(a.ID, epochs[a.ID], a.Offset)
	}
	c.balancer.Remember(gen.ID, c.cfg.Topic, ids)
	c.mu.Lock()
	c.gen, c.parts = gen, parts
	if len(parts) > 0 {
		c.lastErr = nil
	}
	c.mu.Unlock()
	c.log.Info("joined consumer group", "group", c.cfg.Group, "generation", gen.ID, "member", gen.MemberID, "partitions", ids)
	return parts
}

// fetchGeneration reads parts until the group ends generation gen (gctx
// ends), or the fetcher must stop the worker; then it lets what it fetched
// settle (briefly), commits, and forgets the generation, so that nothing
// is committed through it or for its partitions. ctx is the consumer's:
// once it ends, the worker is stopping and Close commits.
func (c *Consumer) fetchGeneration(ctx, gctx context.Context, gen *kafka.Generation, parts []*partition) {
	partMax := max(1<<20, c.cfg.MaxEventBytes+64<<10)
	f := &fetcher{
		transport: c.rt, client: c.client, topic: c.cfg.Topic,
		budget: c.budget, tracker: c.tracker, restart: c.committer.restart, reset: c.cfg.OffsetReset,
		requestMax: c.cfg.FetchMaxBytes, partMax: int64(partMax),
		out: c.fetched, chunks: c.chunks, log: c.log, m: c.m, parts: parts,
		flowing: map[int]bool{}, sentAt: map[int]time.Time{},
		readCommitted: !c.cfg.ReadUncommitted,
		// A batch may decompress to as much as the budget holds:
		// beyond, it costs more time than any legitimate batch.
		records: kwire.NewReader(c.cfg.MaxInflightBytes, partMax),
	}
	f.topicID = c.topicID
	f.startIncarnation(gctx)
	if err := f.run(gctx); err != nil {
		c.setErr(err)
		select {
		case c.fatal <- err:
		default:
		}
		c.failOnce.Do(func() { close(c.failed) })
		<-gctx.Done()
	}
	c.settleOnEnd(ctx)
	c.commitOnEnd()
	c.committer.end(gen)
	c.mu.Lock()
	if c.gen == gen {
		c.gen, c.parts = nil, nil
	}
	c.mu.Unlock()
}

// topicID reads the input topic's id, within 10 s.
func (c *Consumer) topicID(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.ids.Read(ctx)
}

// settleOnEndTimeout bounds how long a generation that ends waits for the
// events it handed out to settle: the group's rebalance waits for this
// member meanwhile, so it is short, a few of Bigtable's write latencies.
const settleOnEndTimeout = time.Second

// unsettledOnEnd is logged when a generation ends before its events
// settle.
const unsettledOnEnd = "the generation ends with events still being written; their partitions' next owners write them again"

// settleOnEnd waits, up to settleOnEndTimeout, until every event fetched
// in the generation ending has settled (written, dead-lettered or
// skipped), so that commitOnEnd commits them: the writes in flight as a
// generation ends are otherwise written again by the partitions' next
// owners (the same cells: a cost, not a duplicate). Events fetched and not
// yet handed out are handed out meanwhile, and settle too. It listens to
// the tracker, so it returns as the last of them settles. A worker
// stopping (ctx ended) does not wait here: Close drains.
func (c *Consumer) settleOnEnd(ctx context.Context) {
	if h := c.onGenerationEnding.Load(); h != nil {
		(*h)()
	}
	deadline := time.NewTimer(settleOnEndTimeout)
	defer deadline.Stop()
	for {
		n, fell := c.tracker.Pending()
		if n == 0 {
			return
		}
		select {
		case <-fell:
		case <-deadline.C:
			// Not a fault: said, so that a rollout's rewrites have a cause.
			c.log.Info(unsettledOnEnd, "unsettled", n, "waited", settleOnEndTimeout)
			return
		case <-ctx.Done():
			return
		}
	}
}

// commitOnEndTimeout bounds the commit a generation makes as it ends: the
// group's rebalance waits for this member meanwhile.
const commitOnEndTimeout = 5 * time.Second

// commitOnEnd commits the settled offsets of a generation that is ending,
// before its partitions move: the next owner then starts where this member
// got to, not up to a commit interval back (a rebalance of a rolling
// deploy would write that again, fleet-wide). The group is preparing its
// rebalance, and takes commits of the generation ending until it
// completes; a member already out of the group (its session expired) is
// refused, and the next owner reads from the last commit, as before.
func (c *Consumer) commitOnEnd() {
	ctx, cancel := context.WithTimeout(context.Background(), commitOnEndTimeout)
	defer cancel()
	if err := c.committer.Commit(ctx); err != nil {
		c.log.Info("could not commit as the generation ended; the next owner of its partitions reads from the last commit", "group", c.cfg.Group, "err", err)
	}
}

// noPartitions says why a generation assigned nothing, when the reason is
// the input topic missing (more members than partitions is no problem).
func (c *Consumer) noPartitions(ctx context.Context) {
	md, err := c.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{c.cfg.Topic}})
	if err != nil || len(md.Topics) != 1 || !errors.Is(md.Topics[0].Error, kafka.UnknownTopicOrPartition) {
		return
	}
	missing := fmt.Errorf("input topic %s does not exist: create it, or check --topic", c.cfg.Topic)
	c.mu.Lock()
	said := c.lastErr != nil && c.lastErr.Error() == missing.Error()
	c.mu.Unlock()
	if !said {
		c.log.Error("waiting for the input topic", "topic", c.cfg.Topic, "err", missing)
	}
	c.setErr(missing)
}

// emptyCheckInterval is how often a member with no partitions checks it should have none.
const emptyCheckInterval = 5 * time.Second

// watchEmptyAssignment ends a generation that gave this member nothing
// although the input topic has at least as many partitions as the group has
// members: an assignment the leader computed before the topic existed (a
// broker that creates topics on demand creates it in the middle of the
// join). kafka-go's partition watcher cannot see it, since the topic
// already has its partitions when the watcher starts. Returning ends the
// generation, and the next assignment sees the topic.
func (c *Consumer) watchEmptyAssignment(ctx context.Context) {
	t := time.NewTicker(c.cfg.emptyEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		partitions, members, err := c.groupShape(ctx)
		if err != nil || partitions == 0 || members == 0 || members > partitions {
			continue // nothing to tell, or more members than partitions: none is right
		}
		c.log.Warn("no partitions assigned although the input topic has enough for every member; rejoining",
			"topic", c.cfg.Topic, "partitions", partitions, "members", members)
		return
	}
}

// groupShape counts the input topic's partitions and the group's members.
func (c *Consumer) groupShape(ctx context.Context) (partitions, members int, err error) {
	md, err := c.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{c.cfg.Topic}})
	if err != nil {
		return 0, 0, err
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		return 0, 0, nil
	}
	dg, err := c.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{c.cfg.Group}})
	if err != nil {
		return 0, 0, err
	}
	if len(dg.Groups) != 1 || dg.Groups[0].Error != nil {
		return 0, 0, nil
	}
	return len(md.Topics[0].Partitions), len(dg.Groups[0].Members), nil
}

func (c *Consumer) setErr(err error) {
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
}
