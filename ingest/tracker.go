package ingest

import (
	"sync"
	"sync/atomic"
	"time"
)

// tracker decides what may be committed: for each partition, the offset
// after the longest run of fetched messages that are all done (written,
// dead-lettered or skipped). Messages finish out of order, since batches are
// written concurrently, but the commit point only ever moves over a prefix
// that is entirely done. Nothing after a message still in flight is
// committed, whatever finished later.
//
// Each assignment of a partition is an epoch of its own, an *epoch, and
// every message is tracked in the epoch that fetched it. A rebalance or
// an offset reset starts a new epoch; messages of an earlier one may still
// be tracked and finish, but they decide nothing: only current epochs are
// committable. So a message fetched before a rebalance can never move the
// commit point of the partition's next assignment, whatever the
// interleaving, because the check and the tracking are one step.
type tracker struct {
	mu      sync.Mutex
	current map[int]*epoch
	fell    signal // Pending may have fallen: a message settled, or epochs ended
}

// epoch is one assignment of one partition: from its assignment (or offset
// reset) until the next. Its fields are guarded by the tracker's mutex.
type epoch struct {
	partition int
	stale     atomic.Bool // a later epoch replaced it, or the partition was revoked
	// of is the topic's id its offsets are of ("" unknown, or from a
	// broker that gives no ids), set by the fetcher as it learns it.
	of atomic.Pointer[string]
	// questioned: the committer read another id for the topic than of,
	// and committed none of its offsets. The fetcher then waits for the
	// id before it reads the partition on (wantIncarnation).
	questioned atomic.Bool

	// entries are the messages tracked and not yet known done, in offset
	// order, with done ones among them until there are too many: memory
	// follows the messages not yet settled, never the span behind the
	// oldest of them (one stuck offset with millions settled after it
	// holds a few entries, not millions). Each message not settled holds
	// its bytes in the budget, which bounds them.
	entries []entry
	ndone   int   // entries marked done and not yet removed
	last    int64 // last offset tracked
	// frontier is the next offset to commit: every offset tracked below it
	// is done. -1 until one is.
	frontier int64
	// floor is the group's committed offset as this epoch knows it: the
	// offset at assignment, then what this epoch committed. Commits only go
	// above it, so a worker never moves the group back, except for an epoch
	// begun by an offset reset, whose floor is -1.
	floor int64
}

// entry is a message, or a range of offsets settled as one (a record batch
// that could not be decoded), by the first offset it covers.
type entry struct {
	offset int64
	// at is the message's time in Unix ms, for the age of the oldest one
	// not settled: the record's timestamp, or when it was fetched if it
	// has none or one ahead of that.
	at   int64
	done bool
}

// compactAt is the number of entries from which done ones are removed once
// they are half of them: amortised O(1) per message.
const compactAt = 64

// Stale reports whether a later epoch replaced this one.
func (a *epoch) Stale() bool { return a.stale.Load() }

// Ack settles one message: the Source that handed it out takes it back
// (Consumer.Done or Settle). Offset names the message, by the first offset
// it stands for, so that a source other than the Consumer can hand out
// Acks it tells apart; the rest is the Consumer's, and an Ack it did not
// hand out (the zero Ack among them) settles nothing in it.
type Ack struct {
	Offset int64
	a      *epoch
	size   int64 // bytes charged to the budget
}

// newTracker returns an empty tracker.
func newTracker() *tracker {
	return &tracker{current: map[int]*epoch{}}
}

// Assign starts the epochs of a generation: one per partition, with the
// group's committed offset (negative when there is none). Every earlier
// epoch becomes stale, also of partitions assigned again.
func (t *tracker) Assign(offsets map[int]int64) map[int]*epoch {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.revokeLocked()
	out := make(map[int]*epoch, len(offsets))
	for p, committed := range offsets {
		a := &epoch{partition: p, last: -1, frontier: -1, floor: max(committed, -1)}
		t.current[p] = a
		out[p] = a
	}
	return out
}

// Revoke makes every epoch stale: the generation ended.
func (t *tracker) Revoke() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.revokeLocked()
}

func (t *tracker) revokeLocked() {
	for p, a := range t.current {
		a.stale.Store(true)
		delete(t.current, p)
	}
	t.fell.fire()
}

// Restart replaces a current epoch by a new one whose commits may go below
// the old floor: the partition's offset was reset (the committed offset
// lies outside the log). It returns nil when a is no longer current.
func (t *tracker) Restart(a *epoch) *epoch {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.current[a.partition] != a {
		return nil
	}
	a.stale.Store(true)
	n := &epoch{partition: a.partition, last: -1, frontier: -1, floor: -1}
	t.current[a.partition] = n
	t.fell.fire()
	return n
}

// TrackSkipped records offsets first to last, which the worker will never
// deliver (the control records of transactions), as done at once.
func (t *tracker) TrackSkipped(a *epoch, first, last int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.doneLocked(t.trackLocked(a, first, last, 0))
}

// trackAll tracks the fetched messages fs, all of epoch a, in offset
// order, under one lock, and sets their Acks (each carrying its size).
func (t *tracker) trackAll(a *epoch, fs []Fetched) {
	if len(fs) == 0 {
		return
	}
	now := time.Now().UnixMilli()
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range fs {
		last := fs[i].Msg.Offset
		if u := fs[i].Undecodable; u != nil {
			last = u.Last
		}
		fs[i].Ack = t.trackLocked(a, fs[i].Msg.Offset, last, fs[i].Ack.size)
		// A timestamp of 0 or before is none: the fetch stands for it.
		if ms := fs[i].Msg.Time.UnixMilli(); !fs[i].Msg.Time.IsZero() && ms > 0 {
			a.entries[len(a.entries)-1].at = min(ms, now)
		} else {
			a.entries[len(a.entries)-1].at = now
		}
	}
}

// trackLocked tracks offsets first to last as one message.
func (t *tracker) trackLocked(a *epoch, first, last, size int64) Ack {
	a.last = last
	a.entries = append(a.entries, entry{offset: first})
	return Ack{Offset: first, a: a, size: size}
}

// DoneAll marks many messages done under one lock, and returns the bytes
// they were charged.
func (t *tracker) DoneAll(acks []Ack) int64 {
	var size int64
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range acks {
		if a.a != nil {
			t.doneLocked(a)
			size += a.size
		}
	}
	return size
}

func (t *tracker) doneLocked(ack Ack) {
	a := ack.a
	// Entries are in offset order: the message is found by its offset.
	lo, hi := 0, len(a.entries)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a.entries[m].offset < ack.Offset {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(a.entries) || a.entries[lo].offset != ack.Offset || a.entries[lo].done {
		return // already done (Done called twice)
	}
	a.entries[lo].done = true
	a.ndone++
	t.fell.fire()
	n := 0
	for n < len(a.entries) && a.entries[n].done {
		n++
	}
	if n > 0 {
		a.entries = a.entries[n:]
		a.ndone -= n
		if len(a.entries) == 0 {
			a.entries = nil // let the backing array go
			a.frontier = max(a.frontier, a.last+1)
		} else {
			// Every offset tracked below the first entry is done.
			a.frontier = max(a.frontier, a.entries[0].offset)
		}
	}
	if a.ndone >= compactAt/2 && 2*a.ndone >= len(a.entries) {
		a.compact()
	}
}

// compact removes the done entries, and moves the rest to a smaller array
// when the one they are in has grown far larger than they need.
func (a *epoch) compact() {
	keep := a.entries[:0]
	if cap(a.entries) > 4*(len(a.entries)-a.ndone)+compactAt {
		keep = make([]entry, 0, 2*(len(a.entries)-a.ndone)+compactAt)
	}
	for _, e := range a.entries {
		if !e.done {
			keep = append(keep, e)
		}
	}
	clear(a.entries[len(keep):len(a.entries)])
	a.entries, a.ndone = keep, 0
}

// Committable returns the current epochs whose settled prefix lies above
// what the group has committed, with the offset to commit (the next offset
// to read).
func (t *tracker) Committable() map[*epoch]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[*epoch]int64{}
	for _, a := range t.current {
		if a.frontier > a.floor {
			out[a] = a.frontier
		}
	}
	return out
}

// incarnation is the topic's id the epoch's offsets are of, "" unknown.
func (a *epoch) incarnation() string {
	if id := a.of.Load(); id != nil {
		return *id
	}
	return ""
}

// Current returns the current epochs.
func (t *tracker) Current() []*epoch {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*epoch, 0, len(t.current))
	for _, a := range t.current {
		out = append(out, a)
	}
	return out
}

// Committed raises the floors of the epochs whose offsets the group took.
func (t *tracker) Committed(offsets map[*epoch]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for a, o := range offsets {
		a.floor = max(a.floor, o)
	}
}

// Floors returns, per current partition, the committed offset as its epoch
// knows it (-1 when none is known).
func (t *tracker) Floors() map[int]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int]int64, len(t.current))
	for p, a := range t.current {
		out[p] = a.floor
	}
	return out
}

// Oldest returns, per current partition with a message not settled, the
// time (entry.at) of the oldest such message: the tracker removes a
// settled prefix at once, so it is the first entry.
func (t *tracker) Oldest() map[int]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[int]time.Time{}
	for p, a := range t.current {
		if len(a.entries) > 0 {
			out[p] = time.UnixMilli(a.entries[0].at)
		}
	}
	return out
}

// Pending returns the number of tracked messages of current epochs not yet
// done and, when there are some, a channel closed when that number may
// next have fallen (a message settled, or epochs ended), taken in the same
// step, so that a waiter misses no settle.
func (t *tracker) Pending() (int, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, a := range t.current {
		n += len(a.entries) - a.ndone
	}
	if n == 0 {
		return 0, nil
	}
	return n, t.fell.wait()
}
