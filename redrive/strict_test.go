package redrive

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/tenants"
)

// Under StrictRetention a letter is decided by the worker's rule, counted
// from when the worker saw its record (the letter's time): a record
// stamped a day ahead and dead-lettered for it is not written by a redrive
// run after that day has come, when the redrive's clock alone would let it
// through. Without StrictRetention it is written, as before.
func TestRedriveStrictRetention(t *testing.T) {
	cfg, err := tenants.Parse([]byte("default_ttl: 2d\ntenants:\n  acme: 3d\n"))
	if err != nil {
		t.Fatal(err)
	}
	pc := pipeline.DefaultConfig() // --max-clock-skew 5m
	if err := pc.Resolve(); err != nil {
		t.Fatal(err)
	}
	seen := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	stamped := seen.Add(24 * time.Hour)
	letter := func(at time.Time, placed ...time.Time) ingest.Message {
		m := ingest.Message{Time: at, Value: []byte(`{"event_id":"e-1","tenant_id":"acme"}`), Headers: []ingest.Header{
			{Key: deadletter.HeaderSourceTopic, Value: []byte("clicks")},
			{Key: deadletter.HeaderSourcePartition, Value: []byte("0")},
			{Key: deadletter.HeaderSourceOffset, Value: []byte("7")},
			{Key: deadletter.HeaderSourceTimestamp, Value: []byte(stamped.Format(time.RFC3339Nano))},
			{Key: deadletter.HeaderReasonClass, Value: []byte("time_ahead")},
		}}
		for _, p := range placed {
			m.Headers = append(m.Headers, ingest.Header{Key: deadletter.HeaderPlaced, Value: []byte(p.Format("2006-01-02T15:04:05.000Z"))})
		}
		return m
	}
	for _, tt := range []struct {
		name     string
		strict   bool
		letterAt time.Time // the letter's timestamp
		placed   []time.Time
		now      time.Time // the redrive's clock
		want     string
	}{
		// Copied a day later (or stamped anew by a broker under
		// LogAppendTime): when the worker placed it still counts.
		{"placed, then stamped anew", true, stamped, []time.Time{seen}, stamped.Add(time.Hour), TimeAhead},
		{"placed when its time had come", true, stamped, []time.Time{stamped}, stamped.Add(time.Hour), Written},
		{"redriven at once", true, seen, nil, seen.Add(time.Minute), TimeAhead},
		{"redriven after the day has come", true, seen, nil, stamped.Add(time.Hour), TimeAhead},
		// A letter produced when the time had come: the worker saw it then.
		{"seen when its time had come", true, stamped, nil, stamped.Add(time.Hour), Written},
		// A letter time later than the redrive's clock counts from the clock.
		{"letter time ahead of the clock", true, stamped.Add(time.Hour), nil, seen, TimeAhead},
		{"without strict", false, seen, nil, stamped.Add(time.Hour), Written},
	} {
		r := &run{o: Options{StrictRetention: tt.strict, Now: func() time.Time { return tt.now }}, d: &pc.Decoder, cfg: cfg, log: slog.New(slog.DiscardHandler)}
		_, outcome, err := r.decide(context.Background(), letter(tt.letterAt, tt.placed...))
		if err != nil || outcome != tt.want {
			t.Errorf("%s: outcome %q (%v), want %q", tt.name, outcome, err, tt.want)
		}
	}
}
