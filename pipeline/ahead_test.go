package pipeline

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/tenants"
)

// Under --strict-retention an event whose record timestamp, or whose own
// time (kept within --max-clock-skew of the record's), lies past the clock
// + --max-clock-skew is dead-lettered (time_ahead), at the bound and one
// millisecond over; its letter keeps its payload no longer than the event
// may live from when it was seen. An erased user's event stays erased (a
// letter is a copy). Without strict, the same events are written as
// stamped.
func TestDecideTimeAhead(t *testing.T) {
	cfg, err := tenants.Parse([]byte("default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n"))
	if err != nil {
		t.Fatal(err)
	}
	pc := DefaultConfig() // --max-clock-skew 5m
	if err := pc.Resolve(); err != nil {
		t.Fatal(err)
	}
	d := &pc.Decoder
	now := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	latest := StrictLatest(now, d.MaxClockSkew)
	ledger := erasure.NewLedger([]erasure.Erasure{{Tenant: "acme", User: "u-gone", UpTo: now.Add(2 * time.Hour)}}, now)
	const unlistedKeep = 20 * time.Minute
	msg := func(tenant, user string, record time.Time, occurred time.Duration) ingest.Message {
		v := `{"event_id":"e-1","tenant_id":"` + tenant + `","user_id":"` + user + `"`
		if occurred != 0 {
			v += `,"occurred_at":"` + now.Add(occurred).Format(time.RFC3339Nano) + `"`
		}
		return ingest.Message{Value: []byte(v + "}"), Time: record}
	}
	for _, tt := range []struct {
		name      string
		msg       ingest.Message
		fate      Fate
		field     string
		keepUntil time.Time // TimeAhead's letter
	}{
		{"record an hour ahead", msg("acme", "u-1", now.Add(time.Hour), 0), TimeAhead, "", now.Add(time.Hour)},
		{"record at the bound", msg("acme", "u-1", latest, 0), Write, "", time.Time{}},
		{"record a millisecond over", msg("acme", "u-1", latest.Add(time.Millisecond), 0), TimeAhead, "", now.Add(time.Hour)},
		// The record within the bound, its event time within the skew past
		// the record's (so kept by the decoder) but past the bound.
		{"event time past the bound", msg("acme", "u-1", now.Add(4*time.Minute), 8*time.Minute), TimeAhead, "occurred_at", now.Add(time.Hour)},
		{"event time at the bound", msg("acme", "u-1", now.Add(4*time.Minute), 5*time.Minute), Write, "", time.Time{}},
		// An event time past its record's + the skew is the record's
		// (clamped by the decoder), within the bound.
		{"event time clamped", msg("acme", "u-1", now.Add(-time.Minute), 4*time.Minute+time.Millisecond), Write, "", time.Time{}},
		{"record late, event ahead", msg("acme", "u-1", now.Add(time.Minute), 5*time.Minute+time.Millisecond), TimeAhead, "occurred_at", now.Add(time.Hour)},
		// Before unlisted_tenants: dead-letter, whose letter would keep its
		// payload from the forged time.
		{"unlisted tenant", msg("newco", "u-1", now.Add(24*time.Hour), 0), TimeAhead, "", now.Add(unlistedKeep)},
		{"erased user", msg("acme", "u-gone", now.Add(time.Hour), 0), Erased, "", time.Time{}},
	} {
		dec := Decide(d, cfg, ledger, &tt.msg, now, latest)
		if dec.Fate != tt.fate || dec.Field != tt.field {
			t.Errorf("%s: fate %d field %q (%v), want %d %q", tt.name, dec.Fate, dec.Field, dec.Err, tt.fate, tt.field)
			continue
		}
		if dec.Fate != TimeAhead {
			continue
		}
		if dec.Class != "time_ahead" || !strings.Contains(dec.Err.Error(), "--strict-retention") {
			t.Errorf("%s: class %q, err %v", tt.name, dec.Class, dec.Err)
		}
		if got := dec.KeepUntil(cfg, unlistedKeep, tt.msg.Time, now); !got.Equal(tt.keepUntil) {
			t.Errorf("%s: the letter keeps its payload until %s, want %s", tt.name, got, tt.keepUntil)
		}
		// Without strict: written, its cells those of the time stamped.
		plain := Decide(d, cfg, ledger, &tt.msg, now, time.Time{})
		if plain.Fate != Write && plain.Fate != UnlistedDeadLetter {
			t.Errorf("%s without strict: fate %d (%v), want it written as before", tt.name, plain.Fate, plain.Err)
		}
	}
}

// The pipeline dead-letters a time_ahead event under its tenant, commits
// it, and writes the event within the bound; without StrictRetention it
// writes both.
func TestPipelineTimeAhead(t *testing.T) {
	for _, strict := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			cfg, err := tenants.Parse([]byte("default_ttl: 2d\ntenants:\n  acme: 1h\n"))
			if err != nil {
				t.Fatal(err)
			}
			pc := DefaultConfig()
			pc.StrictRetention = strict
			if err := pc.Resolve(); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			src := newSource(`{"event_id":"e-1","tenant_id":"acme"}`, `{"event_id":"e-2","tenant_id":"acme"}`)
			src.msgs[0].Time = time.Now().Add(-time.Second)
			src.msgs[1].Time = time.Now().Add(time.Hour)
			w, dlq := &fakeWriter{}, &fakeDLQ{}
			stop, p := start(t, pc, src, w, dlq, func() *tenants.Config { return cfg })
			time.Sleep(time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			rows := 0
			for _, b := range w.batches {
				rows += len(b)
			}
			st := p.Stats().Tenant("acme")
			if !strict {
				if rows != 2 || len(dlq.got) != 0 {
					t.Errorf("without strict: %d rows, %d letters; want 2 and 0", rows, len(dlq.got))
				}
				return
			}
			// Its payload kept for acme's hour from when it was seen, not
			// from the hour ahead it was stamped.
			if rows != 1 || len(dlq.got) != 1 || dlq.got[0].Class != "time_ahead" || dlq.got[0].Tenant != "acme" ||
				dlq.got[0].KeepUntil.Before(t0.Add(time.Hour)) || dlq.got[0].KeepUntil.After(t0.Add(time.Hour+time.Second)) {
				t.Errorf("strict: %d rows, letters %+v; want 1 row and e-2's time_ahead letter of acme", rows, dlq.got)
			}
			if st.DeadLettered.Load() != 1 || st.Written.Load() != 1 || src.committed() != 2 || p.Stats().TimestampsAhead() != 1 {
				t.Errorf("strict: acme dead-lettered %d written %d, committed %d, ahead %d; want 1 1 2 1",
					st.DeadLettered.Load(), st.Written.Load(), src.committed(), p.Stats().TimestampsAhead())
			}
		})
	}
}
