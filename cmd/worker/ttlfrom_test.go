package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// ownTTLTenants bounds acme's own TTLs to 10m..3h around its 1h; globex
// keeps the default bounds (0 up to its own 3d).
const ownTTLTenants = `strategy: %s
default_ttl: 2d
tenants:
  acme: {ttl: 1h, min_ttl: 10m, max_ttl: 3h}
  globex: 3d
`

// ownTTLEvent is an event that may give its own TTL, and what it must
// live: the contract's arithmetic with the TTL its tenant's bounds allow,
// worked out by hand here.
type ownTTLEvent struct {
	id, tenant, ttl string // ttl as the event gives it, "" for none
	want            time.Duration
	own             bool
}

var ownTTLEvents = []ownTTLEvent{
	{"t-none", "acme", "", time.Hour, false},
	{"t-in", "acme", "30m", 30 * time.Minute, true},
	{"t-secs", "acme", "7200", 2 * time.Hour, true},
	{"t-low", "acme", "1m", 10 * time.Minute, true}, // below min_ttl
	{"t-high", "acme", "30d", 3 * time.Hour, true},  // above max_ttl
	{"t-globex", "globex", "1d12h", 36 * time.Hour, true},
	{"t-globex-high", "globex", "4d", 72 * time.Hour, true}, // above its own TTL, the default max_ttl
}

// Events give their own TTL in a JSON field or a header; under both
// strategies each lands at the contract's timestamp for the TTL its
// tenant's bounds allow, with the ttl column beside it; clamps are counted
// by tenant and bound; an unreadable TTL is dead-lettered with its reason
// and field; worker read shows each event's TTL and where it came from.
func TestOwnTTLsLandPerContract(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{"default-expiration", "one-second"} {
		for _, from := range []string{"json:ttl", "header:x-ttl"} {
			t.Run(strategy+"/"+from, func(t *testing.T) { testOwnTTLs(t, strategy, from) })
		}
	}
}

func testOwnTTLs(t *testing.T, strategy, from string) {
	e := newEnv(t, fmt.Sprintf(ownTTLTenants, strategy))
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--ttl-from", from)
	admin := adminURL(t, logs)
	occurred := time.Now().Add(-5 * time.Minute).Truncate(time.Millisecond).UTC()
	message := func(id, tenant, ttl string) kafka.Message {
		v := map[string]any{"event_id": id, "tenant_id": tenant, "user_id": "u-1", "occurred_at": occurred.Format(time.RFC3339Nano)}
		var m kafka.Message
		if ttl != "" {
			if from == "json:ttl" {
				v["ttl"] = ttl
			} else {
				m.Headers = []kafka.Header{{Key: "x-ttl", Value: []byte(ttl)}}
			}
		}
		m.Value, _ = json.Marshal(v)
		return m
	}
	var msgs []kafka.Message
	for _, ev := range ownTTLEvents {
		msgs = append(msgs, message(ev.id, ev.tenant, ev.ttl))
	}
	msgs = append(msgs, message("t-bad", "acme", "soon"))
	testenv.ProduceMessages(t, e.brokers, e.topic, msgs...)
	rows := e.waitRows(t, len(ownTTLEvents), 30*time.Second)
	dead := testenv.ReadAll(t, e.brokers, e.topic+".dlq", 1, 20*time.Second)
	e.waitCommitted(t, 30*time.Second)

	// The contract, computed independently of the expiry package.
	lead := 48 * time.Hour
	if strategy == "one-second" {
		lead = 0
	}
	for _, ev := range ownTTLEvents {
		key := rowkey.Key(ev.tenant, "u-1", ev.id, occurred.UnixMilli())
		cells := cellsOf(rows[key])
		if len(cells["event"]) != 1 {
			t.Errorf("%s: %d event cells, want 1", ev.id, len(cells["event"]))
			continue
		}
		want := occurred.UnixMicro() + (ev.want - lead).Microseconds()
		if got := int64(cells["event"][0].Timestamp); got != want {
			t.Errorf("%s (ttl %q): timestamp %d, want %d (a TTL of %s): off by %s", ev.id, ev.ttl, got, want, ev.want, time.Duration(got-want)*time.Microsecond)
		}
		ttlCells := cells["ttl"]
		switch {
		case !ev.own && len(ttlCells) != 0:
			t.Errorf("%s: a ttl cell for an event that gave no TTL", ev.id)
		case ev.own && len(ttlCells) != 1:
			t.Errorf("%s: %d ttl cells, want 1", ev.id, len(ttlCells))
		case ev.own:
			c := ttlCells[0]
			eff := time.Duration(binary.BigEndian.Uint64(c.Value[:8])) * time.Millisecond
			if int64(c.Timestamp) != want || eff != ev.want {
				t.Errorf("%s: ttl cell at %d holding %s, want at %d holding %s", ev.id, c.Timestamp, eff, want, ev.want)
			}
		}
	}
	// Its letter: without payload, since acme's events may ask for as
	// little as min_ttl (10m), and no dead-letter topic keeps a letter
	// that briefly; it points at the record in the input topic.
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want the event with ttl \"soon\"", len(dead))
	}
	field := "ttl"
	if from != "json:ttl" {
		field = from
	}
	d := dead[0]
	if f, class, payload, off := headerOf(d, deadletter.HeaderField), headerOf(d, deadletter.HeaderReasonClass), headerOf(d, deadletter.HeaderPayload), headerOf(d, deadletter.HeaderSourceOffset); f != field || class != "invalid_ttl" ||
		payload != "omitted" || len(d.Value) != 0 || off == "" {
		t.Errorf("dead letter: field %q, class %q, payload %q (%d bytes), source offset %q; want %q, invalid_ttl, omitted, an offset", f, class, payload, len(d.Value), off, field)
	}
	_, body := testenv.MustGet(t, admin+"/metrics")
	for _, c := range []struct {
		tenant, bound string
		want          float64
	}{{"acme", "min", 1}, {"acme", "max", 1}, {"globex", "max", 1}, {"globex", "min", 0}} {
		if v, ok := metricValue(body, "cellttl_events_ttl_clamped_total", `cellttl_tenant="`+c.tenant+`"`, `bound="`+c.bound+`"`); !ok || v != c.want {
			t.Errorf("cellttl_events_ttl_clamped_total{%s,%s} = %v (found %v), want %v", c.tenant, c.bound, v, ok, c.want)
		}
	}
	if v, ok := metricValue(body, "cellttl_dead_letters_total", `reason="invalid_ttl"`); !ok || v != 1 {
		t.Errorf("cellttl_dead_letters_total{reason=invalid_ttl} = %v (found %v), want 1", v, ok)
	}
	_, statusBody := testenv.MustGet(t, admin+"/status?tenants=true")
	var status struct {
		Events map[string]struct {
			TTLClamped int64 `json:"ttl_clamped"`
		} `json:"events"`
		Totals struct {
			TTLClamped int64 `json:"ttl_clamped"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(statusBody), &status); err != nil {
		t.Fatalf("/status: %v", err)
	}
	if status.Events["acme"].TTLClamped != 2 || status.Totals.TTLClamped != 3 {
		t.Errorf("/status ttl_clamped: acme %d, total %d; want 2 and 3", status.Events["acme"].TTLClamped, status.Totals.TTLClamped)
	}
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}

	out, err := e.cmd(t, "read", "--tenant", "acme", "--format", "json")
	if err != nil {
		t.Fatalf("read: %v\n%s", err, out)
	}
	got := map[string]jsonEvent{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev jsonEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("read: %v\n%s", err, line)
		}
		got[ev.EventID] = ev
	}
	for _, ev := range ownTTLEvents {
		if ev.tenant != "acme" {
			continue
		}
		r, ok := got[ev.id]
		source := "tenant"
		if ev.own {
			source = "event"
		}
		if !ok || r.TTL != fmtDur(ev.want) || r.TTLSource != source || !r.Expiry.Equal(occurred.Add(ev.want)) {
			t.Errorf("read %s: %+v, want TTL %s from the %s, expiring %s", ev.id, r, fmtDur(ev.want), source, occurred.Add(ev.want))
		}
	}
	if r := got["t-high"]; r.RequestedTTL != "30d" {
		t.Errorf("read t-high: requested %q, want 30d", r.RequestedTTL)
	}
	text, err := e.cmd(t, "read", "--tenant", "acme")
	if err != nil || !strings.Contains(text, "3h (event asked 30d)") || !strings.Contains(text, "1h (tenant)") || !strings.Contains(text, "30m (event)") {
		t.Errorf("read, text: %v\n%s", err, text)
	}
}
