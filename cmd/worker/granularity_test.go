package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A table of microsecond timestamp granularity, on the emulator (which
// honours granularity): setup creates one when asked and says so; check
// and run read it; the worker's millisecond cells are written as on a
// table of milliseconds. Asked for the other granularity, setup refuses
// the table: Bigtable sets it at creation alone.
func TestMicrosecondTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	out, err := e.cmd(t, "setup", "--timestamp-granularity", "micros")
	if err != nil || !strings.Contains(out, "table "+e.table+" created with timestamp granularity micros") {
		t.Fatalf("setup --timestamp-granularity micros: %v\n%s", err, out)
	}
	ctx := context.Background()
	tables, err := sink.TableConfig{Project: "local", Instance: "local"}.TableAdmin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tables.Close()
	if g, err := tables.Granularity(ctx, e.table); err != nil || g != sink.Micros {
		t.Fatalf("the table's granularity as Bigtable reads it: %q, %v; want micros", g, err)
	}
	if out, err := e.cmd(t, "check"); err != nil || !strings.Contains(out, "Timestamp granularity micros: ") {
		t.Errorf("check: %v\n%s", err, out)
	}
	// Refused before anything changes: the GC rule set aside stays.
	if err := e.ac.SetGCPolicy(ctx, e.table, "c", bigtable.MaxAgePolicy(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if out, err := e.cmd(t, "setup", "--update-gc-policy", "--timestamp-granularity", "millis"); err == nil || !strings.Contains(err.Error(), "exists with granularity micros") {
		t.Errorf("setup --timestamp-granularity millis of a micros table: %v, want a refusal\n%s", err, out)
	}
	if fam, err := sink.ReadFamily(ctx, e.ac, sink.Target{Table: e.table, Family: "c"}); err != nil || sink.DescribeGC(fam.Rule) != "max-age 1h" {
		t.Errorf("the refused setup changed the GC rule: %q, %v; want max-age 1h kept", sink.DescribeGC(fam.Rule), err)
	}
	if out, err := e.cmd(t, "setup", "--update-gc-policy"); err != nil {
		t.Fatalf("setup --update-gc-policy: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup"); err != nil || !strings.Contains(out, "has timestamp granularity micros") {
		t.Errorf("setup again, the flag left out: %v\n%s", err, out)
	}
	if _, err := e.cmd(t, "setup", "--timestamp-granularity", "nanos"); err == nil || !strings.Contains(err.Error(), `"nanos": want millis or micros`) {
		t.Errorf("--timestamp-granularity nanos: %v, want the flag and the value named", err)
	}

	stop, logs := e.startWorker(t)
	_, body := testenv.MustGet(t, adminURL(t, logs)+"/status")
	var page statusPage
	if err := json.Unmarshal([]byte(body), &page); err != nil || page.TimestampGranularity != "micros" {
		t.Errorf("/status: timestamp_granularity %q (%v), want micros", page.TimestampGranularity, err)
	}
	occurred := time.Now().UTC().Truncate(time.Millisecond).Add(123 * time.Millisecond)
	testenv.Produce(t, e.brokers, e.topic,
		click{EventID: "e-1", TenantID: "acme", OccurredAt: occurred.Format(time.RFC3339Nano)}.bytes(),
		click{EventID: "e-2", TenantID: "globex", OccurredAt: occurred.Format(time.RFC3339Nano)}.bytes())
	rows := e.waitRows(t, 2, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for key, r := range rows {
		tenant := key[:strings.IndexByte(key, '#')]
		if ev := cellsOf(r)["event"]; len(ev) != 1 || int64(ev[0].Timestamp) != wantTimestamp(tenant, occurred) {
			t.Errorf("row %s on a micros table: %+v, want one cell at %d", key, ev, wantTimestamp(tenant, occurred))
		}
	}
}
