package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/testenv"
)

// A tenant added to tenants.yaml after its events were dead-lettered
// (unlisted_tenants: dead-letter): worker redrive says what it would do,
// changes nothing without --apply, then lands the event with exactly the
// contract's cells; run again, the same cells and no second version; a
// malformed event stays where it is. With a checkpoint, a run started
// again reads nothing it has done. Letters without payload (their
// unlisted bound shorter than the topic's keep) are read back from the
// input topic.
func TestRedriveFixedEvent(t *testing.T) {
	for _, tt := range []struct {
		name, bound string
	}{{"with payload", "2d"}, {"without payload", "20m"}} {
		t.Run(tt.name, func(t *testing.T) { testRedrive(t, tt.bound) })
	}
}

func testRedrive(t *testing.T, unlistedBound string) {
	e := newEnv(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\nrecord_real_timestamp: true\ntenants:\n  acme: 1h\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, _ := e.startWorker(t, "--dlq-unlisted-retention", unlistedBound)
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond).UTC()
	newco := click{EventID: "n-1", TenantID: "newco", UserID: "u-1", OccurredAt: base.Format("2006-01-02T15:04:05.000Z"), Page: "/"}.bytes()
	testenv.Produce(t, e.brokers, e.topic, newco, []byte("not json"), click{EventID: "a-1", TenantID: "acme", UserID: "u-2"}.bytes())
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.rows(t)); n != 1 {
		t.Fatalf("%d rows before the redrive, want acme's", n)
	}
	for _, m := range testenv.ReadToEnd(t, e.brokers, e.topic+".dlq") {
		if omitted := headerOf(m, ingest.HeaderPayload) == "omitted"; omitted != (unlistedBound == "20m") {
			t.Fatalf("letter %q: payload omitted %t with an unlisted bound of %s", m.Value, omitted, unlistedBound)
		}
	}
	e.writeTenants(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\nrecord_real_timestamp: true\ntenants:\n  acme: 1h\n  newco: 3h\n")
	brokers := []string{"--brokers", strings.Join(e.brokers, ","), "--topic", e.topic}

	out, err := e.cmd(t, "redrive", brokers...)
	out = strings.Join(strings.Fields(out), " ")
	if err != nil || !strings.Contains(out, "unlisted_tenant written 1") || !strings.Contains(out, "not_json still_rejected 1") ||
		!strings.Contains(out, "dry run: 1 rows would be written") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if n := len(e.rows(t)); n != 1 {
		t.Fatalf("%d rows after a dry run, want 1", n)
	}
	cp := filepath.Join(t.TempDir(), "redrive.checkpoint")
	for run := 1; run <= 2; run++ {
		if out, err := e.cmd(t, "redrive", append(brokers, "--apply")...); err != nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "unlisted_tenant written 1") {
			t.Fatalf("apply, run %d: %v\n%s", run, err, out)
		}
		rows := e.rows(t)
		if len(rows) != 2 {
			t.Fatalf("run %d: %d rows, want acme's and newco's", run, len(rows))
		}
		for key, r := range rows {
			if !strings.HasPrefix(key, "newco#") {
				continue
			}
			cells := cellsOf(r)
			ev, wa := cells["event"], cells["written_at"]
			// newco 3h: trunc_ms(base) + (3h - 2d).
			want := base.UnixMilli()*1000 + (3*time.Hour - 48*time.Hour).Microseconds()
			if len(ev) != 1 || len(wa) != 1 || int64(ev[0].Timestamp) != want || string(ev[0].Value) != string(newco) || wa[0].Timestamp != ev[0].Timestamp {
				t.Errorf("run %d: newco's row %s: %d event and %d written_at cells, timestamp %d, want one each at %d", run, key, len(ev), len(wa), ev[0].Timestamp, want)
			}
		}
	}
	// Resumable: a checkpoint records how far it came.
	if out, err := e.cmd(t, "redrive", append(brokers, "--apply", "--checkpoint", cp)...); err != nil || !strings.Contains(out, "2 dead letters read") {
		t.Fatalf("apply with a checkpoint: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "redrive", append(brokers, "--apply", "--checkpoint", cp)...); err != nil || !strings.Contains(out, "0 dead letters read") {
		t.Fatalf("apply again with the checkpoint: %v\n%s", err, out)
	}
	// A checkpoint belongs to its selection: other filters, another file.
	if out, err := e.cmd(t, "redrive", append(brokers, "--apply", "--checkpoint", cp, "--reason", "not_json")...); err == nil || !strings.Contains(err.Error(), "written for other letters") {
		t.Fatalf("apply with the checkpoint of another selection: %v\n%s", err, out)
	}
}
