package kafkaconn

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"
)

// Under strict, a relaxed topic is a Problem (writes wait on it), and stays
// one through a failed read: the last reading stands. Settings unread for
// StaleAfter intervals are a Problem too, bounded or not; one interval
// less is not. Without strict, nothing is.
func TestRecordTimeWatchProblem(t *testing.T) {
	// A broker address nothing listens on: every read fails at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	clock := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	watch := func(strict bool, bounded bool) *RecordTimeWatch {
		w, err := NewRecordTimeWatch([]string{addr}, "clicks", Security{}, 5*time.Minute, strict, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		w.now = func() time.Time { return clock }
		w.last = RecordTimes{Topic: "clicks", Type: "CreateTime", AheadMax: -1, Bounded: bounded, Summary: "unbounded"}
		w.read, w.interval = clock, time.Second
		return w
	}
	ctx := context.Background()

	relaxed := watch(true, false)
	if err := relaxed.Problem(); !errors.Is(err, ErrUnboundedTimestamps) {
		t.Errorf("strict, relaxed topic: %v, want ErrUnboundedTimestamps", err)
	}
	if _, err := relaxed.Check(ctx); err == nil {
		t.Fatal("a read from nowhere succeeded")
	}
	if err := relaxed.Problem(); !errors.Is(err, ErrUnboundedTimestamps) {
		t.Errorf("strict, relaxed topic, then a failed read: %v, want the last reading to stand", err)
	}

	bounded := watch(true, true)
	if _, err := bounded.Check(ctx); err == nil {
		t.Fatal("a read from nowhere succeeded")
	}
	if err := bounded.Problem(); err != nil {
		t.Errorf("strict, bounded, one failed read: %v, want none", err)
	}
	clock = clock.Add(StaleAfter * time.Second)
	if err := bounded.Problem(); err != nil {
		t.Errorf("strict, bounded, unread for %d intervals: %v, want none yet", StaleAfter, err)
	}
	clock = clock.Add(time.Millisecond)
	if err := bounded.Problem(); !errors.Is(err, ErrTimestampsUnread) {
		t.Errorf("strict, bounded, unread past %d intervals: %v, want ErrTimestampsUnread", StaleAfter, err)
	}

	loose := watch(false, false)
	clock = clock.Add(time.Hour)
	if err := loose.Problem(); err != nil {
		t.Errorf("without strict: %v, want none", err)
	}
}
