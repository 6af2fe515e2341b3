package ingest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	fetchAPI "github.com/segmentio/kafka-go/protocol/fetch"

	"github.com/cellttl/cellttl/internal/retry"
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

// Fetched is a message and the Ack that settles it.
type Fetched struct {
	Msg Message
	Ack Ack
	// Cut is set for a record too large to hold whole: Msg.Value holds
	// only its first bytes (see Cut).
	Cut *Cut
	// Undecodable is set for offsets Msg.Offset to Undecodable.Last of a
	// record batch that could not be decoded: Msg has no key or value, and
	// the message stands for all of them.
	Undecodable *Undecodable
}

// Undecodable describes a record batch the worker could not decode: one
// that decompresses to more than the worker may spend on a batch, or whose
// compressed data or records are broken. Its offsets are dead-lettered as
// one, and the partition goes on after them.
type Undecodable struct {
	Last int64 // the batch's last offset
	// Codec is the batch's compression; Size and SHA256 are of its
	// records as they came from the broker, compressed.
	Codec  string
	Size   int
	SHA256 [sha256.Size]byte
	Reason string
}

// Bounds of one fetch request. A request is sent only when at least
// minFetchBytes of the budget are free (or a quarter of a smaller budget),
// so that a nearly full budget does not turn into a stream of tiny fetches;
// maxFetchWait is how long the broker may hold a request for data to come.
const (
	minFetchBytes = 1 << 20
	maxFetchWait  = 500 * time.Millisecond
	// lagEvery is how often the lag of partitions that fetched nothing
	// lately (the budget is full, or they fail) is read from the broker:
	// a stalled pipeline must show its lag growing.
	lagEvery = 5 * time.Second
	// MessageOverhead is what a message costs beyond its key, value and
	// headers: the Message, its Ack, the row and bookkeeping. It keeps
	// tiny events from escaping the budget.
	MessageOverhead = 256
	// headerOverhead is what a header costs beyond its key and value: its
	// kafka.Header and its key's string.
	headerOverhead = 64

	// While messages flow, a fetch asks the broker to gather up to
	// busyFetchBytes for at most busyFetchWait before it answers, rather
	// than answer with whatever one message brought: fewer, fuller round
	// trips cost the broker far less of the cores it may share with the
	// rest (at 28,000 events/s on the benchmark machine, the broker's CPU
	// fell from 67% to 20% of a core, and the worker's p99 latency with
	// it). After a fetch that brought nothing, the next is a long poll
	// that answers at the first byte: an idle stream's next event waits
	// for nothing but the broker.
	busyFetchBytes = 64 << 10
	busyFetchWait  = 20 * time.Millisecond

	// logEvery is how often the same trouble of one partition (or of one
	// broker's requests) is logged again while it lasts; each occurrence
	// is counted in cellttl.kafka.fetch_errors.
	logEvery = 30 * time.Second
	// spareResponses is how many response buffers are kept for reuse, each
	// at most a request's size: part of the worker's memory beyond the
	// budget.
	spareResponses = 2
)

// fetcher reads the partitions a generation assigned. It sends at most one
// Fetch request at a time to each broker, for every partition that broker
// leads, each request as large as the byte budget has room for; a partition
// with nothing to read holds none of the budget. Errors of one partition
// (a leader change, a broker restart) are retried for that partition alone
// with backoff, logged and counted: the generation ends only when the group
// says so. Responses are read, batch by batch, on one goroutine, with the
// network round trips and offset lookups beside it, and share the
// Transport's connections: one per broker, none per partition.
type fetcher struct {
	transport kafka.RoundTripper
	client    *kafka.Client
	topic     string
	budget    *Budget
	tracker   *Tracker
	// restart begins a partition's epoch anew at an offset reset.
	restart    func(context.Context, *Assignment, int64) *Assignment
	reset      OffsetReset
	requestMax int64 // bytes of one request
	partMax    int64 // bytes of one partition in a request, and of a record held whole
	out        chan<- []Fetched
	chunks     *chunks
	log        *slog.Logger
	m          *consumerMetrics
	records    *recordReader

	parts  []*partition // in partition order
	rotate int          // first partition of the next request, for fairness
	est    sizeEstimate
	// flowing holds the brokers whose last fetch brought messages: their
	// next fetch gathers (busyFetchBytes, busyFetchWait).
	flowing map[int]bool
	spare   [][]byte // response buffers to reuse
}

// want is what a partition's position waits for.
type want int8

const (
	wantNothing want = iota // next is the offset to fetch
	wantFirst               // the log's first offset (no commit yet)
	wantLast                // the log's end
	wantBounds              // the log's bounds: next lay outside them
)

// partition is a partition of the generation, as the fetcher reads it.
// The plain fields belong to the fetcher's goroutine; the atomic ones are
// read by Status and readiness.
type partition struct {
	id       int
	a        *Assignment
	next     int64 // next offset to fetch, when want is wantNothing or wantBounds
	want     want
	inFlight bool // in a request, or an offset lookup, not yet answered

	delay    time.Duration // current backoff, 0 after a success
	backoff  *retry.Curve  // of its failures, made at the first
	retryAt  time.Time
	answered time.Time // last fetch response for it
	// logged, loggedBatch and loggedBack limit the log lines of its
	// failures, of its undecodable batches and of its recoveries (a
	// partition that fails every other fetch must not log each time).
	logged, loggedBatch, loggedBack rateLimiter

	lag atomic.Int64 // high watermark minus next, at the last look
	// hw and logStart are the log's end and start at the last look, -1
	// while unknown.
	hw, logStart atomic.Int64
	lastErr      atomic.Pointer[string]
	// movedAt is when it last made progress (unix nanoseconds): its
	// position moved, or a fetch found it at the log's end.
	movedAt atomic.Int64
}

func newPartition(id int, a *Assignment, committed int64) *partition {
	p := &partition{id: id, a: a, next: committed}
	if committed < 0 {
		p.want = wantFirst // no commit yet: from the start
	}
	p.hw.Store(-1)
	p.logStart.Store(-1)
	p.movedAt.Store(time.Now().UnixNano())
	return p
}

// fail records a failure of p: it is tried again with backoff, the failure
// is counted, and logged unless the same was logged within logEvery.
func (f *fetcher) fail(ctx context.Context, p *partition, err error) {
	if p.backoff == nil {
		p.backoff = partitionRetry.Curve()
	}
	p.delay = p.backoff.Next()
	p.retryAt = time.Now().Add(p.delay)
	s := err.Error()
	p.lastErr.Store(&s)
	f.m.fetchErrors.Add(ctx, 1)
	if n, ok := p.logged.allow(s); ok {
		f.log.Warn("kafka partition cannot be read; retrying it with backoff", "topic", f.topic, "partition", p.id,
			"offset", p.position(), "backoff", p.delay, "repeats", n, "err", err)
	}
}

// ok records a fetch of p that succeeded.
func (f *fetcher) ok(p *partition) {
	if p.lastErr.Load() != nil {
		if n, ok := p.loggedBack.allow("read again"); ok {
			f.log.Info("kafka partition read again", "topic", f.topic, "partition", p.id, "offset", p.next, "repeats", n)
		}
	}
	p.delay, p.retryAt = 0, time.Time{}
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
	if p.want == wantFirst || p.want == wantLast {
		return -1
	}
	return p.next
}

func (p *partition) moved() { p.movedAt.Store(time.Now().UnixNano()) }

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

// fetchResult is a round trip's outcome.
type fetchResult struct {
	broker   int
	parts    []*partition
	reserved int64 // bytes of the budget reserved for its messages
	res      *fetchResponse
	err      error
}

// lookup is an offset lookup's outcome: each partition's log bounds, or
// why they could not be read.
type lookup struct {
	parts  []*partition
	bounds map[int][2]int64 // first offset and end, by partition
	errs   map[int]error
	err    error // of the whole request
}

// run fetches until ctx ends (the generation is over), and returns an error
// only when the worker must stop: a committed offset outside the log under
// --offset-out-of-range fail.
func (f *fetcher) run(ctx context.Context) error {
	results := make(chan fetchResult)
	busy := map[int]bool{} // brokers with a request in flight
	var wg sync.WaitGroup
	defer wg.Wait()
	// Round trips end with the loop, whatever ends it: one still in its
	// long poll then gives its reservation back rather than wait, forever,
	// for a loop that is gone to take its result.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer f.records.inflate.close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	lagTick := time.NewTicker(lagEvery)
	defer lagTick.Stop()
	watermarks := make(chan map[int]int64, 1)
	refreshing := false
	lookups := make(chan lookup, 1)
	looking := false
	for {
		if !looking {
			looking = f.lookUp(ctx, &wg, lookups)
		}
		ready, wake := f.ready(ctx, busy)
		var freed <-chan struct{}
		for broker, parts := range ready {
			var n int64
			if n, freed = f.budget.TryReserve(min(minFetchBytes, f.budget.Limit()/4), f.requestMax); n == 0 {
				break
			}
			busy[broker] = true
			req := f.request(parts, n, f.flowing[broker])
			wg.Go(func() {
				res, err := f.roundTrip(ctx, req)
				select {
				case results <- fetchResult{broker: broker, parts: parts, reserved: n, res: res, err: err}:
				case <-ctx.Done():
					f.budget.Fill(n, 0)
				}
			})
		}
		timer.Reset(time.Until(wake))
		select {
		case r := <-results:
			delete(busy, r.broker)
			for _, p := range r.parts {
				p.inFlight = false
			}
			f.handle(ctx, r)
		case l := <-lookups:
			looking = false
			if err := f.looked(ctx, l); err != nil {
				return err
			}
		case <-freed:
		case <-timer.C:
		case <-lagTick.C:
			if ids := f.quiet(); len(ids) > 0 && !refreshing {
				refreshing = true
				wg.Go(func() {
					hw := f.highWatermarks(ctx, ids)
					select {
					case watermarks <- hw:
					case <-ctx.Done():
					}
				})
			}
		case hw := <-watermarks:
			refreshing = false
			for _, p := range f.parts {
				if w, ok := hw[p.id]; ok {
					p.hw.Store(w)
					if p.want == wantNothing {
						p.lag.Store(max(0, w-p.next))
						if w <= p.next {
							p.moved() // at the log's end: nothing to fetch is no stall
						}
					}
				}
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// lookUp starts, beside the loop, one lookup of the log bounds of every
// partition that waits for them (kafka-go splits it by leader), and
// reports whether it did.
func (f *fetcher) lookUp(ctx context.Context, wg *sync.WaitGroup, out chan<- lookup) bool {
	now := time.Now()
	var parts []*partition
	var reqs []kafka.OffsetRequest
	for _, p := range f.parts {
		if p.want == wantNothing || p.inFlight || now.Before(p.retryAt) {
			continue
		}
		p.inFlight = true
		parts = append(parts, p)
		reqs = append(reqs, kafka.FirstOffsetOf(p.id), kafka.LastOffsetOf(p.id))
	}
	if len(parts) == 0 {
		return false
	}
	wg.Go(func() {
		l := lookup{parts: parts, bounds: map[int][2]int64{}, errs: map[int]error{}}
		res, err := f.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{f.topic: reqs}})
		if err != nil {
			l.err = err
		} else {
			for _, po := range res.Topics[f.topic] {
				if po.Error != nil {
					l.errs[po.Partition] = po.Error
				} else {
					l.bounds[po.Partition] = [2]int64{po.FirstOffset, po.LastOffset}
				}
			}
		}
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
		var err error
		switch {
		case l.err != nil:
			err = fmt.Errorf("look up the offsets of partition %d of %s: %w", p.id, f.topic, l.err)
		case l.errs[p.id] != nil:
			err = fmt.Errorf("look up the offsets of partition %d of %s: %w", p.id, f.topic, l.errs[p.id])
		case !found:
			err = fmt.Errorf("look up the offsets of partition %d of %s: not in the answer", p.id, f.topic)
		}
		if err != nil {
			if ctx.Err() == nil {
				f.fail(ctx, p, err)
			}
			continue
		}
		first, end := b[0], b[1]
		p.logStart.Store(first)
		p.hw.Store(end)
		switch p.want {
		case wantFirst:
			p.next, p.want = first, wantNothing
		case wantLast:
			p.next, p.want = end, wantNothing
		case wantBounds:
			if err := f.outOfRange(ctx, p, first, end); err != nil {
				return err
			}
			continue
		}
		p.lag.Store(max(0, end-p.next))
		f.ok(p)
	}
	return nil
}

// quiet returns the partitions no fetch has answered for lagEvery.
func (f *fetcher) quiet() []int {
	var ids []int
	cutoff := time.Now().Add(-lagEvery)
	for _, p := range f.parts {
		if p.answered.Before(cutoff) {
			ids = append(ids, p.id)
		}
	}
	return ids
}

// highWatermarks reads the end of each partition's log, in one call that
// kafka-go splits by leader over the shared connections.
func (f *fetcher) highWatermarks(ctx context.Context, ids []int) map[int]int64 {
	reqs := make([]kafka.OffsetRequest, len(ids))
	for i, id := range ids {
		reqs[i] = kafka.LastOffsetOf(id)
	}
	res, err := f.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{f.topic: reqs}})
	if err != nil {
		return nil
	}
	out := map[int]int64{}
	for _, po := range res.Topics[f.topic] {
		if po.Error == nil {
			out[po.Partition] = po.LastOffset
		}
	}
	return out
}

// ready groups the partitions that may be fetched now by their leader,
// skipping brokers with a request in flight, and says when to look again
// for the others.
func (f *fetcher) ready(ctx context.Context, busy map[int]bool) (map[int][]*partition, time.Time) {
	now := time.Now()
	wake := now.Add(time.Hour)
	var waiting []*partition
	for _, p := range f.parts {
		if p.inFlight {
			continue
		}
		if p.want != wantNothing {
			// Looked up, not fetched: the lookup's loop iteration takes it
			// when its backoff has passed (or the lookup under way ends).
			if p.retryAt.After(now) {
				wake = earliest(wake, p.retryAt, now)
			}
			continue
		}
		if now.Before(p.retryAt) {
			wake = earliest(wake, p.retryAt, now)
			continue
		}
		waiting = append(waiting, p)
	}
	if len(waiting) == 0 {
		return nil, wake
	}
	// From the Transport's cached metadata, which is also how it routes the
	// request: no round trip unless the cache is stale.
	leaders, err := f.leaders(ctx)
	if err != nil {
		for _, p := range waiting {
			f.fail(ctx, p, err)
			wake = earliest(wake, p.retryAt, now)
		}
		return nil, wake
	}
	ready := map[int][]*partition{}
	n := len(f.parts)
	for i := range n {
		p := f.parts[(f.rotate+i)%n]
		if p.inFlight || p.want != wantNothing || now.Before(p.retryAt) {
			continue
		}
		broker, ok := leaders[p.id]
		if !ok {
			f.fail(ctx, p, fmt.Errorf("partition %d of %s has no leader", p.id, f.topic))
			wake = earliest(wake, p.retryAt, now)
			continue
		}
		if !busy[broker] {
			ready[broker] = append(ready[broker], p)
		}
	}
	f.rotate++
	return ready, wake
}

func earliest(wake, t, now time.Time) time.Time {
	if t.Before(now) {
		t = now
	}
	if t.Before(wake) {
		return t
	}
	return wake
}

func (f *fetcher) leaders(ctx context.Context) (map[int]int, error) {
	md, err := f.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{f.topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", f.topic, err)
	}
	if len(md.Topics) != 1 {
		return nil, fmt.Errorf("metadata of %s: %d topics", f.topic, len(md.Topics))
	}
	if err := md.Topics[0].Error; err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", f.topic, err)
	}
	out := make(map[int]int, len(md.Topics[0].Partitions))
	for _, p := range md.Topics[0].Partitions {
		if p.Error == nil && p.Leader.Host != "" {
			out[p.ID] = p.Leader.ID
		}
	}
	return out, nil
}

// request is one Fetch request for parts, all led by one broker, whose
// messages should fit in reserved bytes of the budget. It marks them in
// flight.
func (f *fetcher) request(parts []*partition, reserved int64, flowing bool) *fetchRequest {
	max := f.est.ask(reserved)
	req := &fetchAPI.Request{
		ReplicaID:    -1,
		MaxWaitTime:  int32(maxFetchWait / time.Millisecond),
		MinBytes:     1,
		MaxBytes:     int32(max),
		SessionID:    -1,
		SessionEpoch: -1,
		Topics:       []fetchAPI.RequestTopic{{Topic: f.topic}},
	}
	if flowing {
		req.MaxWaitTime, req.MinBytes = int32(busyFetchWait/time.Millisecond), int32(min(busyFetchBytes, max))
	}
	for _, p := range parts {
		p.inFlight = true
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, fetchAPI.RequestPartition{
			Partition:          int32(p.id),
			CurrentLeaderEpoch: -1,
			FetchOffset:        p.next,
			LogStartOffset:     -1,
			PartitionMaxBytes:  int32(min(f.partMax, max)),
		})
	}
	r := &fetchRequest{Request: req}
	if n := len(f.spare); n > 0 {
		r.buf, f.spare = f.spare[n-1], f.spare[:n-1]
	}
	return r
}

func (f *fetcher) roundTrip(ctx context.Context, req *fetchRequest) (*fetchResponse, error) {
	// A request the broker holds for maxFetchWait, and the response's
	// transfer: a dead connection must not hold the partitions forever.
	rctx, cancel := context.WithTimeout(ctx, maxFetchWait+30*time.Second)
	defer cancel()
	res, err := f.transport.RoundTrip(rctx, f.client.Addr, req)
	if err != nil {
		return nil, err
	}
	r, ok := res.(*fetchResponse)
	if !ok {
		return nil, fmt.Errorf("fetch: a response of type %T", res)
	}
	if r.ErrorCode != 0 {
		return nil, kafka.Error(r.ErrorCode)
	}
	return r, nil
}

// recycle keeps a response's buffer for a later one, once nothing points
// into it; an unusually large one is let go.
func (f *fetcher) recycle(res *fetchResponse) {
	if res == nil || len(f.spare) == spareResponses || int64(cap(res.buf)) > f.requestMax {
		return
	}
	f.spare = append(f.spare, res.buf[:0])
}

// handle takes a round trip's messages into the budget and the tracker and
// hands them on, or sets the partitions it failed back to retry.
func (f *fetcher) handle(ctx context.Context, r fetchResult) {
	if r.err != nil {
		f.budget.Fill(r.reserved, 0)
		if ctx.Err() != nil {
			return
		}
		for _, p := range r.parts {
			f.fail(ctx, p, fmt.Errorf("fetch from broker %d: %w", r.broker, r.err))
		}
		return
	}
	defer f.recycle(r.res)
	byID := make(map[int]*partition, len(r.parts))
	for _, p := range r.parts {
		byID[p.id] = p
	}
	rs := readState{reserved: r.reserved}
	for i := range r.res.Partitions {
		rp := &r.res.Partitions[i]
		p := byID[int(rp.Partition)]
		if p == nil || rp.Topic != f.topic {
			continue
		}
		if rp.ErrorCode != 0 {
			f.partitionError(ctx, p, kafka.Error(rp.ErrorCode))
			continue
		}
		p.answered = time.Now()
		p.hw.Store(rp.HighWatermark)
		if rp.LogStartOffset >= 0 {
			p.logStart.Store(rp.LogStartOffset)
		}
		before := p.next
		if err := f.read(ctx, p, rp.Records, &rs); err != nil {
			f.fail(ctx, p, err)
		} else {
			f.ok(p)
		}
		if p.next > before || p.next >= rp.HighWatermark {
			p.moved()
		}
		p.lag.Store(max(0, rp.HighWatermark-p.next))
	}
	f.budget.Fill(r.reserved, rs.charged)
	f.est.observe(rs.estCharged, rs.estWire)
	if f.flowing == nil {
		f.flowing = map[int]bool{}
	}
	f.flowing[r.broker] = len(rs.batch)+len(rs.full) > 0
	if n := len(rs.batch); n == chunkSize {
		rs.full = append(rs.full, rs.batch)
	} else if n > 0 {
		// The last chunk, part full, goes on as a slice of its own size:
		// every message handed on then takes one Fetched of memory, which
		// its MessageOverhead covers, however sparse the responses (a
		// trickle of one message per response must not hold a chunk each).
		own := make([]Fetched, n) // exactly n: an append would round up
		copy(own, rs.batch)
		rs.full = append(rs.full, own)
		f.chunks.put(rs.batch)
	}
	for i, chunk := range rs.full {
		select {
		case f.out <- chunk:
		case <-ctx.Done():
			// The generation is over: its messages are stale and dropped.
			for _, c := range rs.full[i:] {
				for _, m := range c {
					f.budget.Release(m.Ack.size)
				}
				f.chunks.put(c)
			}
			return
		}
	}
}

// readState is a response's reading so far.
type readState struct {
	batch    []Fetched   // the chunk being filled
	full     [][]Fetched // chunks filled
	reserved int64       // the reservation the messages must fit in
	charged  int64       // what the messages taken are charged
	// estCharged and estWire are what the batches read whole were charged
	// and their bytes on the wire, for the size estimate.
	estCharged, estWire int64
	// The messages of rs.batch from untracked on are not tracked yet: they
	// are tracked together, under one lock, in epoch a.
	a         *Assignment
	untracked int
}

// take appends a message to the chunk being filled.
func (f *fetcher) take(rs *readState, fe Fetched) {
	if len(rs.batch) == cap(rs.batch) {
		// The chunk is full (or there is none yet): the next one.
		f.track(rs)
		if len(rs.batch) > 0 {
			rs.full = append(rs.full, rs.batch)
		}
		rs.batch, rs.untracked = f.chunks.get(), 0
	}
	rs.batch = append(rs.batch, fe)
	rs.charged += fe.Ack.size
}

// track tracks the messages taken and not yet tracked.
func (f *fetcher) track(rs *readState) {
	f.tracker.trackAll(rs.a, rs.batch[rs.untracked:])
	rs.untracked = len(rs.batch)
}

// read reads a partition's record batches, copies their records out of
// the response and tracks them, while they fit in the reservation. A
// record that does not fit stays in Kafka, with every later one of its
// partition, and is fetched again; the first of a response is always
// taken, so that a record larger than the reservation still goes through
// (by that much over the budget). A batch that cannot be decoded is handed
// on as one Undecodable message, and the partition goes on after it. The
// error is for a batch the broker sent corrupt: the partition is fetched
// again from there.
func (f *fetcher) read(ctx context.Context, p *partition, data []byte, rs *readState) error {
	// The messages taken are tracked together, under one lock, in offset
	// order with the offsets settled at once (transaction markers, records
	// removed by compaction).
	rs.a, rs.untracked = p.a, len(rs.batch)
	defer f.track(rs)
	skip := func(first, last int64) {
		f.track(rs)
		f.tracker.TrackSkipped(p.a, first, last)
		p.next = last + 1
	}
	for len(data) > 0 {
		b, rest, ok, err := nextBatch(data)
		if err != nil {
			return fmt.Errorf("partition %d of %s: %w", p.id, f.topic, err)
		}
		if !ok {
			return nil // cut short by the response's size: fetched again
		}
		data = rest
		if b.last < p.next {
			continue // read before: batches may start before the offset asked for
		}
		if b.control() {
			skip(max(b.first, p.next), b.last)
			continue
		}
		whole := b.first >= p.next
		charged := rs.charged
		full, err := f.readBatch(p, &b, rs)
		switch {
		case err != nil:
			f.undecodable(ctx, p, &b, rs, err)
		case full:
			return nil
		case p.next <= b.last:
			// Its last offsets hold no record (compaction removed them):
			// settled, or the commit would stop before them.
			skip(p.next, b.last)
		}
		if whole && err == nil {
			rs.estCharged += rs.charged - charged
			rs.estWire += int64(len(b.raw))
		}
	}
	return nil
}

// readBatch takes b's records from p.next on. full reports that it stopped
// for want of room in the reservation.
func (f *fetcher) readBatch(p *partition, b *recordBatch, rs *readState) (full bool, err error) {
	if err := f.records.open(b); err != nil {
		return false, err
	}
	var rec record
	for {
		ok, err := f.records.next(&rec)
		if err != nil || !ok {
			return false, err
		}
		if rec.offset < p.next {
			continue
		}
		// A header costs its kafka.Header beside its bytes: a record of
		// many empty headers must not escape the budget.
		size := int64(len(rec.key)+len(rec.value)+len(rec.headers)+rec.nheaders*headerOverhead) + MessageOverhead
		if rs.charged > 0 && rs.charged+size > rs.reserved {
			return true, nil // the rest is fetched again
		}
		m, err := message(f.topic, p.id, &rec)
		if err != nil {
			return false, err
		}
		f.take(rs, Fetched{Msg: m, Ack: Ack{size: size}, Cut: rec.cut})
		p.next = rec.offset + 1
	}
}

// undecodable hands on b's offsets from p.next as one message, to be
// dead-lettered as what it is, and moves the partition past them.
func (f *fetcher) undecodable(ctx context.Context, p *partition, b *recordBatch, rs *readState, cause error) {
	payload := b.records
	if b.magic < 2 {
		payload = b.value
	}
	first := max(b.first, p.next)
	if b.magic < 2 {
		// A legacy wrapper's own offset is its last message's: the ones
		// before it are unknown until it is decompressed.
		first = p.next
	}
	u := &Undecodable{Last: b.last, Codec: codecName(b.codec()), Size: len(payload), SHA256: sha256.Sum256(payload)}
	u.Reason = fmt.Sprintf("record batch at offsets %d to %d (%s, %d bytes) cannot be decoded: %v", first, b.last, u.Codec, u.Size, cause)
	f.m.undecodable.Add(ctx, 1)
	if n, ok := p.loggedBatch.allow("undecodable"); ok {
		f.log.Error("record batch cannot be decoded; its offsets go to the dead-letter topic as one and the partition goes on",
			"topic", f.topic, "partition", p.id, "first", first, "last", b.last, "codec", u.Codec, "bytes", u.Size, "repeats", n, "err", cause)
	}
	f.take(rs, Fetched{Msg: Message{Topic: f.topic, Partition: p.id, Offset: first}, Ack: Ack{size: MessageOverhead}, Undecodable: u})
	p.next = b.last + 1
}

// message copies a record out of the response's buffers: one allocation
// for its key, value and header values, so that a message kept long (its
// dead letter retried) pins only itself.
func message(topic string, partition int, rec *record) (Message, error) {
	klen, vlen := len(rec.key), len(rec.value)
	buf := make([]byte, klen+vlen+len(rec.headers))
	m := Message{Topic: topic, Partition: partition, Offset: rec.offset}
	if rec.key != nil {
		copy(buf, rec.key)
		m.Key = buf[:klen:klen]
	}
	if rec.value != nil {
		copy(buf[klen:], rec.value)
		m.Value = buf[klen : klen+vlen : klen+vlen]
	}
	if rec.nheaders > 0 {
		hs, err := headers(rec.headers, rec.nheaders, buf[klen+vlen:klen+vlen])
		if err != nil {
			return m, fmt.Errorf("headers of the record at offset %d: %w", rec.offset, err)
		}
		m.Headers = hs
	}
	// Kafka's "no timestamp" is -1: the zero time, as kafka-go's Reader
	// has it.
	if rec.time != -1 {
		m.Time = time.UnixMilli(rec.time).UTC()
	}
	return m, nil
}

// headers decodes n headers of a v2 record, their values copied into buf.
func headers(b []byte, n int, buf []byte) ([]Header, error) {
	if n > len(b) { // each takes at least two bytes
		return nil, errShort
	}
	hs := make([]Header, n)
	d := varints{b: b}
	for i := range hs {
		k := d.bytes()
		v := d.bytes()
		if d.err != nil {
			return nil, d.err
		}
		hs[i].Key = string(k)
		if v != nil {
			start := len(buf)
			buf = append(buf, v...)
			hs[i].Value = buf[start:len(buf):len(buf)]
		}
	}
	return hs, nil
}

// partitionError handles an error the broker returned for one partition.
func (f *fetcher) partitionError(ctx context.Context, p *partition, err error) {
	if errors.Is(err, kafka.OffsetOutOfRange) {
		// The log's bounds decide what comes next: looked up beside the
		// loop, like any other offset lookup.
		p.want, p.retryAt = wantBounds, time.Time{}
		return
	}
	f.fail(ctx, p, fmt.Errorf("fetch partition %d of %s: %w", p.id, f.topic, err))
}

// outOfRange applies --offset-out-of-range to a partition whose next offset
// the broker said is not in its log, which holds first to end.
func (f *fetcher) outOfRange(ctx context.Context, p *partition, first, end int64) error {
	if p.next >= first && p.next <= end {
		// In range again (a new leader caught up): try again.
		p.want = wantNothing
		f.fail(ctx, p, fmt.Errorf("offset %d out of range, now within [%d, %d]", p.next, first, end))
		return nil
	}
	if f.reset == ResetFail {
		return fmt.Errorf("partition %d of %s: offset %d is outside the log, which holds offsets %d to %d (the topic was recreated, or retention passed it), and --offset-out-of-range is fail: "+
			"reset the group's offset (kafka-consumer-groups --reset-offsets) or run with --offset-out-of-range earliest or latest",
			p.id, f.topic, p.next, first, end-1)
	}
	to := first
	if f.reset == ResetLatest {
		to = end
	}
	a := f.restart(ctx, p.a, to)
	if a == nil {
		return nil // the generation is over
	}
	f.log.Warn("committed offset outside the log; reading on from --offset-out-of-range", "topic", f.topic, "partition", p.id,
		"offset", p.next, "log_start", first, "log_end", end, "policy", f.reset.String(), "from", to, "skipped", max(0, to-p.next))
	f.m.offsetResets.Add(ctx, 1)
	p.a, p.next, p.want = a, to, wantNothing
	p.lag.Store(max(0, end-to))
	p.moved()
	f.ok(p)
	return nil
}

// sizeEstimate is how many bytes of the budget a byte fetched turns into:
// more than one, since a message is charged its MessageOverhead, and far
// more when the records are compressed (the broker counts compressed
// bytes). A request asks the broker for its reservation divided by it. It
// is learned from record batches read whole, so one batch larger than a
// request (which the broker sends anyway, to make progress) cannot skew
// it, and it is bounded: asking for less than minAsk bytes is never right.
type sizeEstimate struct{ ratio float64 }

const (
	maxRatio = 64
	minAsk   = 64 << 10
)

func (e *sizeEstimate) ask(reserved int64) int64 {
	r := e.ratio
	if r < 1 {
		r = 2 // until a response says otherwise
	}
	return max(int64(float64(reserved)/r), min(reserved, minAsk))
}

func (e *sizeEstimate) observe(charged, wire int64) {
	if wire <= 0 {
		return
	}
	o := min(max(float64(charged)/float64(wire), 1), maxRatio)
	if e.ratio < 1 {
		e.ratio = o
		return
	}
	e.ratio = 0.5*e.ratio + 0.5*o
}
