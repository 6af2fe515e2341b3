package kafkaconn

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
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

	// The retention shortfall's view, strict or not: a bounded topic
	// vouches while its reading is fresh, through a failed read, and no
	// longer once unread past StaleAfter intervals; /status says why.
	vouched := watch(false, true)
	if _, err := vouched.Check(ctx); err == nil {
		t.Fatal("a read from nowhere succeeded")
	}
	clock = clock.Add(StaleAfter * time.Second)
	if !vouched.Vouches() {
		t.Errorf("bounded, unread for %d intervals: does not vouch", StaleAfter)
	}
	if st := vouched.Status(); st.Unread == "" || !st.Bounded || st.Topic != "clicks" {
		t.Errorf("status after a failed read: %+v, want the last reading and why the read failed", st)
	}
	clock = clock.Add(time.Millisecond)
	if vouched.Vouches() {
		t.Errorf("bounded, unread past %d intervals: still vouches", StaleAfter)
	}
	if loose.Vouches() {
		t.Error("an unbounded topic vouches")
	}
	never := watch(false, true)
	never.last = RecordTimes{}
	if never.Vouches() || never.Status().Unread != "not read yet" || never.Status().Topic != "clicks" {
		t.Errorf("never read: vouches %t, status %+v", never.Vouches(), never.Status())
	}
}

// A topic's stamping is read from its settings as the broker enforces
// them: after.max.ms first, difference.max.ms when after is unbounded
// (Kafka 3.6 and later still enforce the deprecated one), and Long.MAX
// or anything past a Duration is no bound. Under LogAppendTime the
// broker's clock holds the segments, whatever producers may stamp.
func TestStampingOf(t *testing.T) {
	const max = "9223372036854775807"
	for _, tt := range []struct {
		name    string
		configs map[string]string
		ahead   time.Duration
		setting string
		err     string
	}{
		{"Kafka 3.x's defaults", map[string]string{"message.timestamp.type": "CreateTime", "message.timestamp.after.max.ms": max, "message.timestamp.difference.max.ms": max}, -1, "message.timestamp.after.max.ms", ""},
		{"Kafka 4.x's default", map[string]string{"message.timestamp.type": "CreateTime", "message.timestamp.after.max.ms": "3600000", "message.timestamp.difference.max.ms": max}, time.Hour, "message.timestamp.after.max.ms", ""},
		{"difference only", map[string]string{"message.timestamp.type": "CreateTime", "message.timestamp.after.max.ms": max, "message.timestamp.difference.max.ms": "60000"}, time.Minute, "message.timestamp.difference.max.ms", ""},
		{"a broker before 3.6", map[string]string{"message.timestamp.type": "CreateTime", "message.timestamp.difference.max.ms": "60000"}, time.Minute, "message.timestamp.difference.max.ms", ""},
		{"LogAppendTime", map[string]string{"message.timestamp.type": "LogAppendTime"}, 0, "message.timestamp.after.max.ms", ""},
		{"no type", map[string]string{"message.timestamp.after.max.ms": "1"}, -1, "", "message.timestamp.type not in the answer"},
		{"garbled", map[string]string{"message.timestamp.type": "CreateTime", "message.timestamp.after.max.ms": "soon"}, -1, "", "message.timestamp.after.max.ms"},
	} {
		st, err := StampingOf("t", tt.configs)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || st.SegmentAhead() != tt.ahead || st.Setting != tt.setting {
			t.Errorf("%s: ahead %s by %s (%v), want %s by %s", tt.name, st.SegmentAhead(), st.Setting, err, tt.ahead, tt.setting)
		}
	}
}
