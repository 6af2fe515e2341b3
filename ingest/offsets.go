package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/kafkaconn"
)

// OffsetReset is what to do when a partition's committed offset lies
// outside its log: the topic was recreated, or retention passed the offset.
type OffsetReset int

const (
	// ResetEarliest reads from the first offset still in the log, like
	// auto.offset.reset=earliest: nothing that is still there is skipped.
	ResetEarliest OffsetReset = iota
	// ResetLatest reads from the end of the log: what lies between is
	// skipped, deliberately.
	ResetLatest
	// ResetFail stops the worker with an error naming the partition and the
	// offsets, for an operator to decide.
	ResetFail
)

func (r OffsetReset) String() string {
	return [...]string{"earliest", "latest", "fail"}[r]
}

// Set accepts earliest, latest and fail, as a flag.
func (r *OffsetReset) Set(s string) error {
	switch s {
	case "earliest":
		*r = ResetEarliest
	case "latest":
		*r = ResetLatest
	case "fail":
		*r = ResetFail
	default:
		return errors.New("want earliest, latest or fail")
	}
	return nil
}

// lookup is an offset lookup's outcome: each partition's log bounds, or
// why they could not be read.
type lookup struct {
	parts  []*partition
	bounds map[int]bounds
	errs   map[int]error
	err    error // of the whole request
	// id is the topic's id, read (idRead) when a partition of the lookup
	// waited for its incarnation or had none yet when it began (idErr, why
	// it could not be; id "" from a broker that gives topics no ids).
	id     string
	idErr  error
	idRead bool
}

// bounds are a partition's log bounds (kafkaconn.Bounds).
type bounds = kafkaconn.Bounds

// lookUp starts, beside the loop, one lookup of the log bounds of every
// partition that waits for them (kafka-go splits it by leader), and
// reports whether it did.
func (f *fetcher) lookUp(ctx context.Context, wg *sync.WaitGroup, out chan<- lookup) bool {
	now := time.Now()
	var parts []*partition
	var ids []int
	for _, p := range f.parts {
		if p.want == wantNothing || p.inFlight || now.Before(p.retryAt) {
			continue
		}
		p.inFlight = true
		parts, ids = append(parts, p), append(ids, p.id)
	}
	if len(parts) == 0 {
		return false
	}
	incarnation := f.topicID != nil && slices.ContainsFunc(parts, func(p *partition) bool { return p.want == wantIncarnation || p.incarnation() == "" })
	wg.Go(func() {
		l := lookup{parts: parts}
		var before string
		if incarnation {
			before, l.idErr = f.topicID(ctx)
		}
		l.bounds, l.errs, l.err = f.logBounds(ctx, ids, true)
		if incarnation && l.idErr == nil {
			// Read on both sides of the bounds: a topic deleted and
			// created again between them gives bounds of one incarnation
			// and the id of the other (a log start of the old log read as
			// the new one's would skip its first records).
			l.id, l.idErr = f.topicID(ctx)
			if l.idErr == nil && l.id != before {
				l.idErr = fmt.Errorf("the topic's id changed from %s to %s while its offsets were looked up", before, l.id)
			}
		}
		l.idRead = incarnation
		select {
		case out <- l:
		case <-ctx.Done():
		}
	})
	return true
}

// looked applies a lookup: the partitions' positions, or their failures.
func (f *fetcher) looked(ctx context.Context, l lookup) error {
	for _, p := range l.parts {
		p.inFlight = false
		b, found := l.bounds[p.id]
		err := cmp.Or(l.err, l.errs[p.id])
		if err == nil && !found {
			err = errors.New("not in the answer")
		}
		if err != nil {
			if ctx.Err() == nil {
				f.fail(ctx, p, fmt.Errorf("look up the offsets of partition %d of %s: %w", p.id, f.topic, err))
			}
			continue
		}
		p.logStart.Store(b.First)
		p.hw.Store(b.HW)
		p.lso.Store(b.LSO)
		end := logEnd(f.readCommitted, b.HW, b.LSO)
		switch p.want {
		case wantFirst:
			p.next, p.want = b.First, wantNothing
			if l.idErr == nil {
				p.setIncarnation(cmp.Or(p.incarnation(), l.id)) // the log start just read is of it
			}
		case wantBounds:
			if err := f.outOfRange(ctx, p, b, end); err != nil {
				return err
			}
			continue
		case wantIncarnation:
			if err := f.incarnation(ctx, p, l, b, end); err != nil {
				return err
			}
			continue
		}
		p.lag.Store(max(0, end-p.next))
		f.ok(p)
	}
	return nil
}

// refreshLag starts, beside the loop, a reading of the log's end of the
// partitions no fetch has answered for lagEvery, and reports whether it
// did: a stalled pipeline must show its lag growing.
func (f *fetcher) refreshLag(ctx context.Context, wg *sync.WaitGroup, out chan<- map[int]bounds) bool {
	var ids []int
	cutoff := time.Now().Add(-lagEvery)
	for _, p := range f.parts {
		if p.answered.Before(cutoff) {
			ids = append(ids, p.id)
		}
	}
	if len(ids) == 0 {
		return false
	}
	wg.Go(func() {
		hw, _, _ := f.logBounds(ctx, ids, false)
		select {
		case out <- hw:
		case <-ctx.Done():
		}
	})
	return true
}

// watermarks applies the log ends refreshLag read: each partition's lag,
// and progress for one found at the log's end.
func (f *fetcher) watermarks(ends map[int]bounds) {
	for _, p := range f.parts {
		b, ok := ends[p.id]
		if !ok {
			continue
		}
		p.hw.Store(b.HW)
		p.lso.Store(b.LSO)
		if p.want == wantNothing {
			end := logEnd(f.readCommitted, b.HW, b.LSO)
			p.lag.Store(max(0, end-p.next))
			if end <= p.next {
				p.moved() // at the log's end: nothing to fetch is no stall
			}
		}
	}
}

// logBounds reads the log bounds of the partitions of ids, their first
// offsets when first is set (kafkaconn.LogBounds).
func (f *fetcher) logBounds(ctx context.Context, ids []int, first bool) (map[int]bounds, map[int]error, error) {
	return kafkaconn.LogBounds(ctx, f.client, f.topic, ids, first, f.readCommitted)
}

// partitionError handles an error the broker returned for one partition.
func (f *fetcher) partitionError(ctx context.Context, p *partition, err error) {
	if errors.Is(err, kafka.OffsetOutOfRange) {
		// The log's bounds decide what comes next: looked up beside the
		// loop, like any other offset lookup. With the topic's id: a topic
		// deleted and created again between two fetches answers so when
		// it holds fewer records than the old one's position, and its
		// records are all new, to be read from its start whatever
		// --offset-out-of-range says (latest would skip them).
		p.want, p.retryAt = wantBounds, time.Time{}
		if f.topicID != nil {
			p.want, p.outOfRange = wantIncarnation, true
		}
		return
	}
	f.fail(ctx, p, fmt.Errorf("fetch partition %d of %s: %w", p.id, f.topic, err))
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		// The topic may have been deleted: created again, it counts its
		// offsets from 0, and a new incarnation grown past next before the
		// next fetch would be read from there, its first records never.
		p.want = wantIncarnation
	}
}

// startIncarnation stamps the generation's positions with the topic's id:
// the incarnation the group's coordinator kept their commits for (it drops
// a deleted topic's). When the id cannot be read, no position is fetched
// until a lookup reads it: a position of unknown incarnation, taken for
// the next one the topic has, would read a topic created again from the
// old position, and skip its first records.
func (f *fetcher) startIncarnation(ctx context.Context) {
	if f.topicID == nil {
		return // no broker to ask (tests of the fetch loop alone)
	}
	id, err := f.topicID(ctx)
	for _, p := range f.parts {
		switch {
		case err == nil:
			p.setIncarnation(id)
		case p.want == wantNothing:
			p.want = wantIncarnation
		}
	}
	if err != nil {
		f.log.Warn("could not read the input topic's id: each partition waits for it before it is fetched", "topic", f.topic, "err", err)
	}
}

// questioned sends each partition whose epoch the committer found of
// another incarnation of the topic than it reads now to wait for the id
// (wantIncarnation): a worker paused across the topic's deletion and
// re-creation (a frozen host) fetches at its old position when it
// resumes, and a new log already past it answers with no error.
func (f *fetcher) questioned() {
	for _, p := range f.parts {
		if p.a.questioned.Load() && (p.want == wantNothing || p.want == wantBounds) {
			p.want, p.retryAt = wantIncarnation, time.Time{}
		}
	}
}

// incarnation decides where a partition that waited for its topic's id
// (wantIncarnation) reads on: where it was, in the incarnation its
// position is of (or when the broker gives no ids); from the log's start
// in a topic created again, whose records are all new. Every other
// partition's position of the old incarnation then waits for the id too.
// A read of the records a fetch at the old position already took writes
// the same cells again.
func (f *fetcher) incarnation(ctx context.Context, p *partition, l lookup, b bounds, end int64) error {
	switch {
	case !l.idRead && f.topicID != nil:
		// It came to wait for the id after its lookup began: the next
		// lookup reads the id.
		return nil
	case l.idErr != nil:
		f.fail(ctx, p, fmt.Errorf("read the id of topic %s, to tell whether it was created again: %w", f.topic, l.idErr))
		return nil
	case l.id == "" || p.incarnation() == "" || l.id == p.incarnation():
		p.setIncarnation(cmp.Or(p.incarnation(), l.id))
		p.a.questioned.Store(false) // the committer's read was a broker behind
		if p.outOfRange {
			// The same topic: --offset-out-of-range decides, and a position
			// in range again (a leader behind) is a failure, tried again
			// with backoff.
			p.outOfRange, p.want = false, wantBounds
			return f.outOfRange(ctx, p, b, end)
		}
		if p.next >= b.First && p.next <= b.HW {
			p.want = wantNothing
			p.lag.Store(max(0, end-p.next))
			f.ok(p)
			return nil
		}
		p.want = wantBounds
		return f.outOfRange(ctx, p, b, end)
	}
	was := p.incarnation()
	p.outOfRange = false
	a := f.restart(ctx, p.a, b.First)
	if a == nil {
		return nil // the generation is over
	}
	f.log.Warn("the input topic was created again: reading the partition from the new incarnation's start, not from the old one's position",
		"topic", f.topic, "partition", p.id, "was", was, "now", l.id, "offset", p.next, "from", b.First)
	f.m.offsetResets.Add(ctx, 1)
	p.a, p.next, p.want = a, b.First, wantNothing
	p.setIncarnation(l.id)
	p.lag.Store(max(0, end-b.First))
	p.moved()
	f.ok(p)
	for _, q := range f.parts {
		if q.incarnation() == was && (q.want == wantNothing || q.want == wantBounds) {
			// A position of the old incarnation, fetched or about to be
			// reset by --offset-out-of-range: the id decides first.
			q.want = wantIncarnation
		}
	}
	return nil
}

// outOfRange applies --offset-out-of-range to a partition whose next offset
// the broker said is not in its log, of bounds b; end is the end of what is
// read (logEnd), where latest starts.
func (f *fetcher) outOfRange(ctx context.Context, p *partition, b bounds, end int64) error {
	first := b.First
	if p.next >= first && p.next <= b.HW {
		// In range again (a new leader caught up): try again.
		p.want = wantNothing
		f.fail(ctx, p, fmt.Errorf("offset %d out of range, now within [%d, %d]", p.next, first, b.HW))
		return nil
	}
	if f.reset == ResetFail {
		return fmt.Errorf("partition %d of %s: offset %d is outside the log, which holds offsets %d to %d (the topic was recreated, or retention passed it), and --offset-out-of-range is fail: "+
			"reset the group's offset (kafka-consumer-groups --reset-offsets) or run with --offset-out-of-range earliest or latest",
			p.id, f.topic, p.next, first, b.HW-1)
	}
	to := first
	if f.reset == ResetLatest {
		to = end
	}
	of := p.incarnation() // the new epoch's offsets are of the same incarnation
	a := f.restart(ctx, p.a, to)
	if a == nil {
		return nil // the generation is over
	}
	f.log.Warn("committed offset outside the log; reading on from --offset-out-of-range", "topic", f.topic, "partition", p.id,
		"offset", p.next, "log_start", first, "log_end", b.HW, "policy", f.reset.String(), "from", to, "skipped", max(0, to-p.next))
	f.m.offsetResets.Add(ctx, 1)
	p.a, p.next, p.want = a, to, wantNothing
	p.setIncarnation(of)
	p.lag.Store(max(0, end-to))
	p.moved()
	f.ok(p)
	return nil
}
