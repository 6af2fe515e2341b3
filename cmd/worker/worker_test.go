package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

const tenantsYAML = testenv.TenantsYAML

var ttls = map[string]time.Duration{"acme": time.Hour, "globex": 72 * time.Hour}

const defaultTTL = 48 * time.Hour

// wantTimestamp is the contract, computed independently of the expiry
// package: trunc_ms(base) + (tenant_ttl - default_ttl), in microseconds.
func wantTimestamp(tenant string, base time.Time) int64 {
	ttl, ok := ttls[tenant]
	if !ok {
		ttl = defaultTTL
	}
	return base.UnixMilli()*1000 + (ttl - defaultTTL).Microseconds()
}

type click struct {
	EventID    string `json:"event_id"`
	TenantID   string `json:"tenant_id"`
	UserID     string `json:"user_id,omitempty"`
	OccurredAt string `json:"occurred_at,omitempty"`
	Page       string `json:"page"`
}

func (c click) bytes() []byte {
	b, _ := json.Marshal(c)
	return b
}

func TestEventsLandPerContract(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the contract's events through a real broker end to end")
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	occurred := time.Now().Add(-10 * time.Minute).Truncate(time.Second).Add(123456 * time.Microsecond)
	var values [][]byte
	var sent []click
	for i, tenant := range []string{"acme", "globex", "initech", "acme", "globex", "initech"} {
		c := click{EventID: fmt.Sprintf("e-%d", i), TenantID: tenant, UserID: fmt.Sprintf("u-%d", i%2), OccurredAt: occurred.Format(time.RFC3339Nano), Page: "/p"}
		sent = append(sent, c)
		values = append(values, c.bytes())
	}
	noTime := click{EventID: "e-record-time", TenantID: "globex", Page: "/q"}
	expired := click{EventID: "e-expired", TenantID: "acme", OccurredAt: time.Now().Add(-2 * time.Hour).Format(time.RFC3339Nano)}
	future := click{EventID: "e-future", TenantID: "initech", OccurredAt: time.Now().Add(time.Hour).Format(time.RFC3339Nano)}
	values = append(values, noTime.bytes(), expired.bytes(), future.bytes())

	start := time.Now()
	stop, _ := e.startWorker(t)
	testenv.Produce(t, e.brokers, e.topic, values...)
	rows := e.waitRows(t, len(sent)+2, 30*time.Second)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
	end := time.Now()

	byEvent := map[string]string{} // event id -> row key
	for key := range rows {
		byEvent[key[strings.LastIndexByte(key, '#')+1:]] = key
	}
	if _, ok := byEvent["e-expired"]; ok {
		t.Error("an event already expired when processed was written")
	}
	if len(rows) != len(sent)+2 {
		t.Errorf("%d rows, want %d", len(rows), len(sent)+2)
	}
	check := func(c click, value []byte, want func(ts int64) bool, wantDesc string) {
		t.Helper()
		key, ok := byEvent[c.EventID]
		if !ok {
			t.Errorf("event %s not written", c.EventID)
			return
		}
		if !strings.HasPrefix(key, c.TenantID+"#") || !strings.HasSuffix(key, "#"+c.EventID) {
			t.Errorf("row key %q: want <tenant>#...#<event_id>", key)
		}
		cells := cellsOf(rows[key])
		ev, wa := cells["event"], cells["written_at"]
		if len(ev) != 1 || len(wa) != 1 {
			t.Fatalf("row %s: %d event and %d written_at cells, want one each", key, len(ev), len(wa))
		}
		if string(ev[0].Value) != string(value) {
			t.Errorf("row %s: event %q, want the message value %q", key, ev[0].Value, value)
		}
		ts := int64(ev[0].Timestamp)
		if !want(ts) || ts%1000 != 0 {
			t.Errorf("row %s: timestamp %d (%s), want %s", key, ts, time.UnixMicro(ts).UTC().Format(time.RFC3339Nano), wantDesc)
		}
		if wa[0].Timestamp != ev[0].Timestamp {
			t.Errorf("row %s: written_at timestamp %d, event %d: they must expire together", key, wa[0].Timestamp, ev[0].Timestamp)
		}
		w := time.UnixMicro(int64(binary.BigEndian.Uint64(wa[0].Value)))
		if len(wa[0].Value) != 8 || w.Before(start) || w.After(end) {
			t.Errorf("row %s: written_at %x (%s) is not the write time", key, wa[0].Value, w)
		}
	}
	for i, c := range sent {
		want := wantTimestamp(c.TenantID, occurred)
		check(c, values[i], func(ts int64) bool { return ts == want }, strconv.FormatInt(want, 10))
	}
	// No occurred_at: the Kafka record timestamp is the base.
	recTime := recordTime(t, e, noTime.EventID)
	wantRec := wantTimestamp("globex", recTime)
	check(noTime, noTime.bytes(), func(ts int64) bool { return ts == wantRec }, "record time + 1d")
	// An occurred_at an hour ahead of its record: the record timestamp.
	wantFuture := wantTimestamp("initech", recordTime(t, e, future.EventID))
	check(future, future.bytes(), func(ts int64) bool { return ts == wantFuture }, "record time")
}

// The same records consumed again, by a second consumer group, a replay or
// after a crash, land in the same rows with the same cells: nothing about
// an event depends on when it is processed, not even a clamped time.
func TestReplayWritesTheSameCells(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	now := time.Now()
	events := []click{
		{EventID: "r-plain", TenantID: "acme", UserID: "u", OccurredAt: now.Add(-time.Minute).Format(time.RFC3339Nano)},
		{EventID: "r-record-time", TenantID: "globex", UserID: "u"},
		{EventID: "r-clamped", TenantID: "initech", UserID: "u", OccurredAt: now.Add(24 * time.Hour).Format(time.RFC3339Nano)},
		{EventID: "r-year-one", TenantID: "globex", UserID: "u", OccurredAt: "0001-01-01T00:00:00Z"},
	}
	var values [][]byte
	for _, c := range events {
		values = append(values, c.bytes())
	}
	testenv.Produce(t, e.brokers, e.topic, values...)
	firstGroup := e.group
	for pass, group := range []string{firstGroup, testenv.Name("replay")} {
		e.group = group
		stop, _ := e.startWorker(t)
		e.waitCommitted(t, 30*time.Second)
		if err := stop(); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		time.Sleep(50 * time.Millisecond) // the second pass runs at a later processing time
	}
	rowsPerEvent := map[string]int{}
	for key, r := range e.rows(t) {
		id := key[strings.LastIndexByte(key, '#')+1:]
		rowsPerEvent[id]++
		for col, cells := range cellsOf(r) {
			if len(cells) != 1 {
				t.Errorf("row %s: %d versions of %s after two passes, want 1", key, len(cells), col)
			}
		}
		if id == "r-clamped" {
			if want := wantTimestamp("initech", recordTime(t, e, id)); int64(r["c"][0].Timestamp) != want {
				t.Errorf("clamped event: timestamp %d, want %d (the record timestamp's)", r["c"][0].Timestamp, want)
			}
		}
	}
	for _, c := range events[:3] {
		if rowsPerEvent[c.EventID] != 1 {
			t.Errorf("event %s: %d rows after two passes, want 1", c.EventID, rowsPerEvent[c.EventID])
		}
	}
	if n := rowsPerEvent["r-year-one"]; n != 0 {
		t.Errorf("an event of year 1 was written (%d rows): it expired long ago", n)
	}
}

// recordTime finds the Kafka record timestamp of the message with the event id.
func recordTime(t *testing.T, e *env, eventID string) time.Time {
	t.Helper()
	for _, m := range testenv.ReadAll(t, e.brokers, e.topic, 1<<20, 20*time.Second) {
		if strings.Contains(string(m.Value), `"`+eventID+`"`) {
			return m.Time
		}
	}
	t.Fatalf("message of %s not found", eventID)
	return time.Time{}
}
