package reader

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/sink/sinktest"
	"github.com/cellttl/cellttl/testkit/testenv"
)

var ctx = context.Background()

type written struct {
	key    string
	tenant string
	expiry time.Time // computed here, independently of the expiry package
	// own is set for an event that gave its own TTL: requested, living
	// want (its tenant's bounds clamp it).
	own             bool
	requested, want time.Duration
}

// ownTTL is an event that gives its own TTL (--ttl-from).
type ownTTL struct {
	tenant          string
	requested, want time.Duration // want: what the tenant's bounds make of it, worked out by hand
}

// writeEvents writes n events per tenant at base, through the production
// write path: expiry.Policy for the timestamp, sink.Writer for the cells.
func writeEvents(t *testing.T, dc *bigtable.Client, tgt sink.Target, p *expiry.Policy, ttls map[string]time.Duration, base time.Time, n int, own ...ownTTL) []written {
	t.Helper()
	var rows []sink.Row
	var out []written
	for tenant, ttl := range ttls {
		for i := range n {
			key := string(rowkey.Build(nil, tenant, fmt.Sprintf("u-%d", i), fmt.Sprintf("%s-%d", tenant, i), base.UnixMilli()))
			rows = append(rows, sinktest.Event(p, tenant, key, base, []byte(`{}`)))
			out = append(out, written{key: key, tenant: tenant, expiry: base.Truncate(time.Millisecond).Add(ttl)})
		}
	}
	for i, o := range own {
		key := string(rowkey.Build(nil, o.tenant, "u-own", fmt.Sprintf("own-%d", i), base.UnixMilli()))
		ttl, _ := p.EventTTL(o.tenant, o.requested)
		rows = append(rows, sink.Row{Key: key, Timestamp: p.CellTTL(ttl, base).Timestamp, Value: []byte(`{}`), WrittenAt: true,
			TTL: sink.TTL{Effective: ttl, Requested: o.requested, Own: true}})
		out = append(out, written{key: key, tenant: o.tenant, expiry: base.Truncate(time.Millisecond).Add(o.want), own: true, requested: o.requested, want: o.want})
	}
	sinktest.Write(t, dc, tgt, rows)
	return out
}

// rawRows reads the table without any filter: what GC has not removed yet.
// It checks that event and written_at cells (and ttl, for an event that
// gave its own) go together.
func rawRows(t *testing.T, tbl *bigtable.Table) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		want := 2
		if strings.Contains(r.Key(), "#own-") {
			want = 3
		}
		if n := len(r["c"]); n != want {
			t.Errorf("row %s has %d cells, want event and written_at (and ttl) together", r.Key(), n)
		}
		out[r.Key()] = true
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The proof: with compressed TTLs, under both strategies, reads never return
// an event after its expiry nor hide one before it, and the emulator's own
// GC removes each tenant's cells no earlier than their expiry and within a
// few seconds after it. A write-side shift off by even a second fails the
// exact expiry check. Events that give their own TTL (--ttl-from), within
// their tenant's bounds or clamped to them, follow the same rules with the
// TTL they end up with: the cell lives exactly that long.
func TestExpiryEndToEnd(t *testing.T) {
	ttls := map[string]time.Duration{"short": 2 * time.Second, "walkin": 6 * time.Second, "long": 12 * time.Second}
	for _, s := range []expiry.Strategy{expiry.DefaultExpiration, expiry.OneSecond} {
		t.Run(s.String(), func(t *testing.T) {
			p := &expiry.Policy{Strategy: s, DefaultTTL: 6 * time.Second, Tenants: map[string]time.Duration{"short": 2 * time.Second, "long": 12 * time.Second},
				Bounds: map[string]expiry.Bounds{"short": {Min: time.Second, Max: 2 * time.Second}, "long": {Min: time.Second, Max: 12 * time.Second}}}
			own := []ownTTL{
				{"long", 3 * time.Second, 3 * time.Second},                   // shorter than its tenant's, within bounds
				{"long", 100 * time.Millisecond, time.Second},                // below min_ttl: clamped up
				{"short", 10 * time.Second, 2 * time.Second},                 // above max_ttl: clamped down
				{"walkin", 1500 * time.Millisecond, 1500 * time.Millisecond}, // unlisted: 0..default_ttl
			}
			dc, ac := testenv.Clients(t)
			tgt := sink.Target(testenv.Table(t, ac, dc, p.GCMaxAge()))
			tbl := dc.Open(tgt.Table)
			base := time.Now()
			events := writeEvents(t, dc, tgt, p, ttls, base, 3, own...)
			r := New(tbl, tgt.Family, p)

			gone := map[string]time.Time{} // when GC was first seen to have removed the row
			deadline := base.Add(12*time.Second + 6*time.Second)
			for len(gone) < len(events) && time.Now().Before(deadline) {
				t0 := time.Now()
				visible := map[string]Event{}
				for tenant := range ttls {
					if err := r.Read(ctx, Query{Tenant: tenant}, func(ev Event) bool { visible[ev.Key] = ev; return true }); err != nil {
						t.Fatal(err)
					}
				}
				raw := rawRows(t, tbl)
				t1 := time.Now()
				for _, w := range events {
					ev, vis := visible[w.key]
					switch {
					case vis && !ev.Expiry.Equal(w.expiry):
						t.Fatalf("%s: reader says it expires %s, the tenant's TTL says %s", w.key, ev.Expiry.Format(time.RFC3339Nano), w.expiry.Format(time.RFC3339Nano))
					case vis && !w.expiry.After(t0):
						t.Fatalf("%s: read at %s, %s after its expiry", w.key, t0.Format(time.RFC3339Nano), t0.Sub(w.expiry))
					case !vis && w.expiry.After(t1):
						t.Fatalf("%s: hidden %s before its expiry", w.key, w.expiry.Sub(t1))
					case vis && (ev.Expired || ev.WrittenAt.IsZero()):
						t.Fatalf("%s: returned %+v", w.key, ev)
					case vis && w.own && (ev.TTLSource != TTLFromEvent || ev.TTL != w.want || ev.RequestedTTL != w.requested):
						t.Fatalf("%s: TTL %v from %s (asked %v), want %v from the event (asked %v)", w.key, ev.TTL, ev.TTLSource, ev.RequestedTTL, w.want, w.requested)
					case vis && !w.own && ev.TTLSource != TTLFromTenant:
						t.Fatalf("%s: TTL from %s, want the tenant's", w.key, ev.TTLSource)
					}
					if !raw[w.key] {
						// The raw read ends at t1: GC may have removed the
						// row at any time up to then, on time if after its
						// expiry. Only an expiry after t1 proves it early (t0,
						// before the reader's read, flagged GC that ran on time
						// between t0 and the raw read, 0.5 ms after expiry).
						if w.expiry.After(t1) {
							t.Fatalf("%s: GC removed it %s before its expiry", w.key, w.expiry.Sub(t1))
						}
						if _, seen := gone[w.key]; !seen {
							gone[w.key] = t1
						}
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			for _, w := range events {
				at, ok := gone[w.key]
				if !ok {
					t.Errorf("%s (%s): GC had not removed it %s after its expiry", w.key, w.tenant, deadline.Sub(w.expiry))
					continue
				}
				if late := at.Sub(w.expiry); late > 4*time.Second {
					t.Errorf("%s (%s): GC removed it %s after its expiry, want within 4s", w.key, w.tenant, late)
				}
			}
			t.Logf("all %d events read until their expiry and collected by GC after it", len(events))
		})
	}
}

func TestQueryUserWindowAndLimit(t *testing.T) {
	dc, ac := testenv.Clients(t)
	p := &expiry.Policy{Strategy: expiry.DefaultExpiration, DefaultTTL: 48 * time.Hour}
	tgt := sink.Target(testenv.Table(t, ac, dc, p.GCMaxAge()))
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var rows []sink.Row
	for i := range 10 {
		at := base.Add(time.Duration(i) * time.Minute)
		for _, user := range []string{"alice", "bob"} {
			rows = append(rows, sink.Row{Key: string(rowkey.Build(nil, "acme", user, fmt.Sprintf("%s-%d", user, i), at.UnixMilli())), Timestamp: p.Cell("acme", at).Timestamp, Value: []byte(fmt.Sprint(i))})
		}
	}
	// An expired event of alice: visible only with IncludeExpired.
	old := time.Now().Add(-72 * time.Hour)
	rows = append(rows, sink.Row{Key: string(rowkey.Build(nil, "acme", "alice", "alice-old", old.UnixMilli())), Timestamp: p.Cell("acme", old).Timestamp, Value: []byte("old")})
	w, err := sink.NewWriter(dc, tgt, sink.DefaultWriterConfig(), nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, rows); err != nil {
		t.Fatal(err)
	}
	r := New(dc.Open(tgt.Table), "c", p)
	ids := func(q Query) []string {
		var out []string
		if err := r.Read(ctx, q, func(ev Event) bool { out = append(out, ev.EventID); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	q := Query{Tenant: "acme", User: "alice", Since: base.Add(2 * time.Minute), Until: base.Add(5 * time.Minute)}
	if got := fmt.Sprint(ids(q)); got != "[alice-2 alice-3 alice-4]" {
		t.Errorf("alice [t+2m, t+5m): %s", got)
	}
	if got := fmt.Sprint(ids(Query{Tenant: "acme", User: "bob", Limit: 2})); got != "[bob-0 bob-1]" {
		t.Errorf("bob limit 2: %s", got)
	}
	if n := len(ids(Query{Tenant: "acme", Since: base.Add(8 * time.Minute)})); n != 4 {
		t.Errorf("tenant since t+8m: %d events, want 4", n)
	}
	if got := ids(Query{Tenant: "acme", User: "alice"}); len(got) != 10 {
		t.Errorf("alice: %d events, want 10 (the expired one hidden)", len(got))
	}
	var expired []Event
	_ = r.Read(ctx, Query{Tenant: "acme", User: "alice", IncludeExpired: true}, func(ev Event) bool {
		if ev.Expired {
			expired = append(expired, ev)
		}
		return true
	})
	if len(expired) != 1 || expired[0].EventID != "alice-old" {
		t.Errorf("IncludeExpired: expired events %+v, want alice-old", expired)
	}
	if err := r.Read(ctx, Query{Tenant: "a#b"}, func(Event) bool { return true }); err == nil {
		t.Error("a tenant id with # was accepted")
	}
}
