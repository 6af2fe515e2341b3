package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/redrive"
	"github.com/cellttl/cellttl/testkit/testenv"
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
	t.Parallel()
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
		if omitted := headerOf(m, deadletter.HeaderPayload) == "omitted"; omitted != (unlistedBound == "20m") {
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
		if out, err := e.cmd(t, "redrive", append(brokers, "--apply", "--trust-unsigned-letters")...); err != nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "unlisted_tenant written 1") {
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
	if out, err := e.cmd(t, "redrive", append(brokers, "--apply", "--trust-unsigned-letters", "--checkpoint", cp)...); err != nil || !strings.Contains(out, "2 dead letters read") {
		t.Fatalf("apply with a checkpoint: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "redrive", append(brokers, "--apply", "--trust-unsigned-letters", "--checkpoint", cp)...); err != nil || !strings.Contains(out, "0 dead letters read") {
		t.Fatalf("apply again with the checkpoint: %v\n%s", err, out)
	}
	// A checkpoint belongs to its selection: other filters, another file.
	if out, err := e.cmd(t, "redrive", append(brokers, "--apply", "--trust-unsigned-letters", "--checkpoint", cp, "--reason", "not_json")...); err == nil || !strings.Contains(err.Error(), "written for other letters") {
		t.Fatalf("apply with the checkpoint of another selection: %v\n%s", err, out)
	}
}

// redriveLetters is a dead-letter topic of two partitions holding the
// letters of newco (unlisted when they were processed), ten of them recent
// and two two hours old, and two malformed events; newco is then listed
// with a 1-hour TTL, so the old ones have expired. It returns the letters
// as the broker holds them, and the flags redrive needs.
func redriveLetters(t *testing.T) (*env, *testenv.BigtableProxy, []kafka.Message, []string) {
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	const before = "default_ttl: 2d\nunlisted_tenants: dead-letter\nrecord_real_timestamp: true\ntenants:\n  acme: 1h\n"
	e := newEnv(t, before)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	dlq := e.topic + ".letters"
	testenv.CreateTopicWith(t, e.brokers, dlq, 2, testenv.DeadLetterConfigs)
	flags := []string{"--brokers", strings.Join(e.brokers, ","), "--topic", e.topic, "--dlq-topic", dlq}
	stop, _ := e.startWorker(t, "--dlq-topic", dlq)
	var values [][]byte
	for i := range 12 {
		at, id := time.Now().Add(-10*time.Minute), fmt.Sprintf("fresh-%d", i)
		if i >= 10 {
			at, id = time.Now().Add(-2*time.Hour), fmt.Sprintf("old-%d", i)
		}
		values = append(values, click{EventID: id, TenantID: "newco", UserID: "u", OccurredAt: at.Format(time.RFC3339Nano)}.bytes())
	}
	values = append(values, []byte("not json"), []byte("not json either"))
	testenv.Produce(t, e.brokers, e.topic, values...)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	letters := testenv.ReadToEnd(t, e.brokers, dlq)
	fresh := map[int]int{}
	for _, m := range letters {
		if strings.Contains(string(m.Value), "fresh-") {
			fresh[m.Partition]++
		}
	}
	if len(letters) != len(values) || fresh[0] == 0 || fresh[1] == 0 {
		t.Fatalf("%d letters, recent ones by partition %v; want %d, in both partitions", len(letters), fresh, len(values))
	}
	e.writeTenants(t, strings.Replace(before, "acme: 1h\n", "acme: 1h\n  newco: 1h\n", 1))
	return e, proxy, letters, flags
}

// expectRedrive is the report of a redrive of letters: what each becomes
// under newco's 1-hour TTL.
func expectRedrive(letters []kafka.Message) redrive.Report {
	rep := redrive.Report{ByReason: map[string]map[string]int64{}, Outcomes: map[string]int64{}}
	for _, m := range letters {
		reason, outcome := "unlisted_tenant", redrive.Written
		switch {
		case strings.HasPrefix(string(m.Value), "not json"):
			reason, outcome = "not_json", redrive.StillRejected
		case strings.Contains(string(m.Value), "old-"):
			outcome = redrive.Expired
		}
		rep.Letters++
		if rep.ByReason[reason] == nil {
			rep.ByReason[reason] = map[string]int64{}
		}
		rep.ByReason[reason][outcome]++
		rep.Outcomes[outcome]++
	}
	return rep
}

// redriveJSON runs worker redrive with --format json and returns its report.
func redriveJSON(ctx context.Context, t *testing.T, e *env, args ...string) (redrive.Report, error) {
	t.Helper()
	var out, logs bytes.Buffer
	err := run(ctx, e.args("redrive", append(args, "--format", "json")...), &out, &logs)
	var rep redrive.Report
	if out.Len() > 0 {
		if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
			t.Fatalf("redrive %v: %v\n%s", args, jerr, out.String())
		}
	}
	return rep, err
}

// newcoRows are the event ids of newco's rows in the table.
func newcoRows(t *testing.T, e *env) []string {
	t.Helper()
	var ids []string
	for key, r := range e.rows(t) {
		ev := cellsOf(r)["event"]
		if !strings.HasPrefix(key, "newco#") || len(ev) != 1 {
			t.Fatalf("row %s: %d event cells, want one of newco's", key, len(ev))
		}
		var c click
		if err := json.Unmarshal(ev[0].Value, &c); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.EventID)
	}
	slices.Sort(ids)
	return ids
}

// freshIDs are the event ids of the letters that redrive writes.
func freshIDs(letters []kafka.Message) []string {
	var ids []string
	for _, m := range letters {
		var c click
		if json.Unmarshal(m.Value, &c) == nil && strings.HasPrefix(c.EventID, "fresh-") {
			ids = append(ids, c.EventID)
		}
	}
	slices.Sort(ids)
	return ids
}
