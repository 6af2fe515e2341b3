package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchAPI "github.com/segmentio/kafka-go/protocol/fetch"
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
	Msg kafka.Message
	Ack Ack
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
)

// fetcher reads the partitions a generation assigned. It sends at most one
// Fetch request at a time to each broker, for every partition that broker
// leads, each request as large as the byte budget has room for; a partition
// with nothing to read holds none of the budget. Errors of one partition
// (a leader change, a broker restart) are retried for that partition alone
// with backoff: the generation ends only when the group says so. All of it
// runs on one goroutine, with the network round trips beside it, and shares
// the Transport's connections: one per broker, none per partition.
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
	partMax    int64 // bytes of one partition in a request
	out        chan<- []Fetched
	chunks     *chunks
	log        *slog.Logger
	m          *consumerMetrics

	parts  []*partition // in partition order
	rotate int          // first partition of the next request, for fairness
	// ratio is how many bytes of the budget a byte on the wire turned into
	// lately (a message is charged its overhead beyond its bytes): a
	// request asks the broker for its reservation divided by it.
	ratio float64
	// flowing holds the brokers (request slots) whose last fetch brought
	// messages: their next fetch gathers (busyFetchBytes, busyFetchWait).
	flowing map[int]bool
}

// partition is a partition of the generation, as the fetcher reads it.
// next and its epoch belong to the fetcher's goroutine; the rest is read
// by Status.
type partition struct {
	id       int
	a        *Assignment
	next     int64 // next offset to fetch; kafka.FirstOffset or LastOffset until resolved
	inFlight bool  // in a request not yet answered
	// solo: fetched in a request of its own, since a request with it held
	// a batch too large to decompress (see decompress.go).
	solo bool

	delay    time.Duration // current backoff, 0 after a success
	retryAt  time.Time
	answered time.Time // last fetch response for it

	lag     atomic.Int64 // high watermark minus next, at the last fetch
	lastErr atomic.Pointer[string]
	// stuck is set while the partition cannot go on without an operator
	// (a batch too large to decompress): /readyz says so.
	stuck atomic.Bool
}

func (p *partition) failed(err error) {
	const first, most = 100 * time.Millisecond, 5 * time.Second
	p.delay = min(max(2*p.delay, first), most)
	p.retryAt = time.Now().Add(p.delay)
	s := err.Error()
	p.lastErr.Store(&s)
}

func (p *partition) ok() {
	p.delay, p.retryAt = 0, time.Time{}
	p.lastErr.Store(nil)
	p.stuck.Store(false)
}

// fetchResult is a round trip's outcome.
type fetchResult struct {
	broker   int
	parts    []*partition
	reserved int64 // bytes of the budget reserved for its messages
	asked    int64 // bytes asked of the broker
	refused  bool  // a batch was refused (too large) while it was read
	res      *fetchAPI.Response
	err      error
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
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	lagTick := time.NewTicker(lagEvery)
	defer lagTick.Stop()
	watermarks := make(chan map[int]int64, 1)
	refreshing := false
	for {
		if err := f.resolve(ctx); err != nil {
			return err
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
				before := refusals.Load()
				res, err := f.roundTrip(ctx, req)
				refused := refusals.Load() != before // ours, or a concurrent round trip's
				select {
				case results <- fetchResult{broker: broker, parts: parts, reserved: n, asked: int64(req.MaxBytes), refused: refused, res: res, err: err}:
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
			if err := f.handle(ctx, r); err != nil {
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
				if w, ok := hw[p.id]; ok && p.next >= 0 {
					p.lag.Store(max(0, w-p.next))
				}
			}
		case <-ctx.Done():
			return nil
		}
	}
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
		if p.next < 0 || now.Before(p.retryAt) {
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
			p.failed(err)
			wake = earliest(wake, p.retryAt, now)
		}
		f.log.Warn("kafka metadata", "topic", f.topic, "err", err)
		return nil, wake
	}
	ready := map[int][]*partition{}
	n := len(f.parts)
	for i := range n {
		p := f.parts[(f.rotate+i)%n]
		if p.inFlight || p.next < 0 || now.Before(p.retryAt) {
			continue
		}
		broker, ok := leaders[p.id]
		if !ok {
			p.failed(fmt.Errorf("partition %d of %s has no leader", p.id, f.topic))
			wake = earliest(wake, p.retryAt, now)
			continue
		}
		if p.solo {
			broker = soloSlot(p.id) // a request of its own, beside the broker's
		}
		if !busy[broker] {
			ready[broker] = append(ready[broker], p)
		}
	}
	f.rotate++
	return ready, wake
}

// soloSlot is the in-flight slot of a partition fetched on its own: apart
// from any broker's id.
func soloSlot(partition int) int { return -1 - partition }

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
		return nil, err
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
func (f *fetcher) request(parts []*partition, reserved int64, flowing bool) *fetchAPI.Request {
	if f.ratio < 1 {
		f.ratio = 2 // until a response says otherwise
	}
	max := int64(float64(reserved) / f.ratio)
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
	return req
}

func (f *fetcher) roundTrip(ctx context.Context, req *fetchAPI.Request) (*fetchAPI.Response, error) {
	// A request the broker holds for maxFetchWait, and the response's
	// transfer: a dead connection must not hold the partitions forever.
	rctx, cancel := context.WithTimeout(ctx, maxFetchWait+30*time.Second)
	defer cancel()
	res, err := f.transport.RoundTrip(rctx, f.client.Addr, req)
	if err != nil {
		return nil, err
	}
	r := res.(*fetchAPI.Response)
	if r.ErrorCode != 0 {
		return nil, kafka.Error(r.ErrorCode)
	}
	return r, nil
}

// handle takes a round trip's messages into the budget and the tracker and
// hands them on, or sets the partitions it failed back to retry.
func (f *fetcher) handle(ctx context.Context, r fetchResult) error {
	if r.err != nil {
		f.budget.Fill(r.reserved, 0)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(r.err, errBatchTooLarge) {
			f.tooLarge(ctx, r.parts)
			return nil
		}
		for _, p := range r.parts {
			p.failed(r.err)
		}
		f.m.fetchErrors.Add(ctx, 1)
		f.log.Warn("kafka fetch failed; its partitions are retried with backoff", "broker", r.broker, "partitions", len(r.parts), "err", r.err)
		return nil
	}
	byID := make(map[int]*partition, len(r.parts))
	for _, p := range r.parts {
		byID[p.id] = p
	}
	rs := readState{reserved: r.reserved}
	var fatal error
	var suspects []*partition // nothing new, while a batch was refused
	for _, t := range r.res.Topics {
		for i := range t.Partitions {
			rp := &t.Partitions[i]
			p := byID[int(rp.Partition)]
			if p == nil {
				continue
			}
			if rp.ErrorCode != 0 {
				if err := f.partitionError(ctx, p, kafka.Error(rp.ErrorCode)); err != nil {
					fatal = err // the worker stops; the rest is still settled below
				}
				continue
			}
			p.ok()
			p.solo = false
			p.answered = time.Now()
			saw, advanced, full := f.read(p, rp.RecordSet.Records, &rs)
			if r.refused && !advanced && !full {
				suspects = append(suspects, p)
			} else if saw && !advanced && !full {
				// Only records below next: the tail of a compacted batch,
				// which the broker hands out again until newer records come.
				// Wait for those rather than ask again at once.
				p.retryAt = time.Now().Add(maxFetchWait)
			}
			p.lag.Store(max(0, rp.HighWatermark-p.next))
		}
	}
	if len(suspects) > 0 {
		f.tooLarge(ctx, suspects)
	}
	f.budget.Fill(r.reserved, rs.charged)
	if rs.wire > 0 {
		// What a byte asked for became in the budget: from the messages
		// taken, or from all the response held (more when the records were
		// compressed: the broker counts compressed bytes).
		observed := max(float64(rs.charged)/float64(rs.wire), float64(rs.all)/float64(r.asked))
		f.ratio = 0.5*f.ratio + 0.5*max(1, observed)
	}
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
			return fatal
		}
	}
	return fatal
}

// readState is a response's reading so far.
type readState struct {
	batch    []Fetched   // the chunk being filled
	full     [][]Fetched // chunks filled
	reserved int64       // the reservation the messages must fit in
	charged  int64       // what the messages taken are charged
	wire     int64       // their bytes as counted on the wire
	all      int64       // what every record of the response would be charged
}

// tooLarge handles a response that held a batch too large to decompress:
// its partitions are fetched one by one from now on, until the one that
// holds the batch is found; that one waits for an operator, loudly, and
// the others go on.
func (f *fetcher) tooLarge(ctx context.Context, parts []*partition) {
	f.m.fetchErrors.Add(ctx, 1)
	if len(parts) > 1 {
		for _, p := range parts {
			p.solo = true
		}
		f.log.Warn("a fetch response held a batch too large to decompress; fetching its partitions one by one to find it", "topic", f.topic, "partitions", len(parts))
		return
	}
	p := parts[0]
	err := batchTooLarge(f.topic, p.id, p.next)
	if !p.stuck.Load() {
		f.log.Error("partition stopped until an operator acts; the others go on", "topic", f.topic, "partition", p.id, "offset", p.next, "err", err)
	}
	p.failed(err)
	p.retryAt = time.Now().Add(30 * time.Second) // retrying costs a decompression up to the limit
	p.stuck.Store(true)
}

// read copies a partition's records out of the response and tracks them,
// appending them to rs.batch, while they fit in the reservation. A message
// that does not fit stays in Kafka, with every later one of its partition,
// and is fetched again; the first of a response is always taken, so that a
// batch larger than the reservation still goes through (by that much over
// the budget). It reports whether the response held records for the
// partition, whether it moved next, and whether it stopped for want of room.
func (f *fetcher) read(p *partition, records protocol.RecordReader, rs *readState) (saw, advanced, full bool) {
	stream, ok := records.(*protocol.RecordStream)
	if !ok {
		return false, false, false
	}
	// The messages taken are tracked together, under one lock, once read.
	untracked := len(rs.batch)
	defer func() { f.tracker.trackAll(p.a, rs.batch[untracked:]) }()
	for _, b := range stream.Records {
		_, control := b.(*protocol.ControlBatch)
		for {
			rec, err := b.ReadRecord()
			if err != nil {
				break
			}
			saw = true
			if rec.Offset < p.next {
				// Batches may start before the offset asked for.
				closeRecord(rec)
				continue
			}
			if control {
				if !full {
					// A transaction marker: nothing to deliver, but its
					// offset is settled, or the commit would stop before it.
					// Offsets are tracked in order: those before it first.
					f.tracker.trackAll(p.a, rs.batch[untracked:])
					untracked = len(rs.batch)
					f.tracker.TrackSkipped(p.a, rec.Offset)
					p.next, advanced = rec.Offset+1, true
				}
				closeRecord(rec)
				continue
			}
			size, bytes := recordSize(rec)
			rs.all += size
			if full || rs.charged > 0 && rs.charged+size > rs.reserved {
				full = true // the rest is fetched again
				closeRecord(rec)
				continue
			}
			if len(rs.batch) == cap(rs.batch) {
				// The chunk is full (or there is none yet): the next one.
				f.tracker.trackAll(p.a, rs.batch[untracked:])
				if len(rs.batch) > 0 {
					rs.full = append(rs.full, rs.batch)
				}
				rs.batch, untracked = f.chunks.get(), 0
			}
			m := message(f.topic, p.id, rec)
			rs.batch = append(rs.batch, Fetched{Msg: m, Ack: Ack{size: size}})
			rs.charged, rs.wire = rs.charged+size, rs.wire+bytes
			p.next, advanced = rec.Offset+1, true
		}
	}
	return saw, advanced, full
}

// recordSize is what a record is charged (its key, value and headers, and
// MessageOverhead) and its bytes as counted on the wire.
func recordSize(rec *protocol.Record) (charged, wire int64) {
	if rec.Key != nil {
		wire += int64(rec.Key.Len())
	}
	if rec.Value != nil {
		wire += int64(rec.Value.Len())
	}
	for _, h := range rec.Headers {
		wire += int64(len(h.Key) + len(h.Value))
	}
	// A record's own framing on the wire: lengths, delta varints, attributes.
	const framing = 16
	return wire + MessageOverhead, wire + framing
}

// message copies a record out of the response's buffers: one allocation
// for its key and value, so that a message kept long (its dead letter
// retried) pins only itself.
func message(topic string, partition int, rec *protocol.Record) kafka.Message {
	var klen, vlen int
	if rec.Key != nil {
		klen = rec.Key.Len()
	}
	if rec.Value != nil {
		vlen = rec.Value.Len()
	}
	buf := make([]byte, klen+vlen)
	m := kafka.Message{Topic: topic, Partition: partition, Offset: rec.Offset, Headers: rec.Headers}
	if rec.Key != nil {
		_, _ = io.ReadFull(rec.Key, buf[:klen])
		m.Key = buf[:klen:klen]
	}
	if rec.Value != nil {
		_, _ = io.ReadFull(rec.Value, buf[klen:])
		m.Value = buf[klen:]
	}
	closeRecord(rec)
	// Kafka's "no timestamp" is -1; kafka-go's Reader maps it to the zero
	// time, and so does this.
	if ms := rec.Time.UnixMilli(); ms != -1 {
		m.Time = time.UnixMilli(ms).UTC()
	}
	return m
}

func closeRecord(rec *protocol.Record) {
	if rec.Key != nil {
		rec.Key.Close()
	}
	if rec.Value != nil {
		rec.Value.Close()
	}
}

// partitionError handles an error the broker returned for one partition.
func (f *fetcher) partitionError(ctx context.Context, p *partition, err error) error {
	if errors.Is(err, kafka.OffsetOutOfRange) {
		return f.outOfRange(ctx, p)
	}
	p.failed(err)
	f.m.fetchErrors.Add(ctx, 1)
	f.log.Warn("kafka partition fetch failed; retrying it with backoff", "topic", f.topic, "partition", p.id, "backoff", p.delay, "err", err)
	return nil
}

// outOfRange applies --offset-out-of-range to a partition whose next offset
// the broker says is not in its log.
func (f *fetcher) outOfRange(ctx context.Context, p *partition) error {
	first, last, err := f.bounds(ctx, p.id)
	if err != nil {
		p.failed(err)
		return nil
	}
	if p.next >= first && p.next <= last {
		// In range again (a new leader caught up): try again.
		p.failed(fmt.Errorf("offset %d out of range, now within [%d, %d]", p.next, first, last))
		return nil
	}
	if f.reset == ResetFail {
		return fmt.Errorf("partition %d of %s: offset %d is outside the log, which holds offsets %d to %d (the topic was recreated, or retention passed it), and --offset-out-of-range is fail: "+
			"reset the group's offset (kafka-consumer-groups --reset-offsets) or run with --offset-out-of-range earliest or latest",
			p.id, f.topic, p.next, first, last-1)
	}
	to := first
	if f.reset == ResetLatest {
		to = last
	}
	a := f.restart(ctx, p.a, to)
	if a == nil {
		return nil // the generation is over
	}
	f.log.Warn("committed offset outside the log; reading on from --offset-out-of-range", "topic", f.topic, "partition", p.id,
		"offset", p.next, "log_start", first, "log_end", last, "policy", f.reset.String(), "from", to, "skipped", max(0, to-p.next))
	f.m.offsetResets.Add(ctx, 1)
	p.a, p.next = a, to
	p.ok()
	return nil
}

// resolve turns FirstOffset and LastOffset into offsets.
func (f *fetcher) resolve(ctx context.Context) error {
	now := time.Now()
	for _, p := range f.parts {
		if p.next >= 0 || now.Before(p.retryAt) {
			continue
		}
		first, last, err := f.bounds(ctx, p.id)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.failed(err)
			continue
		}
		if p.next == kafka.FirstOffset {
			p.next = first
		} else {
			p.next = last
		}
		p.ok()
	}
	return nil
}

// bounds returns the first offset of a partition's log and its end.
func (f *fetcher) bounds(ctx context.Context, id int) (first, end int64, err error) {
	res, err := f.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		f.topic: {kafka.FirstOffsetOf(id), kafka.LastOffsetOf(id)},
	}})
	if err != nil {
		return 0, 0, err
	}
	for _, po := range res.Topics[f.topic] {
		if po.Partition == id {
			if po.Error != nil {
				return 0, 0, po.Error
			}
			return po.FirstOffset, po.LastOffset, nil
		}
	}
	return 0, 0, fmt.Errorf("no offsets for partition %d of %s", id, f.topic)
}
