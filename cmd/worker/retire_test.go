package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// An erasure on a topic whose producers may stamp records any time ahead
// (Kafka 3.x's default) never expires: the topic may hold a record of the
// user for as long as its producer says. Once Kafka has deleted every
// record the erasure's mark covers (each partition's log start offset at
// or past the mark's end), it needs only the life of its other copies:
// the next worker forget, of anyone, gives it that life, so that the
// ledger does not grow with every erasure kept forever. A record of the
// user stamped ahead holds its partition's log start, and the erasure with
// it. Against the real broker (retention.ms 3 s) and emulator.
func TestForgetRetiresRecordsKafkaHasDeleted(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the broker's retention deleting segments, and the log start it reports")
	testenv.NeedsBroker(t, "its retention deleting segments")
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	testenv.AlterTopic(t, e.brokers, e.topic, testenv.AnyTimeAhead(map[string]string{"retention.ms": "3000", "segment.ms": "1000"}))
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	type receipt struct {
		Users []struct {
			Record struct {
				Expires time.Time
				Below   struct {
					Ends []int64 `json:"end_offsets"`
				} `json:"erased_below"`
			} `json:"ledger_record"`
		}
		Retired struct{ Records, Kept int }
	}
	forget := func(user string, extra ...string) receipt {
		t.Helper()
		out, err := e.cmd(t, "forget", append([]string{"--tenant", "acme", "--user", user, "--allow-empty", "--requested-by", "ticket-5",
			"--second-pass-after", "10ms", "--format", "json"}, extra...)...)
		var rc receipt
		if err != nil || json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &rc) != nil || len(rc.Users) != 1 {
			t.Fatalf("forget %s: %v\n%s", user, err, out)
		}
		return rc
	}
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-1", TenantID: "acme", UserID: "u-1"}.bytes())
	first := forget("u-1")
	if !first.Users[0].Record.Expires.IsZero() || len(first.Users[0].Record.Below.Ends) != partitions {
		t.Fatalf("u-1's record: %+v, want a mark and no expiry", first.Users[0].Record)
	}
	// u-3's erasure is recorded while backups are kept 30 days: the
	// forget that retires it, with no backups of its own, must not cut it.
	backedUp := forget("u-3", "--backup-retention", "30d")
	if !backedUp.Users[0].Record.Expires.IsZero() {
		t.Fatalf("u-3's record: %+v, want no expiry", backedUp.Users[0].Record)
	}
	backedUpAt := time.Now()
	// Kafka deletes what the mark covers: every partition's log start
	// reaches the mark's end.
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		starts := testenv.LogStarts(t, e.brokers, e.topic, partitions)
		for p, end := range first.Users[0].Record.Below.Ends {
			if starts[p] < end {
				return false, fmt.Sprintf("log starts %v, the mark's ends %v", starts, first.Users[0].Record.Below.Ends)
			}
		}
		return true, ""
	})
	testenv.ProduceMessages(t, e.brokers, e.topic, kafka.Message{Value: click{EventID: "e-2", TenantID: "acme", UserID: "u-2"}.bytes(), Time: time.Now().Add(time.Hour)})
	if rc := forget("u-2"); rc.Retired.Records != 2 || rc.Retired.Kept != 1 {
		t.Errorf("the last forget retired %d records and kept %d, want u-1's and u-3's retired and its own kept", rc.Retired.Records, rc.Retired.Kept)
	}
	recs, _, err := erasure.NewStore(e.dc, e.table+"-erasures").Load(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		// Its life: the longest of acme's hour from erased_up_to and the
		// dead-letter topic's keep (30 m + 2 m + 1 s) from when it was
		// recorded, --max-clock-skew before erased_up_to; and forget's
		// tolerated clock error to spare.
		hour := time.Hour + erasure.ClockTolerance
		if r.User == "u-1" && (r.Expires.IsZero() || r.Expires.Before(r.UpTo.Add(hour)) || r.Expires.After(r.UpTo.Add(hour+time.Second))) {
			t.Errorf("u-1's retired record expires at %s, want acme's hour and a minute from erased_up_to %s", r.Expires, r.UpTo)
		}
		backups := 30*24*time.Hour + erasure.ClockTolerance
		if r.User == "u-3" && (r.Expires.Before(backedUpAt.Add(backups-time.Minute)) || r.Expires.After(backedUpAt.Add(backups))) {
			t.Errorf("u-3's retired record expires at %s, want the 30 days of backups of its own forget and a minute, from %s", r.Expires, backedUpAt)
		}
		if r.User == "u-2" && !r.Expires.IsZero() {
			t.Errorf("u-2's record expires at %s, while Kafka holds u-2's event stamped ahead", r.Expires)
		}
	}
	if len(recs) != 3 {
		t.Errorf("%d records in force, want u-1's, u-2's and u-3's", len(recs))
	}
}

// An erasure --before a time erases by time alone, and its record lives as
// long as a whole erasure's: as long as the longest copy it covers (the
// input topic, the dead-letter topics, the backups), not the tenant's TTL
// from erased_up_to. A record that expired with the TTL let a TTL edit
// and a replay bring the user back: acme at 5s, u-1's event, forget
// --before a second ago, acme at 1h, and a new consumer group's replay of
// the topic once the TTL had passed wrote u-1's row again.
func TestForgetBeforeLivesAsLongAsItsCopies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\ntenants:\n  acme: 5s\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-1", TenantID: "acme", UserID: "u-1", OccurredAt: time.Now().Add(-3 * time.Second).UTC().Format(time.RFC3339Nano)}.bytes())
	out, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--allow-empty", "--requested-by", "ticket-6",
		"--before", "1s", "--second-pass-after", "10ms", "--format", "json")
	var rc struct {
		Users []struct {
			Record struct {
				UpTo    time.Time `json:"erased_up_to"`
				Expires time.Time
			} `json:"ledger_record"`
		}
		Unreachable []struct{ Store, Longest string } `json:"unreachable_stores"`
	}
	if err != nil || json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &rc) != nil || len(rc.Users) != 1 {
		t.Fatalf("forget --before: %v\n%s", err, out)
	}
	recorded := time.Now()
	for _, s := range rc.Unreachable {
		exp := rc.Users[0].Record.Expires
		// A record without an expiry lives until Kafka's log starts pass
		// its mark: as long as any copy (the in-process broker keeps its
		// input topic for ever).
		if life, err := duration.Parse(s.Longest); !exp.IsZero() && (s.Longest == "forever" || err == nil && exp.Before(recorded.Add(life).Add(-time.Minute))) {
			t.Errorf("the record of an erasure before %s expires at %s, before %s's copies (%s)", rc.Users[0].Record.UpTo, exp, s.Store, s.Longest)
		}
	}

	time.Sleep(6 * time.Second) // past erased_up_to + 5s: a record of the TTL's life is gone
	e.writeTenants(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	e.group = testenv.Name("replay")
	stop, _ := e.startWorker(t)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Errorf("after a TTL edit and a replay: %d rows of u-1, erased before the edit", len(rows))
	}
}
