package ingest

import (
	"math/rand/v2"
	"testing"
)

func TestTrackerCommitsOnlyDonePrefix(t *testing.T) {
	tr := NewTracker()
	a := map[int64]Ack{}
	for _, off := range []int64{10, 11, 12, 15, 16} { // gaps: compacted offsets
		a[off] = tr.Track(0, off)
	}
	b := tr.Track(1, 0)
	if got := tr.Commitable(); len(got) != 0 {
		t.Fatalf("commitable before anything is done: %v", got)
	}
	tr.Done(a[11])
	tr.Done(a[12])
	if got := tr.Commitable(); len(got) != 0 {
		t.Fatalf("offsets after an unsettled one committed: %v", got)
	}
	tr.Done(a[10])
	if got := tr.Commitable()[0]; got != 13 {
		t.Errorf("commit = %d, want 13", got)
	}
	tr.Done(a[16])
	tr.Done(b)
	tr.Done(a[15])
	got := tr.Commitable()
	if got[0] != 17 || got[1] != 1 {
		t.Errorf("commit = %v, want 0:17 1:1", got)
	}
	if tr.Pending() != 0 {
		t.Errorf("pending = %d", tr.Pending())
	}
}

// A partition fetched again from an earlier offset (after a rebalance) never
// moves the commit point backwards, and does not move it forwards past
// messages of the new run that are not done.
func TestTrackerRewind(t *testing.T) {
	tr := NewTracker()
	for off := int64(0); off < 5; off++ {
		tr.Done(tr.Track(0, off))
	}
	old := tr.Track(0, 5) // in flight when the partition is re-fetched
	r3 := tr.Track(0, 3)
	r4 := tr.Track(0, 4)
	r5 := tr.Track(0, 5)
	r6 := tr.Track(0, 6)
	if got := tr.Commitable()[0]; got != 5 {
		t.Errorf("commit after rewind = %d, want 5", got)
	}
	tr.Done(old)
	tr.Done(r3)
	tr.Done(r4)
	if got := tr.Commitable()[0]; got != 5 {
		t.Errorf("commit = %d, want 5 (no regression to 5 via 3,4)", got)
	}
	tr.Done(r6)
	if got := tr.Commitable()[0]; got != 5 {
		t.Errorf("commit = %d, want 5 while 5 of the new run is in flight", got)
	}
	tr.Done(r5)
	if got := tr.Commitable()[0]; got != 7 {
		t.Errorf("commit = %d, want 7", got)
	}
}

// Random completion order: the commit point is always exactly the first
// offset not done.
func TestTrackerRandomOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tr := NewTracker()
	const n = 2000
	acks := make([]Ack, n)
	for i := range acks {
		acks[i] = tr.Track(7, int64(i))
	}
	done := make([]bool, n)
	for _, i := range r.Perm(n) {
		tr.Done(acks[i])
		done[i] = true
		first := 0
		for first < n && done[first] {
			first++
		}
		got, ok := tr.Commitable()[7]
		if first == 0 && ok || first > 0 && got != int64(first) {
			t.Fatalf("after %d: commit %d (ok %t), want %d", i, got, ok, first)
		}
	}
}

// Regression (found by the fault suite): a partition assigned again after
// another member moved its commit forward must not commit the frontier of
// its earlier assignment, which lies behind and would move the group back.
func TestTrackerResetForgetsEarlierAssignment(t *testing.T) {
	tr := NewTracker()
	var late []Ack
	for off := int64(0); off < 300; off++ {
		a := tr.Track(5, off)
		if off < 281 {
			tr.Done(a)
		} else {
			late = append(late, a) // still in flight when the partition is revoked
		}
	}
	tr.Reset(5) // assigned again, at the offset another member committed: 3665
	for _, a := range late {
		tr.Done(a)
	}
	if got, ok := tr.Commitable()[5]; ok {
		t.Fatalf("after Reset, commitable %d from the earlier assignment", got)
	}
	a := tr.Track(5, 3665)
	tr.Done(a)
	if got := tr.Commitable()[5]; got != 3666 {
		t.Errorf("commit = %d, want 3666", got)
	}
}
