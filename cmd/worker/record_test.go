package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/internal/testenv"
	"github.com/cellttl/cellttl/tablemeta"
)

// runBriefly runs `worker run` until it stops by itself or for 20s, and
// returns its error and logs: a worker that refuses to start returns at
// once.
func (e *env) runBriefly(t *testing.T, extra ...string) (error, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logs := &syncBuffer{}
	err := run(ctx, e.args("run", extra...), logs, logs)
	if ctx.Err() != nil {
		return fmt.Errorf("still running after 20s (it did not refuse): %v", err), logs.String()
	}
	return err, logs.String()
}

// record reads the table's record of its writers.
func (e *env) record(t *testing.T) tablemeta.Record {
	t.Helper()
	rec, err := tablemeta.NewStore(e.dc, e.table).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// The first worker records its --ttl-from; a worker or a redrive with
// another refuses to start, naming both settings and --ttl-from-change,
// and writes nothing; with --ttl-from-change the new setting is recorded
// after the first (when, by whom), and the old one is then refused.
func TestTTLFromDriftIsRefused(t *testing.T) {
	e := newEnv(t, fmt.Sprintf(ownTTLTenants, "default-expiration"))
	if out, err := e.cmd(t, "setup"); err != nil || !strings.Contains(out, "workers record the --ttl-from") {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--ttl-from", "json:ttl")
	adminURL(t, logs)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec := e.record(t)
	if len(rec.TTLFrom) != 1 || rec.TTLFrom[0].TTLFrom != "json:ttl" || rec.TTLFrom[0].By != "worker run" {
		t.Fatalf("after the first worker: %+v", rec.TTLFrom)
	}

	// A replay without the flag: refused before it writes the event.
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-1", TenantID: "acme", UserID: "u-1"}.bytes())
	replay := []string{"--group", testenv.Name("replay")}
	err, out := e.runBriefly(t, replay...)
	if err == nil || !strings.Contains(err.Error(), `--ttl-from "json:ttl"`) || !strings.Contains(err.Error(), "no --ttl-from") ||
		!strings.Contains(err.Error(), "--ttl-from-change") {
		t.Fatalf("a worker without --ttl-from: %v\n%s", err, out)
	}
	if n := len(e.rows(t)); n != 0 {
		t.Errorf("the refused worker wrote %d rows", n)
	}
	brokers := []string{"--brokers", strings.Join(e.brokers, ","), "--topic", e.topic}
	if out, err := e.cmd(t, "redrive", append(brokers, "--ttl-from", "header:x-ttl")...); err == nil || !strings.Contains(err.Error(), `--ttl-from "json:ttl"`) ||
		!strings.Contains(err.Error(), `--ttl-from "header:x-ttl"`) || !strings.Contains(err.Error(), "--ttl-from-change") {
		t.Errorf("redrive with another --ttl-from: %v\n%s", err, out)
	}

	// On purpose: recorded, after the first.
	stop, logs = e.startWorker(t, append(replay, "--ttl-from-change")...)
	adminURL(t, logs)
	e.waitRows(t, 1, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec = e.record(t)
	if len(rec.TTLFrom) != 2 || rec.TTLFrom[1].TTLFrom != "" || !rec.TTLFrom[1].Change || !rec.TTLFrom[1].Since.After(rec.TTLFrom[0].Since) {
		t.Fatalf("after --ttl-from-change: %+v", rec.TTLFrom)
	}
	if err, out := e.runBriefly(t, "--ttl-from", "json:ttl"); err == nil || !strings.Contains(err.Error(), "no --ttl-from (recorded") {
		t.Errorf("the old setting after the change: %v\n%s", err, out)
	}
}

// On a table set up before the record came, a worker refuses to start and
// says to run setup, which adds the family.
func TestWorkerRefusesWithoutTheRecordFamily(t *testing.T) {
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	if err := e.ac.DeleteColumnFamily(context.Background(), e.table, tablemeta.Family); err != nil {
		t.Fatal(err)
	}
	if err, out := e.runBriefly(t); err == nil || !strings.Contains(err.Error(), "worker setup") || !strings.Contains(err.Error(), e.table+":m, where the workers record") {
		t.Errorf("a worker on a table without the record's family: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup"); err != nil || !strings.Contains(out, "created family "+e.table+":m") {
		t.Errorf("setup over a table without the record's family: %v\n%s", err, out)
	}
}
