package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/sink/sinktest"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A tenant that leaves is gone from every copy cellttl writes, and stays
// gone. Against the real broker and emulator: acme has rows, dead letters
// and an erased user; worker offboard records its offboarding, drops its
// rows in one range and prints a receipt whose times are the retention
// statement's. The tenants file then drops acme (its events would take
// the unlisted policy's default_ttl), acme's events keep coming, and a new
// consumer group replays the whole topic: no row of acme is written, no
// letter added, globex is written in full, and a second offboarding says
// when the tenant left.
func TestOffboardedTenantStaysGone(t *testing.T) {
	t.Parallel()
	const (
		both    = "default_ttl: 2d\ntenants:\n  globex: 1h\n  acme: 3h\n"
		dropped = "default_ttl: 2d\ntenants:\n  globex: 1h\n"
	)
	e := newEnv(t, both)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	fast := []string{"--erasure-refresh", "200ms", "--tenants-reload-interval", "100ms"}
	seq := 0
	events := func(tenant string, n int) [][]byte {
		var out [][]byte
		for range n {
			seq++
			out = append(out, click{EventID: fmt.Sprintf("e-%d", seq), TenantID: tenant, UserID: fmt.Sprintf("u-%d", seq%3),
				OccurredAt: time.Now().UTC().Format(time.RFC3339Nano)}.bytes())
		}
		return out
	}
	bad := []byte(`{"event_id":"bad-1","tenant_id":"acme","user_id":"u-1","occurred_at":"yesterday"}`)
	stop, _ := e.startWorker(t, fast...)
	testenv.Produce(t, e.brokers, e.topic, append(append(events("acme", 6), bad), events("globex", 3)...)...)
	e.waitRows(t, 9, 30*time.Second)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_, letters := testenv.Offsets(t, e.brokers, e.group, e.topic+".dlq", 1)
	if letters[0] != 1 {
		t.Fatalf("%d dead letters before offboarding, want 1 (acme's bad event)", letters[0])
	}
	if out, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--requested-by", "ticket-1", "--second-pass-after", "10ms"); err != nil {
		t.Fatalf("forget: %v\n%s", err, out)
	}

	if out, err := e.cmd(t, "offboard", "--tenant", "acme", "--requested-by", "contract-end", "--dry-run"); err != nil || !strings.Contains(out, "would offboard tenant acme (dry run): 4 rows") {
		t.Fatalf("offboard --dry-run: %v\n%s", err, out)
	}
	out, err := e.cmd(t, "offboard", "--tenant", "acme", "--requested-by", "contract-end", "--second-pass-after", "1s", "--format", "json")
	if err != nil {
		t.Fatalf("offboard: %v\n%s", err, out)
	}
	var rc struct {
		Dropped string `json:"dropped_prefix"`
		Record  *struct {
			RecordedAt time.Time `json:"recorded_at"`
			Offboard   bool
		} `json:"ledger_record"`
		Already     bool                              `json:"already_offboarded"`
		SecondPass  int64                             `json:"second_pass_rows"`
		Unreachable []struct{ Store, Longest string } `json:"unreachable_stores"`
	}
	if err := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &rc); err != nil {
		t.Fatalf("receipt: %v\n%s", err, out)
	}
	// No worker ran: the drop took every row, and the second pass found
	// none.
	if rc.Dropped != "acme#" || rc.Record == nil || !rc.Record.Offboard || rc.Already || rc.SecondPass != 0 {
		t.Fatalf("receipt: %+v\n%s", rc, out)
	}
	if !strings.Contains(logLines(out, "msg=offboard"), "requested_by=contract-end") {
		t.Errorf("no audit line names the requester:\n%s", out)
	}
	statement, _ := e.cmd(t, "retention", "--tenant", "globex", "--format", "json", "--brokers", strings.Join(e.brokers, ","), "--topic", e.topic)
	for _, s := range rc.Unreachable {
		if !strings.Contains(statement, fmt.Sprintf(`"longest":%q`, s.Longest)) {
			t.Errorf("the receipt's %s lasts %s, which the retention statement does not say:\n%s", s.Store, s.Longest, statement)
		}
	}
	if len(rc.Unreachable) < 2 {
		t.Errorf("the receipt lists %v, want the input and dead-letter topics", rc.Unreachable)
	}
	countRows := func() (acme, globex int) {
		for key := range e.rows(t) {
			p, err := rowkey.Parse(key)
			if err != nil {
				t.Fatal(err)
			}
			switch p.Tenant {
			case "acme":
				acme++
			case "globex":
				globex++
			}
		}
		return acme, globex
	}
	if a, g := countRows(); a != 0 || g != 3 {
		t.Fatalf("after offboarding: %d rows of acme, %d of globex; want 0 and 3", a, g)
	}

	// acme leaves the file; its events keep coming, and the whole topic is
	// replayed by a new group.
	e.writeTenants(t, dropped)
	testenv.Produce(t, e.brokers, e.topic, append(append(events("acme", 4), bad), events("globex", 2)...)...)
	replay, logs := e.startWorker(t, append(fast, "--group", testenv.Name("replay"))...)
	e.waitRows(t, 5, 30*time.Second)
	base := adminURL(t, logs)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		_, body := testenv.MustGet(t, base+"/metrics")
		v, _ := metricValue(body, "cellttl_events_erased_total", "")
		return v >= 12, fmt.Sprintf("cellttl_events_erased_total = %v, want 12 (acme's every event)", v)
	})
	// Its series and its /status entry are gone with it.
	_, metrics := testenv.MustGet(t, base+"/metrics")
	_, status := testenv.MustGet(t, base+"/status?tenants=true")
	if strings.Contains(metrics, `cellttl_tenant="acme"`) || strings.Contains(status, `"acme"`) {
		t.Errorf("acme still has series or a /status entry:\n%s\n%s", logLines(metrics, "acme"), status)
	}
	if err := replay(); err != nil {
		t.Fatal(err)
	}
	// A redrive of acme's letter from before writes nothing either.
	out, err = e.cmd(t, "redrive", "--brokers", strings.Join(e.brokers, ","), "--topic", e.topic, "--apply", "--trust-unsigned-letters")
	if flat := strings.Join(strings.Fields(out), " "); err != nil || !strings.Contains(flat, "erased 1") {
		t.Errorf("redrive of the offboarded tenant's letter: %v\n%s", err, out)
	}
	if a, g := countRows(); a != 0 || g != 5 {
		t.Errorf("after the replay: %d rows of acme, %d of globex; want 0 and 5", a, g)
	}
	if _, end := testenv.Offsets(t, e.brokers, e.group, e.topic+".dlq", 1); end[0] != 1 {
		t.Errorf("%d dead letters after the replay, want the 1 of before", end[0])
	}
	out, err = e.cmd(t, "offboard", "--tenant", "acme", "--requested-by", "again", "--second-pass-after", "10ms")
	if err != nil || !strings.Contains(out, "left at: "+rc.Record.RecordedAt.Format(time.RFC3339Nano)+" (recorded by an earlier run, requested by contract-end)") {
		t.Errorf("offboard again: %v\n%s", err, out)
	}
	// The audit shows none of acme's rows and its record in force; a row
	// brought back (a restored backup) is a finding.
	out, err = e.cmd(t, "audit", "--tenant", "acme", "--format", "json")
	if err != nil || !strings.Contains(out, `"live_rows":0`) || !strings.Contains(out, `"offboarded_at":"`+rc.Record.RecordedAt.Format(time.RFC3339Nano)) {
		t.Errorf("audit of the offboarded tenant: %v\n%s", err, out)
	}
	policy := &expiry.Policy{Strategy: expiry.DefaultExpiration, DefaultTTL: 48 * time.Hour, Tenants: map[string]time.Duration{"acme": 3 * time.Hour}}
	restored := sinktest.Event(policy, "acme", rowkey.Key("acme", "u-1", "restored", time.Now().UnixMilli()), time.Now(), []byte("{}"))
	sinktest.Write(t, e.dc, sink.Target{Table: e.table, Family: "c"}, []sink.Row{restored})
	if out, err := e.cmd(t, "audit", "--tenant", "acme", "--format", "json"); codeOf(err) != 1 || !strings.Contains(out, `"erased_rows":1`) {
		t.Errorf("audit with a row of the offboarded tenant: exit %d\n%s", codeOf(err), out)
	}
}
