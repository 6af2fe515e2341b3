package sink

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The cap holds: rows past the first second's burst wait their turn.
func TestThrottleCapsRows(t *testing.T) {
	th := NewThrottle()
	th.SetCap(200)
	ctx := context.Background()
	start := time.Now()
	for range 6 {
		if err := th.Wait(ctx, 100); err != nil {
			t.Fatal(err)
		}
	}
	// 200 rows of burst, then 400 at 200 a second: 2 s at least.
	if took := time.Since(start); took < 1900*time.Millisecond {
		t.Errorf("600 rows at a cap of 200/s with a burst of 200 took %s, want 2 s or more", took)
	}
	th.SetCap(0)
	start = time.Now()
	if err := th.Wait(ctx, 1_000_000); err != nil || time.Since(start) > time.Second {
		t.Errorf("without a cap a million rows waited %s (%v)", time.Since(start), err)
	}
	// A wait is given up with its context, not served.
	th.SetCap(1)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := th.Wait(cctx, 10); err == nil {
		t.Error("a wait of 10 s for 10 rows at 1/s outlived its context of 50 ms")
	}
}

// Bigtable's throttling halves the rate sent, once a second at most; each
// second without it adds a tenth, up to the cap, which then holds alone;
// without a cap, the limit is lifted once it no longer binds.
func TestThrottleBacksOffAndRecovers(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	th := NewThrottle()
	th.now = func() time.Time { return now }
	tick := func(d time.Duration) { now = now.Add(d) }

	// A second at 1000 rows, then a refusal.
	for range 10 {
		th.Sent(100, false)
	}
	tick(time.Second)
	th.Sent(100, true)
	if l := th.Limit(); l != 500 {
		t.Fatalf("after a refusal: limit %v, want half of the 1000 rows sent in the last second", l)
	}
	th.Sent(100, true)
	if l := th.Limit(); l != 500 {
		t.Errorf("a second refusal within the second cut again: %v", l)
	}
	th.Sent(400, false)
	tick(time.Second)
	th.Sent(100, true)
	if l := th.Limit(); l != 250 {
		t.Errorf("a refusal a second later, 600 rows sent at a limit of 500: limit %v, want 250", l)
	}
	// Sending at the limit, each second without a refusal adds a tenth.
	for range 3 {
		tick(time.Second)
		th.Sent(int(th.Limit()), false)
	}
	if l := th.Limit(); l < 330 || l > 340 {
		t.Errorf("three seconds without a refusal: limit %v, want 250 × 1.1³ and a row a second", l)
	}
	// Growing past twice what is sent, it binds no more: lifted.
	for range 5 {
		tick(time.Second)
		th.Sent(100, false)
	}
	if l := th.Limit(); l != 0 {
		t.Errorf("after 5 quiet seconds at 100 rows a second: limit %v, want none", l)
	}

	// With a cap, a cut is of what is sent or the cap, and growth stops at
	// the cap.
	th.SetCap(400)
	tick(time.Second)
	for range 10 {
		th.Sent(100, false)
	}
	tick(time.Second)
	th.Sent(100, true)
	if l := th.Limit(); l != 200 {
		t.Errorf("a refusal under a cap of 400: limit %v, want 200", l)
	}
	for range 20 {
		tick(time.Second)
		th.Sent(int(th.Limit()), false)
	}
	if l := th.Limit(); l != 400 {
		t.Errorf("recovered under a cap of 400: limit %v, want the cap", l)
	}
	// Never below the floor, however long the refusals.
	for range 30 {
		tick(time.Second)
		th.Sent(1, true)
	}
	if l := th.Limit(); l != minRate {
		t.Errorf("after 30 s of refusals: limit %v, want the floor %d", l, minRate)
	}
	// The rate grows back by the clock, not by the requests, which a rate
	// at the floor makes rare: a minute later, with one request, it is
	// back at the cap.
	tick(time.Minute)
	th.Sent(1, false)
	if l := th.Limit(); l != 400 {
		t.Errorf("a minute after the last refusal: limit %v, want the cap 400", l)
	}
}

// A cap raised by an edit frees a batch already waiting at the old one
// within a second or two (the limit is read again before each second's
// worth of rows), not only the batches that start waiting after the edit.
// 20 rows at 2 a second would wait 9 s.
func TestRaisedCapFreesAWaitingBatch(t *testing.T) {
	var capacity atomic.Value
	capacity.Store(2.0)
	th := NewThrottle()
	th.Follow(func() float64 { return capacity.Load().(float64) })
	edit := time.AfterFunc(300*time.Millisecond, func() { capacity.Store(1e6) })
	defer edit.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	start := time.Now()
	if err := th.Wait(ctx, 20); err != nil {
		t.Fatalf("20 rows waited past 6 s after the cap was raised from 2/s at 0.3 s: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("20 rows took %s after the cap was raised from 2/s at 0.3 s, want under 3 s", took)
	}
	if l := th.Limit(); l != 1e6 {
		t.Errorf("limit %v after the edit, want 1e6", l)
	}
}
