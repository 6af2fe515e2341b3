package forget

import (
	"fmt"
	"testing"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/retention"
)

func TestErasedUpTo(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if got := ErasedUpTo(now, time.Time{}, 2*time.Second); !got.Equal(now.Add(2 * time.Second)) {
		t.Errorf("every event: erased_up_to %s, want now + the skew", got)
	}
	before := now.Add(-time.Hour)
	if got := ErasedUpTo(now, before, 2*time.Second); !got.Equal(before.Add(-time.Millisecond)) {
		t.Errorf("--before: erased_up_to %s, want the last millisecond before it", got)
	}
}

// The ledger record lives as long as the longest store, forever when one
// keeps copies forever or cannot be read.
func TestUnreachable(t *testing.T) {
	day := 24 * time.Hour
	f := retention.Facts{Input: retention.TopicKeep{Topic: "in", Keeps: 7 * day, Settings: "retention.ms"},
		DeadLetters: []retention.TopicKeep{{Topic: "in.dlq", Missing: true}}}
	stores, keep := unreachable(f, 30*day, "--backup-retention", 2*day)
	if keep != 30*day || len(stores) != 3 || fmt.Sprint(stores[1]) != "{dead-letter topic in.dlq 0 the topic does not exist }" ||
		stores[2].DecidedBy != "--backup-retention" {
		t.Errorf("keep %s, stores %v", keep, stores)
	}
	f.DeadLetters[0] = retention.TopicKeep{Topic: "in.dlq", Unknown: "denied"}
	if _, keep := unreachable(f, 0, "", 2*day); keep != retention.Forever {
		t.Errorf("a store that cannot be read: keep %s, want forever", keep)
	}
	f.DeadLetters = nil
	if _, keep := unreachable(f, 0, "", 9*day); keep != 9*day {
		t.Errorf("a TTL longer than the topics: keep %s, want the TTL", keep)
	}
}

// A record lives as long as an event it covers could be written: an event
// at erased_up_to, which lies --max-clock-skew after forget began, lives
// the tenant's longest TTL from there, past the record life counted from
// forget's start when the TTL decides it; with forget's tolerated clock
// error to spare, since the copies' keep counts by the brokers' clocks.
func TestRecordExpires(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	upTo := ErasedUpTo(now, time.Time{}, 5*time.Minute)
	if got, want := recordExpires(now, upTo, 3*day, 3*day), upTo.Add(3*day+erasure.ClockTolerance); !got.Equal(want) {
		t.Errorf("TTL-bound: expires %s, want erased_up_to + the TTL + forget's clock tolerance, %s", got, want)
	}
	if got, want := recordExpires(now, upTo, 14*day, 3*day), now.Add(14*day+erasure.ClockTolerance); !got.Equal(want) {
		t.Errorf("topic-bound: expires %s, want now + the keep + forget's clock tolerance, %s", got, want)
	}
	if got := recordExpires(now, upTo, retention.Forever, 3*day); !got.IsZero() {
		t.Errorf("forever: expires %s", got)
	}
}
