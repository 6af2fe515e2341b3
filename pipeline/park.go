package pipeline

import (
	"context"
	"sync"

	"github.com/cellttl/cellttl/ingest"
)

// parking holds the records of the partitions that wait for a schema, or
// for the erasure ledger to look a user up, so that the decision loop goes
// on with the others: a value whose schema id the worker has not met costs
// a registry request (one round trip for a garbage id, up to
// --schema-registry-timeout for a slow registry), a user the ledger's
// compact part may hold costs a read of the ledger table, and that wait is
// its partition's alone. A partition's records stay in offset order: once
// one waits, the partition's later records queue behind it.
//
// The records held are charged to the fetcher's byte budget as any others
// (they are fetched and not settled), so the budget bounds them. Past
// half of it (maxBytes), the loop waits for a fetch to end instead of
// polling on: a partition that waits long must not fill the budget and
// hold the others that way, without anyone seeing why. During an outage
// of the registry every partition waits, as it should.
type parking struct {
	schemas  SchemaSource // nil: values need no schema
	parts    map[int]*parked
	bytes    int64 // held, as the fetcher charges them
	maxBytes int64

	// done receives the partitions whose fetch ended; wake, when set, ends
	// the poll that waits meanwhile.
	done chan int
	mu   sync.Mutex
	wake context.CancelFunc
	wg   sync.WaitGroup
}

// parked is a partition's queue: its first record waits for its schema, or
// for its user's lookup.
type parked struct {
	queue    []ingest.Fetched
	fetching bool
}

func newParking(s SchemaSource, maxInflight int64) *parking {
	return &parking{schemas: s, parts: map[int]*parked{}, maxBytes: maxInflight / 2, done: make(chan int, 64)}
}

// holds reports whether f must wait: its partition waits already, or its
// schema is not at hand.
func (k *parking) holds(f *ingest.Fetched) bool {
	if len(k.parts) > 0 && k.parts[f.Msg.Partition] != nil {
		return true
	}
	return k.needsSchema(f)
}

func (k *parking) needsSchema(f *ingest.Fetched) bool {
	return k.schemas != nil && f.Undecodable == nil && f.Cut == nil && !k.schemas.Ready(f.Msg.Value)
}

// A router routes a record, or returns what it must wait for first (its
// user's lookup), leaving it unrouted.
type router func(*ingest.Fetched) (wait func(context.Context) error)

// park queues a copy of f (the slice it is in is the source's again at
// the next poll) behind its partition, and starts wait (nil: the fetch of
// its schema) when it is the partition's first.
func (k *parking) park(ctx context.Context, f *ingest.Fetched, wait func(context.Context) error) {
	q := k.parts[f.Msg.Partition]
	if q == nil {
		q = &parked{}
		k.parts[f.Msg.Partition] = q
	}
	q.queue = append(q.queue, *f)
	k.bytes += size(f)
	if !q.fetching {
		if wait == nil {
			wait = k.schemaOf(f)
		}
		k.fetch(ctx, f.Msg.Partition, wait)
		q.fetching = true
	}
}

// schemaOf is the wait for f's schema.
func (k *parking) schemaOf(f *ingest.Fetched) func(context.Context) error {
	value := f.Msg.Value
	return func(ctx context.Context) error { return k.schemas.Await(ctx, value) }
}

func size(f *ingest.Fetched) int64 {
	return int64(len(f.Msg.Key)+len(f.Msg.Value)) + ingest.MessageOverhead
}

// fetch runs wait beside the loop, then tells it.
func (k *parking) fetch(ctx context.Context, partition int, wait func(context.Context) error) {
	k.wg.Go(func() {
		_ = wait(ctx) // its error is ctx's: the loop stops too
		select {
		case k.done <- partition:
		case <-ctx.Done():
			return
		}
		k.mu.Lock()
		if k.wake != nil {
			k.wake()
		}
		k.mu.Unlock()
	})
}

// waiting reports whether any partition waits.
func (k *parking) waiting() bool { return len(k.parts) > 0 }

// full reports whether the records held reached maxBytes.
func (k *parking) full() bool { return k.bytes >= k.maxBytes }

// wakeOn makes a fetch that ends from now on cancel cancel (the poll's),
// and reports whether one ended already, which the loop takes first.
func (k *parking) wakeOn(cancel context.CancelFunc) bool {
	k.mu.Lock()
	k.wake = cancel
	k.mu.Unlock()
	return len(k.done) > 0
}

// unpark routes the records of each partition whose fetch ended, in their
// order, until one needs a schema not at hand or a lookup: that one waits
// for its own, the records behind it with it.
func (k *parking) unpark(ctx context.Context, route router) {
	k.mu.Lock()
	k.wake = nil
	k.mu.Unlock()
	for {
		select {
		case partition := <-k.done:
			k.resume(ctx, partition, route)
		default:
			return
		}
	}
}

func (k *parking) resume(ctx context.Context, partition int, route router) {
	q := k.parts[partition]
	q.fetching = false
	for len(q.queue) > 0 {
		f := &q.queue[0]
		var wait func(context.Context) error
		if k.needsSchema(f) {
			wait = k.schemaOf(f)
		} else {
			wait = route(f)
		}
		if wait != nil {
			if ctx.Err() == nil {
				k.fetch(ctx, partition, wait)
				q.fetching = true
			}
			return
		}
		k.bytes -= size(f)
		q.queue[0] = ingest.Fetched{} // its bytes are the batch's now, or settled
		q.queue = q.queue[1:]
	}
	delete(k.parts, partition)
}

// await waits until a fetch ends, or ctx does, and routes what it let go.
func (k *parking) await(ctx context.Context, route router) {
	select {
	case partition := <-k.done:
		k.resume(ctx, partition, route)
		k.unpark(ctx, route)
	case <-ctx.Done():
	}
}

// stop waits for the fetches under way, which end with the ctx they were
// given. The records still held stay unsettled: nothing is committed past
// them, and the partition's next owner reads them again.
func (k *parking) stop() { k.wg.Wait() }
