package ingest

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
)

// Track records a fetched message of epoch a, charged size bytes, and
// returns its Ack, as the fetcher tracks a response's (trackAll).
func (t *tracker) Track(a *epoch, offset, size int64) Ack {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.trackLocked(a, offset, offset, size)
}

// Done marks one message done, as Consumer.Done does.
func (t *tracker) Done(ack Ack) { t.DoneAll([]Ack{ack}) }

// assign starts one epoch per partition with no committed offset.
func assign(tr *tracker, partitions ...int) map[int]*epoch {
	offsets := map[int]int64{}
	for _, p := range partitions {
		offsets[p] = -1
	}
	return tr.Assign(offsets)
}

// byPartition is Committable keyed by partition.
func byPartition(tr *tracker) map[int]int64 {
	out := map[int]int64{}
	for a, o := range tr.Committable() {
		out[a.partition] = o
	}
	return out
}

func TestTrackerCommitsOnlyDonePrefix(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	e := assign(tr, 0, 1)
	a := map[int64]Ack{}
	for _, off := range []int64{10, 11, 12, 15, 16} { // gaps: compacted offsets
		a[off] = tr.Track(e[0], off, 0)
	}
	b := tr.Track(e[1], 0, 0)
	if got := byPartition(tr); len(got) != 0 {
		t.Fatalf("committable before anything is done: %v", got)
	}
	tr.Done(a[11])
	tr.Done(a[12])
	if got := byPartition(tr); len(got) != 0 {
		t.Fatalf("offsets after an unsettled one committed: %v", got)
	}
	tr.Done(a[10])
	// 13 and 14 are not in the log: the commit point is the first offset
	// not settled.
	if got := byPartition(tr)[0]; got != 15 {
		t.Errorf("commit = %d, want 15", got)
	}
	tr.Done(a[16])
	tr.Done(b)
	tr.Done(a[15])
	got := byPartition(tr)
	if got[0] != 17 || got[1] != 1 {
		t.Errorf("commit = %v, want 0:17 1:1", got)
	}
	if n, _ := tr.Pending(); n != 0 {
		t.Errorf("pending = %d", n)
	}
}

// A partition fetched again from an earlier offset (assigned again after a
// rebalance, at the group's committed offset 3) does not move the commit
// point forwards past messages of the new run that are not done, whatever
// the earlier run's messages do.
func TestTrackerRewind(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	e := assign(tr, 0)[0]
	for off := int64(0); off < 5; off++ {
		tr.Done(tr.Track(e, off, 0))
	}
	old := tr.Track(e, 5, 0) // in flight when the partition is re-fetched
	e2 := tr.Assign(map[int]int64{0: 3})[0]
	r3 := tr.Track(e2, 3, 0)
	r4 := tr.Track(e2, 4, 0)
	r5 := tr.Track(e2, 5, 0)
	r6 := tr.Track(e2, 6, 0)
	if got, ok := byPartition(tr)[0]; ok {
		t.Errorf("commit %d after rewind, before anything of the new run is done", got)
	}
	tr.Done(old)
	tr.Done(r3)
	tr.Done(r4)
	if got := byPartition(tr)[0]; got != 5 {
		t.Errorf("commit = %d, want 5", got)
	}
	tr.Done(r6)
	if got := byPartition(tr)[0]; got != 5 {
		t.Errorf("commit = %d, want 5 while 5 of the new run is in flight", got)
	}
	tr.Done(r5)
	if got := byPartition(tr)[0]; got != 7 {
		t.Errorf("commit = %d, want 7", got)
	}
}

// Random completion order: the commit point is always exactly the first
// offset not done.
func TestTrackerRandomOrder(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	tr := newTracker()
	e := assign(tr, 7)[7]
	const n = 2000
	acks := make([]Ack, n)
	for i := range acks {
		acks[i] = tr.Track(e, int64(i), 0)
	}
	done := make([]bool, n)
	for _, i := range r.Perm(n) {
		tr.Done(acks[i])
		done[i] = true
		first := 0
		for first < n && done[first] {
			first++
		}
		got, ok := byPartition(tr)[7]
		if first == 0 && ok || first > 0 && got != int64(first) {
			t.Fatalf("after %d: commit %d (ok %t), want %d", i, got, ok, first)
		}
	}
}

// Tracked together (as a response is) and settled in batches that finish
// out of order (as writers do), the commit point is the longest settled
// prefix, and each batch gives back the bytes it was charged.
func TestTrackerBatches(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	tr := newTracker()
	e := assign(tr, 3)[3]
	const n = 1000
	fs := make([]Fetched, n)
	for i := range fs {
		fs[i] = Fetched{Msg: Message{Offset: int64(100 + i)}, Ack: Ack{size: int64(i)}}
	}
	tr.trackAll(e, fs[:400])
	tr.trackAll(e, fs[400:])
	var batches [][]Ack
	for i := 0; i < n; i += 50 {
		var b []Ack
		for _, f := range fs[i : i+50] {
			b = append(b, f.Ack)
		}
		batches = append(batches, b)
	}
	done := make([]bool, len(batches))
	for _, i := range r.Perm(len(batches)) {
		var want int64
		for _, a := range batches[i] {
			want += a.size
		}
		if got := tr.DoneAll(batches[i]); got != want {
			t.Fatalf("batch %d gave back %d bytes, want %d", i, got, want)
		}
		done[i] = true
		first := 0
		for first < len(done) && done[first] {
			first++
		}
		got, ok := byPartition(tr)[3]
		if first == 0 && ok || first > 0 && got != int64(100+50*first) {
			t.Fatalf("after batch %d: commit %d (ok %t), want %d", i, got, ok, 100+50*first)
		}
	}
	if n, _ := tr.Pending(); n != 0 {
		t.Errorf("%d pending after every batch was settled", n)
	}
}

// Regression (found by the fault suite): a partition assigned again after
// another member moved its commit forward must not commit the frontier of
// its earlier assignment, which lies behind and would move the group back.
func TestTrackerResetForgetsEarlierAssignment(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	e := assign(tr, 5)[5]
	var late []Ack
	for off := int64(0); off < 300; off++ {
		a := tr.Track(e, off, 0)
		if off < 281 {
			tr.Done(a)
		} else {
			late = append(late, a) // still in flight when the partition is revoked
		}
	}
	e2 := tr.Assign(map[int]int64{5: 3665}) // assigned again, at the offset another member committed
	for _, a := range late {
		tr.Done(a)
	}
	if got, ok := byPartition(tr)[5]; ok {
		t.Fatalf("after reassignment, committable %d from the earlier assignment", got)
	}
	tr.Done(tr.Track(e2[5], 3665, 0))
	if got := byPartition(tr)[5]; got != 3666 {
		t.Errorf("commit = %d, want 3666", got)
	}
}

// Regression (a stale message cannot move a new assignment's commit): a message of the previous generation,
// offset 150, checked as current just before a rebalance and tracked just
// after it, once made the new assignment's committable offset 151 while its
// offsets 100..104 were unwritten. Now every message is tracked in the
// epoch that fetched it, so the interleaving cannot reach the new epoch.
func TestStaleMessageCannotMoveTheNewAssignment(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	gen1 := tr.Assign(map[int]int64{0: 100})[0]
	// The rebalance happens between the message's fetch and its tracking.
	gen2 := tr.Assign(map[int]int64{0: 100})[0]
	if !gen1.Stale() || gen2.Stale() {
		t.Fatalf("stale: first epoch %t, second %t", gen1.Stale(), gen2.Stale())
	}
	tr.Done(tr.Track(gen1, 150, 0))
	var pending []Ack
	for o := int64(100); o <= 104; o++ {
		pending = append(pending, tr.Track(gen2, o, 0))
	}
	if got, ok := byPartition(tr)[0]; ok {
		t.Fatalf("committable %d with offsets 100..104 unwritten", got)
	}
	for _, a := range pending {
		tr.Done(a)
	}
	if got := byPartition(tr)[0]; got != 105 {
		t.Errorf("commit = %d after 100..104 are done, want 105", got)
	}
}

// An offset reset starts an epoch whose commits may go below the old floor:
// the topic was recreated, and its offsets start over.
func TestTrackerRestartAllowsALowerCommit(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	e := tr.Assign(map[int]int64{2: 500})[2]
	tr.Done(tr.Track(e, 500, 0))
	tr.Committed(tr.Committable())
	e2 := tr.Restart(e)
	if e2 == nil || !e.Stale() {
		t.Fatal("restart of a current epoch refused")
	}
	if tr.Restart(e) != nil {
		t.Error("a stale epoch restarted")
	}
	tr.Done(tr.Track(e2, 0, 0))
	tr.Done(tr.Track(e2, 1, 0))
	if got := byPartition(tr)[2]; got != 2 {
		t.Errorf("commit after reset = %d, want 2 (below the old 501)", got)
	}
}

// Transaction markers are settled at once: a partition whose last record is
// a marker commits past it.
func TestTrackerSkipsMarkers(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	e := assign(tr, 0)[0]
	a := tr.Track(e, 0, 0)
	tr.TrackSkipped(e, 1, 1)
	tr.Done(a)
	if got := byPartition(tr)[0]; got != 2 {
		t.Errorf("commit = %d, want 2", got)
	}
}

// Messages queued under an epoch that went stale (a rebalance between their
// fetch and their delivery) are dropped by Fetch, not delivered, and their
// bytes go back to the budget.
func TestFetchDropsMessagesOfAStaleEpoch(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	c := &Consumer{tracker: tr, budget: &budget{limit: 1 << 20}, fetched: make(chan []Fetched, 2), fatal: make(chan error, 1)}
	old := assign(tr, 0)[0]
	c.budget.Fill(0, 300)
	c.fetched <- []Fetched{{Msg: Message{Offset: 150}, Ack: tr.Track(old, 150, 300)}}
	cur := tr.Assign(map[int]int64{0: 100})[0]
	c.budget.Fill(0, 200)
	c.fetched <- []Fetched{{Msg: Message{Offset: 100}, Ack: tr.Track(cur, 100, 200)}}
	m, a, err := fetch(context.Background(), c)
	if err != nil || m.Offset != 100 {
		t.Fatalf("fetched offset %d (%v), want 100: the stale 150 must be dropped", m.Offset, err)
	}
	if got := c.budget.Held(); got != 200 {
		t.Errorf("budget holds %d bytes, want 200: the dropped message's bytes come back", got)
	}
	c.Done(a)
	if got := byPartition(tr)[0]; got != 101 {
		t.Errorf("commit = %d, want 101", got)
	}
}

// Regression (review): a message that goes stale after its chunk was
// polled (a rebalance between two calls of Fetch) is settled and skipped,
// as Poll skips it.
func TestFetchDropsMessagesThatWentStale(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	c := &Consumer{tracker: tr, budget: &budget{limit: 1 << 20}, fetched: make(chan []Fetched, 2), fatal: make(chan error, 1)}
	old := assign(tr, 0)[0]
	c.budget.Fill(0, 300)
	c.fetched <- []Fetched{{Msg: Message{Offset: 10}, Ack: tr.Track(old, 10, 100)}, {Msg: Message{Offset: 11}, Ack: tr.Track(old, 11, 200)}}
	if m, _, err := fetch(context.Background(), c); err != nil || m.Offset != 10 {
		t.Fatalf("fetched offset %d (%v), want 10", m.Offset, err)
	}
	cur := tr.Assign(map[int]int64{0: 11})[0] // the rebalance
	c.budget.Fill(0, 50)
	c.fetched <- []Fetched{{Msg: Message{Offset: 11}, Ack: tr.Track(cur, 11, 50)}}
	m, _, err := fetch(context.Background(), c)
	if err != nil || m.Offset != 11 || m.Offset == 11 && streamOf(c).next != 1 {
		t.Fatalf("fetched offset %d (%v) from chunk position %d, want 11 of the new epoch", m.Offset, err, streamOf(c).next)
	}
	if got := c.budget.Held(); got != 150 {
		t.Errorf("budget holds %d bytes, want 150: the stale message's 200 come back", got)
	}
}

// Regression (memory with one offset stuck): one offset stuck (its dead letter cannot be
// produced, for good) while millions after it are settled. The tracker
// kept 16 bytes for every message after the stuck one, outside the byte
// budget: at 28,000 events/s, past 64 MiB in minutes. Its memory now
// follows the messages not settled, which the budget bounds.
func TestTrackerMemoryWithOneOffsetStuck(t *testing.T) {
	tr := newTracker()
	e := assign(tr, 0)
	stuck := tr.Track(e[0], 0, 0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 3_000_000
	acks := make([]Ack, 0, 1000)
	for off := int64(1); off <= n; off++ {
		acks = append(acks, tr.Track(e[0], off, 0))
		if len(acks) == cap(acks) { // settled a batch at a time, as the pipeline does
			tr.DoneAll(acks)
			acks = acks[:0]
		}
	}
	tr.DoneAll(acks)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 1<<20 {
		t.Errorf("heap grew by %d KiB with %d messages settled behind one stuck offset", grew>>10, n)
	}
	if p, _ := tr.Pending(); p != 1 {
		t.Errorf("pending %d, want 1", p)
	}
	if got := byPartition(tr); len(got) != 0 {
		t.Errorf("committable %v past the stuck offset", got)
	}
	tr.Done(stuck)
	if got := byPartition(tr)[0]; got != n+1 {
		t.Errorf("commit %d once the stuck offset is settled, want %d", got, n+1)
	}
}

// A range of offsets settled as one (an undecodable batch) holds the
// commit point at its first offset until it is settled, then moves it past
// its last.
func TestTrackerRange(t *testing.T) {
	t.Parallel()
	tr := newTracker()
	e := assign(tr, 0)
	a := tr.Track(e[0], 4, 0)
	fs := []Fetched{{Msg: Message{Offset: 5}, Undecodable: &Undecodable{Last: 9}}, {Msg: Message{Offset: 10}}}
	tr.trackAll(e[0], fs)
	tr.Done(a)
	tr.Done(fs[1].Ack)
	if got := byPartition(tr)[0]; got != 5 {
		t.Errorf("commit %d with the range 5-9 unsettled, want 5", got)
	}
	tr.Done(fs[0].Ack)
	if got := byPartition(tr)[0]; got != 11 {
		t.Errorf("commit %d, want 11", got)
	}
}
