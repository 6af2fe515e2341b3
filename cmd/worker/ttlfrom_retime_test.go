package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A tenant TTL edit followed by worker retime: rows whose own TTL lies
// within the new bounds keep their cells, rows the new bounds clamp
// differently move to the TTL the bounds now allow (their ttl cell with
// them), and rows of the tenant's TTL follow the new TTL.
func TestRetimeAfterATenantEditKeepsOwnTTLs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fmt.Sprintf(ownTTLTenants, "default-expiration"))
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, _ := e.startWorker(t, "--ttl-from", "json:ttl")
	occurred := time.Now().Add(-5 * time.Minute).Truncate(time.Millisecond).UTC()
	var values [][]byte
	for _, ev := range ownTTLEvents {
		v := map[string]any{"event_id": ev.id, "tenant_id": ev.tenant, "user_id": "u-1", "occurred_at": occurred.Format(time.RFC3339Nano)}
		if ev.ttl != "" {
			v["ttl"] = ev.ttl
		}
		b, _ := json.Marshal(v)
		values = append(values, b)
	}
	testenv.Produce(t, e.brokers, e.topic, values...)
	before := e.waitRows(t, len(ownTTLEvents), 30*time.Second)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// acme: 1h → 2h, its events now 20m..90m.
	e.writeTenants(t, "strategy: default-expiration\ndefault_ttl: 2d\ntenants:\n  acme: {ttl: 2h, min_ttl: 20m, max_ttl: 2h30m}\n  globex: 3d\n")
	if out, err := e.cmd(t, "retime", "--tenant", "acme", "--passes", "1"); err != nil {
		t.Fatalf("retime: %v\n%s", err, out)
	}
	after := e.rows(t)
	wants := map[string]time.Duration{
		"t-none": 2 * time.Hour,                // the tenant's TTL: follows the edit
		"t-in":   30 * time.Minute,             // 30m: within 20m..2h30m, left alone
		"t-secs": 2 * time.Hour,                // 2h: within, left alone
		"t-low":  20 * time.Minute,             // asked 1m: clamped to the new min
		"t-high": 2*time.Hour + 30*time.Minute, // asked 30d: clamped to the new max
	}
	for id, want := range wants {
		key := rowkey.Key("acme", "u-1", id, occurred.UnixMilli())
		cells := cellsOf(after[key])
		wantTS := occurred.UnixMicro() + (want - 48*time.Hour).Microseconds()
		if len(cells["event"]) != 1 || int64(cells["event"][0].Timestamp) != wantTS {
			t.Errorf("%s after retime: event cells %v, want one at %d (a TTL of %s)", id, cells["event"], wantTS, want)
			continue
		}
		if ttl := cells["ttl"]; len(ttl) == 1 {
			eff := time.Duration(binary.BigEndian.Uint64(ttl[0].Value[:8])) * time.Millisecond
			if int64(ttl[0].Timestamp) != wantTS || eff != want {
				t.Errorf("%s after retime: ttl cell at %d holding %s, want at %d holding %s", id, ttl[0].Timestamp, eff, wantTS, want)
			}
		}
		old := cellsOf(before[key])["event"][0].Timestamp
		if unchanged := id == "t-in" || id == "t-secs"; unchanged != (old == cells["event"][0].Timestamp) {
			t.Errorf("%s: timestamp %d before, %d after: want it moved only when the new bounds clamp it or it has the tenant's TTL", id, old, cells["event"][0].Timestamp)
		}
	}
}

func fmtDur(d time.Duration) string { return duration.Format(d) }
