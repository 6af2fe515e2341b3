package pipeline

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

const ttlTenants = `strategy: default-expiration
default_ttl: 2d
max_ttl: 3d
tenants:
  acme: {ttl: 1h, min_ttl: 10m, max_ttl: 3h}
  globex: 3d
`

// ownTTLSetup parses a tenants file and a pipeline config whose events give
// their own TTL in the JSON field ttl.
func ownTTLSetup(t *testing.T, tenantsYAML string) (*tenants.Config, Config) {
	t.Helper()
	cfg, err := tenants.Parse([]byte(tenantsYAML))
	if err != nil {
		t.Fatal(err)
	}
	pc := DefaultConfig()
	pc.Fields.TTL = "json:ttl"
	if err := pc.Resolve(); err != nil {
		t.Fatal(err)
	}
	return cfg, pc
}

// An event's own TTL is clamped to its tenant's bounds, and its cell
// follows the TTL it ends up with; a TTL that cannot be read is rejected
// with its reason and field.
func TestDecideOwnTTL(t *testing.T) {
	cfg, pc := ownTTLSetup(t, ttlTenants)
	d := &pc.Decoder
	base := time.Date(2026, 11, 21, 9, 0, 0, 123_000_000, time.UTC)
	now := base.Add(time.Minute)
	tests := []struct {
		tenant, ttl string
		want        time.Duration
		clamp       expiry.Clamp
		own         bool
	}{
		{"acme", ``, time.Hour, expiry.InBounds, false},
		{"acme", `,"ttl":"30m"`, 30 * time.Minute, expiry.InBounds, true},
		{"acme", `,"ttl":"2h"`, 2 * time.Hour, expiry.InBounds, true},
		{"acme", `,"ttl":60`, 10 * time.Minute, expiry.BelowMin, true},
		{"acme", `,"ttl":"30d"`, 3 * time.Hour, expiry.AboveMax, true},
		{"acme", `,"ttl":99999999999999999999`, 3 * time.Hour, expiry.AboveMax, true},
		// globex has no bounds of its own: the top-level max_ttl, min 0.
		{"globex", `,"ttl":"1h"`, time.Hour, expiry.InBounds, true},
		{"globex", `,"ttl":"10d"`, 3 * 24 * time.Hour, expiry.AboveMax, true},
		// An unlisted tenant: default_ttl within the top-level bounds.
		{"initech", `,"ttl":"2d12h"`, 60 * time.Hour, expiry.InBounds, true},
		{"initech", `,"ttl":"9d"`, 3 * 24 * time.Hour, expiry.AboveMax, true},
	}
	for _, tt := range tests {
		msg := ingest.Message{Value: []byte(`{"event_id":"e-1","tenant_id":"` + tt.tenant + `","occurred_at":"2026-11-21T09:00:00.123Z"` + tt.ttl + `}`), Time: base}
		dec := Decide(d, cfg, nil, &msg, now, time.Time{})
		if dec.Fate != Write || dec.TTL != tt.want || dec.TTLClamp != tt.clamp || dec.Row.TTL.Own != tt.own {
			t.Errorf("%s %s: fate %d, TTL %v clamp %v own %v; want %v %v %v", tt.tenant, tt.ttl, dec.Fate, dec.TTL, dec.TTLClamp, dec.Row.TTL.Own, tt.want, tt.clamp, tt.own)
			continue
		}
		// The contract's timestamp with the TTL the event ends up with:
		// default-expiration shifts by (ttl - default_ttl).
		wantTS := base.UnixMicro() + (tt.want - 48*time.Hour).Microseconds()
		if dec.Row.Timestamp != wantTS || !dec.Cell.Expiry.Equal(base.Add(tt.want)) {
			t.Errorf("%s %s: timestamp %d expiry %v, want %d %v", tt.tenant, tt.ttl, dec.Row.Timestamp, dec.Cell.Expiry, wantTS, base.Add(tt.want))
		}
		if tt.own && (dec.Row.TTL.Effective != tt.want || dec.Row.TTL.Requested == 0) {
			t.Errorf("%s %s: the row's ttl column %+v", tt.tenant, tt.ttl, dec.Row.TTL)
		}
	}

	// A TTL shorter than the time since the event: expired, not written.
	msg := ingest.Message{Value: []byte(`{"event_id":"e-1","tenant_id":"globex","occurred_at":"2026-11-21T09:00:00.123Z","ttl":"30s"}`), Time: base}
	if dec := Decide(d, cfg, nil, &msg, now, time.Time{}); dec.Fate != Expired {
		t.Errorf("an own TTL already over: fate %d, want Expired", dec.Fate)
	}
	msg = ingest.Message{Value: []byte(`{"event_id":"e-1","tenant_id":"acme","occurred_at":"2026-11-21T09:00:00.123Z","ttl":"forever"}`), Time: base}
	if dec := Decide(d, cfg, nil, &msg, now, time.Time{}); dec.Fate != Rejected || dec.Class != "invalid_ttl" || dec.Field != "ttl" || !strings.Contains(dec.Err.Error(), `"forever"`) {
		t.Errorf("an unreadable TTL: fate %d class %q field %q err %v", dec.Fate, dec.Class, dec.Field, dec.Err)
	}
}

// The pipeline counts clamps by tenant and bound, writes the ttl column
// only for events that gave a TTL, and dead-letters unreadable ones.
func TestOwnTTLsCountedAndWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, pc := ownTTLSetup(t, ttlTenants)
		src := newSource(`{"event_id":"e-1","tenant_id":"acme"}`, `{"event_id":"e-2","tenant_id":"acme","ttl":"1m"}`,
			`{"event_id":"e-3","tenant_id":"acme","ttl":"1d"}`, `{"event_id":"e-4","tenant_id":"acme","ttl":"2h"}`, `{"event_id":"e-5","tenant_id":"acme","ttl":"1y"}`)
		w, dlq := &fakeWriter{}, &fakeDLQ{}
		stop, p := start(t, pc, src, w, dlq, func() *tenants.Config { return cfg })
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		st := p.Stats().Tenant("acme")
		if lo, hi := st.TTLClampedMin.Load(), st.TTLClampedMax.Load(); lo != 1 || hi != 1 {
			t.Errorf("clamped below %d, above %d; want 1 and 1", lo, hi)
		}
		own := map[string]time.Duration{}
		for _, b := range w.batches {
			for _, r := range b {
				if r.TTL.Own {
					own[r.Key[strings.LastIndexByte(r.Key, '#')+1:]] = r.TTL.Effective
				}
			}
		}
		want := map[string]time.Duration{"e-2": 10 * time.Minute, "e-3": 3 * time.Hour, "e-4": 2 * time.Hour}
		if len(own) != len(want) {
			t.Errorf("rows with a ttl column: %v, want %v", own, want)
		}
		for id, ttl := range want {
			if own[id] != ttl {
				t.Errorf("%s: ttl column %v, want %v", id, own[id], ttl)
			}
		}
		if len(dlq.got) != 1 || dlq.got[0].Class != "invalid_ttl" || dlq.got[0].Field != "ttl" {
			t.Errorf("dead letters %+v, want e-5's invalid_ttl", dlq.got)
		}
		if src.committed() != 5 {
			t.Errorf("committed %d, want 5", src.committed())
		}
	})
}

// Regressions (review): a dead letter keeps its payload no longer than the
// TTL its event asked for. An event whose own TTL cannot be read may have
// asked for as little as its tenant's min_ttl; an unlisted tenant's event
// (unlisted_tenants: dead-letter) no longer than its own TTL within the
// unlisted bounds. And an erased user's event with an unreadable TTL is
// erased by its own time, not the record's.
func TestOwnTTLsBoundTheirDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, pc := ownTTLSetup(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: {ttl: 1h, min_ttl: 10m, max_ttl: 3h}\n")
		at := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
		occurred := at.Format(time.RFC3339Nano)
		src := newSource(
			`{"event_id":"e-0","tenant_id":"acme","user_id":"u-1","occurred_at":"`+occurred+`","ttl":"soon"}`,
			`{"event_id":"e-1","tenant_id":"newco","user_id":"u-1","occurred_at":"`+occurred+`","ttl":"30m"}`,
			// u-9 erased up to before the record's time but after the
			// event's: erased by the event's time.
			`{"event_id":"e-2","tenant_id":"acme","user_id":"u-9","occurred_at":"`+occurred+`","ttl":"soon"}`,
		)
		pc.Erasures = func() *erasure.Ledger {
			return erasure.NewLedger([]erasure.Erasure{{Tenant: "acme", User: "u-9", UpTo: at.Add(time.Second)}}, time.Now())
		}
		for i := range src.msgs {
			src.msgs[i].Time = at.Add(time.Hour) // the record stamped later than the event
		}
		w, dlq := &fakeWriter{}, &fakeDLQ{}
		stop, _ := start(t, pc, src, w, dlq, func() *tenants.Config { return cfg })
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		keep := map[string]time.Time{}
		for _, d := range dlq.got {
			keep[d.Class] = d.KeepUntil
		}
		if len(dlq.got) != 2 {
			t.Fatalf("dead letters %+v, want e-0's and e-1's (e-2's user is erased)", dlq.got)
		}
		if got, want := keep["invalid_ttl"], at.Add(10*time.Minute); !got.Equal(want) {
			t.Errorf("unreadable TTL: payload kept until %s, want %s (the event's time + acme's min_ttl)", got, want)
		}
		if got, want := keep["unlisted_tenant"], at.Add(30*time.Minute); !got.Equal(want) {
			t.Errorf("unlisted tenant asking 30m: payload kept until %s, want %s", got, want)
		}
		if src.committed() != 3 {
			t.Errorf("committed %d, want 3", src.committed())
		}
	})
}

// Regression (review): --flush-rows times three cells must not wrap
// around into a small number that passes.
func TestFlushRowsBoundedWithOwnTTLs(t *testing.T) {
	pc := DefaultConfig()
	pc.Fields.TTL = "json:ttl"
	for _, n := range []int{33_334, 6148914691236517206} {
		pc.FlushRows = n
		if err := pc.Resolve(); err == nil || !strings.Contains(err.Error(), "--flush-rows") {
			t.Errorf("--flush-rows %d with --ttl-from: %v, want refused", n, err)
		}
	}
	pc.FlushRows = 33_333
	if err := pc.Resolve(); err != nil {
		t.Errorf("--flush-rows 33333 with --ttl-from: %v", err)
	}
}

// Decide erases by the record's place as well as by time: an erased
// user's event stamped past erased_up_to is erased when its record lies
// below the erasure's mark (appended before it), valid or not, and written
// when it lies above. worker redrive decides a letter through Decide with
// its record's own topic, partition and offset, so a re-driven letter is
// erased alike.
func TestDecideErasesByOffset(t *testing.T) {
	cfg, pc := ownTTLSetup(t, ttlTenants)
	now := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	ahead := now.Add(30 * time.Minute)
	ledger := erasure.NewLedger([]erasure.Erasure{{Tenant: "acme", User: "u1", UpTo: now,
		Below: &erasure.Mark{Topic: "clicks", Ends: []int64{100}}}}, now)
	for _, c := range []struct {
		value  string
		offset int64
		want   Fate
	}{
		{`{"event_id":"e-1","tenant_id":"acme","user_id":"u1"}`, 99, Erased},
		{`{"event_id":"e-1","tenant_id":"acme","user_id":"u1"}`, 100, Write},
		{`{"event_id":"e-1","tenant_id":"acme","user_id":"u2"}`, 99, Write},
		{`{"event_id":"e-1","tenant_id":"acme","user_id":"u1","ttl":"forever"}`, 99, Erased}, // its letter would copy u1's data
		{`{"event_id":"e-1","tenant_id":"acme","user_id":"u1","ttl":"forever"}`, 100, Rejected},
	} {
		msg := ingest.Message{Topic: "clicks", Offset: c.offset, Value: []byte(c.value), Time: ahead}
		if dec := Decide(&pc.Decoder, cfg, ledger, &msg, now, time.Time{}); dec.Fate != c.want {
			t.Errorf("%s at offset %d: fate %d, want %d", c.value, c.offset, dec.Fate, c.want)
		} else if dec.Fate == Write && (dec.Row.Source != sink.Source{Topic: "clicks", Offset: c.offset}) {
			t.Errorf("%s: the row's source %+v, want its record's (the writer asks the ledger again by it)", c.value, dec.Row.Source)
		}
	}
}
