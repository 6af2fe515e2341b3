package ingest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cellttl/cellttl/internal/retry"
)

// want is what a partition's position waits for.
type want int8

const (
	wantNothing want = iota // next is the offset to fetch
	wantFirst               // the log's first offset (no commit yet)
	wantBounds              // the log's bounds: next lay outside them
	// wantIncarnation: the topic went away under it (deleted), or another
	// partition found it created again: the topic's id decides whether
	// next still means anything.
	wantIncarnation
)

// partition is a partition of the generation, as the fetcher reads it.
// The plain fields belong to the fetcher's goroutine; the atomic ones are
// read by Status and readiness.
type partition struct {
	id       int
	a        *epoch
	next     int64 // next offset to fetch, when want is wantNothing or wantBounds
	want     want
	inFlight bool // in a request, or an offset lookup, not yet answered
	// outOfRange: the broker answered its position out of range, and a
	// lookup of the id decides what that means (wantIncarnation).
	outOfRange bool

	backoff  *retry.Curve // of its failures, made at the first
	retryAt  time.Time    // when its backoff ends, zero after a success
	answered time.Time    // last fetch response for it
	// logged, loggedBatch and loggedBack limit the log lines of its
	// failures, of its undecodable batches and of its recoveries (a
	// partition that fails every other fetch must not log each time).
	logged, loggedBatch, loggedBack rateLimiter

	lag atomic.Int64 // the log's end to read (logEnd) minus next, at the last look
	// hw and logStart are the log's end and start at the last look, lso
	// its last stable offset; -1 while unknown.
	hw, logStart, lso atomic.Int64
	lastErr           atomic.Pointer[string]
	// movedAt is when it last made progress (unix nanoseconds): its
	// position moved, or a fetch found it at the log's end.
	movedAt atomic.Int64
}

// incarnation is the topic's id p's position is of ("" unknown): offsets
// mean nothing in a topic deleted and created again. Its epoch holds it,
// for the committer too.
func (p *partition) incarnation() string { return p.a.incarnation() }

func (p *partition) setIncarnation(id string) { p.a.of.Store(&id) }

func newPartition(id int, a *epoch, committed int64) *partition {
	p := &partition{id: id, a: a, next: committed}
	if committed < 0 {
		p.want = wantFirst // no commit yet: from the start
	}
	p.hw.Store(-1)
	p.logStart.Store(-1)
	p.lso.Store(-1)
	p.movedAt.Store(time.Now().UnixNano())
	return p
}

// fail records a failure of p: it is tried again with backoff, the failure
// is counted, and logged unless the same was logged within logEvery.
func (f *fetcher) fail(ctx context.Context, p *partition, err error) {
	if p.backoff == nil {
		p.backoff = partitionRetry.Curve()
	}
	delay := p.backoff.Next()
	p.retryAt = time.Now().Add(delay)
	s := err.Error()
	p.lastErr.Store(&s)
	f.m.fetchErrors.Add(ctx, 1)
	if n, ok := p.logged.allow(s); ok {
		f.log.Warn("kafka partition cannot be read; retrying it with backoff", "topic", f.topic, "partition", p.id,
			"offset", p.position(), "backoff", delay, "repeats", n, "err", err)
	}
}

// ok records a fetch of p that succeeded.
func (f *fetcher) ok(p *partition) {
	if p.lastErr.Load() != nil {
		if n, ok := p.loggedBack.allow("read again"); ok {
			f.log.Info("kafka partition read again", "topic", f.topic, "partition", p.id, "offset", p.next, "repeats", n)
		}
	}
	p.retryAt = time.Time{}
	if p.backoff != nil {
		p.backoff.Reset()
	}
	p.lastErr.Store(nil)
}

// partitionRetry is the backoff of a partition's failures: from 100 ms to
// 5 s, jittered, so that partitions failing together spread out.
var partitionRetry = retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}

// position is p's offset for logs: next, or -1 while it is looked up.
func (p *partition) position() int64 {
	if p.want == wantFirst {
		return -1
	}
	return p.next
}

func (p *partition) moved() { p.movedAt.Store(time.Now().UnixNano()) }

// logEnd is the end of what a consumer of the isolation level reads, of a
// log ending at the high watermark hw with the last stable offset lso (-1
// when unknown): under read_committed nothing at or past the first record
// of a transaction still open is read until it ends, so lag counts to
// there, and a partition waiting there is at its end, not stalled.
func logEnd(readCommitted bool, hw, lso int64) int64 {
	if readCommitted && lso >= 0 && hw >= 0 {
		return min(lso, hw)
	}
	return hw
}

// rateLimiter says whether a trouble may be logged: a new one at once, the
// same one again after logEvery; n is how many were not logged meanwhile.
type rateLimiter struct {
	last       string
	at         time.Time
	suppressed int
}

func (r *rateLimiter) allow(what string) (n int, ok bool) {
	now := time.Now()
	if what == r.last && now.Sub(r.at) < logEvery {
		r.suppressed++
		return 0, false
	}
	n = r.suppressed
	r.last, r.at, r.suppressed = what, now, 0
	return n, true
}
