package deadletter

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/kafkaconn"
)

// A letter goes to the topic that keeps its payload longest without
// outliving its event, by a clock up to clockMargin behind the broker's;
// with no such topic, to the base without payload. A topic with a
// problem, or that keeps records forever, takes no payload.
func TestPlaceKeepsNoPayloadPastItsEvent(t *testing.T) {
	now := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	rs := []TopicRetention{
		{Topic: "d", Keeps: 26 * time.Hour},                                        // base: 1d + 2h + check
		{Topic: "d.1h", Keeps: time.Hour + 10*time.Minute},                         // a class
		{Topic: "d.7d", Keeps: 8 * 24 * time.Hour, refused: true},                  // keeps forever
		{Topic: "d.3d", Keeps: 0},                                                  // forever, accepted
		{Topic: "d.2h", Keeps: 2 * time.Hour, Problem: errors.New("write denied")}, // waits, but takes letters
	}
	for _, tt := range []struct {
		left    time.Duration
		topic   string
		payload bool
	}{
		{30 * 24 * time.Hour, "d", true},
		{26*time.Hour + clockMargin, "d", true},
		{26*time.Hour + clockMargin - time.Millisecond, "d.2h", true},
		{2*time.Hour + clockMargin - time.Millisecond, "d.1h", true},
		{time.Hour + 10*time.Minute + clockMargin, "d.1h", true},
		{time.Hour + 10*time.Minute + clockMargin - time.Millisecond, "d", false},
		{time.Hour + 10*time.Minute, "d", false}, // kept to the keep's end, by a clock behind the broker's
		{0, "d", false},
		{-time.Hour, "d", false},
	} {
		topic, payload := place(rs, now, now.Add(tt.left))
		if topic != tt.topic || payload != tt.payload {
			t.Errorf("%s left: %s (payload %t), want %s (payload %t)", tt.left, topic, payload, tt.topic, tt.payload)
		}
	}
}

// A letter without its payload keeps no key, value or original headers,
// and says the reason's class, never the sentence that quotes the value;
// it still points at the source and carries the value's size and hash.
func TestLetterWithoutPayload(t *testing.T) {
	src := ingest.Message{Topic: "clicks", Partition: 1, Offset: 9, Key: []byte("user-42"), Value: []byte(`{"user_id":"bob#1"}`),
		Headers: []ingest.Header{{Key: "x-user", Value: []byte("bob")}}, Time: time.UnixMilli(1_800_000_000_000)}
	expires := time.UnixMilli(1_800_003_600_000)
	m, truncated := letterMessage(Letter{Msg: src, Reason: `user_id "bob#1" contains '#'`, Field: "user_id", Class: "invalid_id",
		Tenant: "acme", ExpiresAt: expires, KeepUntil: expires}, 1<<20, false)
	if !truncated || m.Key != nil || m.Value != nil {
		t.Fatalf("payload kept: truncated %t, key %q, value %q", truncated, m.Key, m.Value)
	}
	for _, h := range m.Headers {
		if h.Key == "x-user" || string(h.Value) == `user_id "bob#1" contains '#'` {
			t.Errorf("header %s=%q carries the payload", h.Key, h.Value)
		}
	}
	for k, want := range map[string]string{HeaderReason: "invalid_id", HeaderField: "user_id", HeaderPayload: "omitted", HeaderSourceOffset: "9",
		HeaderOriginalSize: "19", HeaderTenant: "acme", HeaderExpiresAt: "2027-01-15T09:00:00.000Z", HeaderDropped: "headers,key"} {
		if got, _ := header(m, k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	// With its payload, the same letter says the sentence and the tenant.
	m, _ = letterMessage(Letter{Msg: src, Reason: "r", Class: "invalid_id", Tenant: "acme", ExpiresAt: expires}, 1<<20, true)
	if got, _ := header(m, HeaderReason); got != "r" || string(m.Value) != string(src.Value) {
		t.Errorf("with payload: reason %q, value %q", got, m.Value)
	}
	if got, _ := header(m, HeaderExpiresAt); got != "2027-01-15T09:00:00.000Z" {
		t.Errorf("expires_at %q", got)
	}
}

// A topic keeps records forever when its policy never deletes, or its
// retention is -1.
func TestUnbounded(t *testing.T) {
	for _, tt := range []struct {
		r    TopicRetention
		want bool
	}{
		{TopicRetention{Policy: "delete", Retention: time.Hour}, false},
		{TopicRetention{Policy: "compact,delete", Retention: time.Hour}, true}, // merged segments, keyless letters refused
		{TopicRetention{Policy: "compact", Retention: time.Hour}, true},
		{TopicRetention{Policy: "delete", Retention: -time.Millisecond}, true},
	} {
		if got := tt.r.unbounded() != ""; got != tt.want {
			t.Errorf("%+v: unbounded %t, want %t", tt.r, got, tt.want)
		}
	}
}

// A topic's keep counts how far ahead its records may be stamped: Kafka
// deletes a segment only once its newest timestamp is past retention.ms,
// and segments only from the front, so a record stamped ahead holds its
// own and every later one. Nothing under LogAppendTime; after.max.ms (or
// difference.max.ms) under CreateTime; forever when neither bounds it.
func TestKeepCountsRecordsStampedAhead(t *testing.T) {
	base := TopicRetention{Policy: "delete", Retention: time.Hour, Segment: 10 * time.Minute, RetentionCheck: time.Minute}
	stamped := func(typ string, ahead time.Duration) TopicRetention {
		r := base
		r.Stamping = kafkaconn.Stamping{Type: typ, AheadMax: ahead}
		return r
	}
	for _, tt := range []struct {
		name string
		r    TopicRetention
		want time.Duration
	}{
		{"LogAppendTime", stamped("LogAppendTime", -1), 71 * time.Minute},
		{"LogAppendTime, after.max.ms set", stamped("LogAppendTime", 24*time.Hour), 71 * time.Minute},
		{"CreateTime within 5m", stamped("CreateTime", 5*time.Minute), 76 * time.Minute},
		{"CreateTime within a day", stamped("CreateTime", 24*time.Hour), 25*time.Hour + 11*time.Minute},
		{"CreateTime unbounded (Kafka 3.x's default)", stamped("CreateTime", -1), 0},
		{"CreateTime at Long.MAX_VALUE's edge", stamped("CreateTime", math.MaxInt64/8), 0},
		{"settings unread", TopicRetention{}, 0},
	} {
		if got := tt.r.keeps(); got != tt.want {
			t.Errorf("%s: keeps %s, want %s", tt.name, got, tt.want)
		}
	}
}
