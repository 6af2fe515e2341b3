package ingest

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	fetchAPI "github.com/segmentio/kafka-go/protocol/fetch"

	"github.com/cellttl/cellttl/ingest/kwire"
)

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
	budget    *budget
	tracker   *tracker
	// restart begins a partition's epoch anew at an offset reset.
	restart func(context.Context, *epoch, int64) *epoch
	// topicID reads the topic's id, its incarnation ("" when the broker
	// gives none).
	topicID    func(context.Context) (string, error)
	reset      OffsetReset
	requestMax int64 // bytes of one request
	partMax    int64 // bytes of one partition in a request, and of a record held whole
	out        chan<- []Fetched
	chunks     *chunks
	log        *slog.Logger
	m          *consumerMetrics
	records    *kwire.Reader
	// readCommitted asks the broker for committed data only, and skips the
	// batches of aborted transactions (aborts, of the response being read).
	readCommitted bool
	aborts        kwire.Aborts

	parts   []*partition // in partition order
	rotate  int          // first partition of the next request, for fairness
	est     sizeEstimate
	flowing map[int]bool      // last fetch brought messages: the next gathers (busyFetchBytes)
	sentAt  map[int]time.Time // of each broker's last request, for send's order
	spare   [][]byte          // response buffers to reuse
}

// fetchResult is a round trip's outcome.
type fetchResult struct {
	broker   int
	parts    []*partition
	reserved int64 // bytes of the budget reserved for its messages
	res      *fetchResponse
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
	defer f.records.Close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	lagTick := time.NewTicker(lagEvery)
	defer lagTick.Stop()
	watermarks := make(chan map[int]bounds, 1)
	refreshing := false
	lookups := make(chan lookup, 1)
	looking := false
	for {
		f.questioned()
		if !looking {
			looking = f.lookUp(ctx, &wg, lookups)
		}
		ready, wake := f.ready(ctx, busy)
		freed := f.send(ctx, &wg, ready, busy, results)
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
			if !refreshing {
				refreshing = f.refreshLag(ctx, &wg, watermarks)
			}
		case hw := <-watermarks:
			refreshing = false
			f.watermarks(hw)
		case <-ctx.Done():
			return nil
		}
	}
}

// send starts a round trip to each broker of ready, marking it busy, with
// as much of the budget as it can reserve, while the budget has room. When
// it has none, freed is closed when bytes next come back.
//
// The broker whose last request left longest ago goes first: a request
// holds its reservation through its long poll, so at a budget with room
// for fewer requests than brokers, a map's order let one broker win round
// after round, and an idle partition of another, unfetched, read stalled.
func (f *fetcher) send(ctx context.Context, wg *sync.WaitGroup, ready map[int][]*partition, busy map[int]bool, results chan<- fetchResult) (freed <-chan struct{}) {
	order := slices.Collect(maps.Keys(ready))
	slices.SortFunc(order, func(a, b int) int { return cmp.Or(f.sentAt[a].Compare(f.sentAt[b]), cmp.Compare(a, b)) })
	for _, broker := range order {
		parts := ready[broker]
		var n int64
		if n, freed = f.budget.TryReserve(min(minFetchBytes, f.budget.Limit()/4), f.requestMax); n == 0 {
			break
		}
		busy[broker], f.sentAt[broker] = true, time.Now()
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
	return freed
}

// ready groups the partitions that may be fetched now by their leader, in
// turn from one further each time (fairness), skipping brokers with a
// request in flight, and says when to look again for the others.
func (f *fetcher) ready(ctx context.Context, busy map[int]bool) (map[int][]*partition, time.Time) {
	now := time.Now()
	var waiting []*partition
	for i := range f.parts {
		p := f.parts[(f.rotate+i)%len(f.parts)]
		if !p.inFlight && p.want == wantNothing && !now.Before(p.retryAt) {
			waiting = append(waiting, p)
		}
	}
	var ready map[int][]*partition
	if len(waiting) > 0 {
		// From the Transport's cached metadata, which is also how it
		// routes the request: no round trip unless the cache is stale.
		leaders, err := f.leaders(ctx)
		if err == nil {
			ready = map[int][]*partition{}
			f.rotate++
		}
		for _, p := range waiting {
			broker, ok := leaders[p.id]
			switch {
			case err != nil:
				f.fail(ctx, p, err)
			case !ok:
				f.fail(ctx, p, fmt.Errorf("partition %d of %s has no leader", p.id, f.topic))
			case !busy[broker]:
				ready[broker] = append(ready[broker], p)
			}
		}
	}
	// Again when the soonest backoff ends, of the failures just now too. A
	// partition looked up, not fetched, is the lookup's loop iteration's
	// then (or when the lookup under way ends).
	wake := now.Add(time.Hour)
	for _, p := range f.parts {
		if !p.inFlight && p.retryAt.After(now) && p.retryAt.Before(wake) {
			wake = p.retryAt
		}
	}
	return ready, wake
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
	if f.readCommitted {
		// The broker answers up to the last stable offset, and lists the
		// aborted transactions among what it returns. No fetch session
		// (SessionID -1): each response stands alone.
		req.IsolationLevel = 1
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
	if res == nil || len(f.spare) == spareResponses || int64(cap(res.Buffer())) > f.requestMax {
		return
	}
	f.spare = append(f.spare, res.Buffer()[:0])
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
