package ingest

import (
	"sync"
)

// Tracker decides what may be committed: for each partition, the offset
// after the longest run of fetched messages that are all done (written,
// dead-lettered or skipped). Messages finish out of order, since batches are
// written concurrently, but the commit point only ever moves over a prefix
// that is entirely done. Nothing after a message still in flight is
// committed, whatever finished later.
type Tracker struct {
	mu    sync.Mutex
	parts map[int]*partQueue
}

// Ack marks one tracked message done. The zero Ack does nothing.
type Ack struct {
	q   *partQueue
	seq uint64
}

// partQueue is a FIFO of one partition's tracked messages, in fetch order.
type partQueue struct {
	head    uint64  // seq of entries[0]
	entries []entry // ring would save a copy; a slice with re-slicing is simpler and amortised O(1)
	last    int64   // last offset tracked
	// frontier is the next offset to commit: every tracked offset below it
	// is done. -1 until the first message is done.
	frontier int64
}

type entry struct {
	offset int64
	done   bool
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{parts: map[int]*partQueue{}}
}

// Track records a fetched message and returns its Ack.
func (t *Tracker) Track(partition int, offset int64) Ack {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.parts[partition]
	if q == nil || offset <= q.last {
		// First message, or the partition was fetched again from an earlier
		// offset (a rebalance handed it back at the group's committed
		// offset). Start a new queue: the old one's messages still finish,
		// but only the new run decides commits from here on.
		nq := &partQueue{last: -1, frontier: -1}
		if q != nil {
			nq.frontier = q.frontier
		}
		q = nq
		t.parts[partition] = q
	}
	q.last = offset
	q.entries = append(q.entries, entry{offset: offset})
	return Ack{q: q, seq: q.head + uint64(len(q.entries)) - 1}
}

// Reset forgets what was tracked for a partition: it has just been
// assigned (again) and is read from the group's committed offset. Messages
// tracked before still finish, but they no longer decide its commits: a
// frontier computed in an earlier assignment may lie below what another
// member has committed since, and committing it would move the group back.
func (t *Tracker) Reset(partition int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.parts[partition] = &partQueue{last: -1, frontier: -1}
}

// Done marks the message done.
func (t *Tracker) Done(a Ack) {
	if a.q == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	q := a.q
	if a.seq < q.head {
		return // already done (Done called twice)
	}
	q.entries[a.seq-q.head].done = true
	n := 0
	for n < len(q.entries) && q.entries[n].done {
		n++
	}
	if n == 0 {
		return
	}
	if next := q.entries[n-1].offset + 1; next > q.frontier {
		q.frontier = next
	}
	q.head += uint64(n)
	q.entries = q.entries[n:]
	if len(q.entries) == 0 {
		q.entries = nil // let the backing array go
	}
}

// Commitable returns, per partition, the offset to commit (the next offset
// to read), for partitions where one is known.
func (t *Tracker) Commitable() map[int]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int]int64, len(t.parts))
	for p, q := range t.parts {
		if q.frontier >= 0 {
			out[p] = q.frontier
		}
	}
	return out
}

// Pending returns the number of tracked messages not yet done.
func (t *Tracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, q := range t.parts {
		for _, e := range q.entries {
			if !e.done {
				n++
			}
		}
	}
	return n
}
