package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A user forgotten stays forgotten, through every way cellttl has of
// writing an event again. Against the real broker and emulator:
//
//   - U's events are dead-lettered (their tenant not listed yet), then
//     written (listed);
//   - with the worker stopped, more of U's events wait in the backlog;
//     worker forget records the erasure, deletes, waits, deletes again;
//   - the worker consumes the backlog; a second consumer group replays the
//     whole topic into the same table; worker redrive re-drives the dead
//     letters;
//
// after which no row of U at or before erased_up_to exists, U's event
// stamped after it is written, the other user's rows are all there, the
// receipt lists both passes and the stores forget cannot reach, and
// worker audit is clean until a row of U is planted, then exits 1.
func TestForgottenUserStaysForgotten(t *testing.T) {
	t.Parallel()
	const (
		unlisted = "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  globex: 1h\n"
		listed   = "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  globex: 1h\n  acme: 3h\n"
	)
	e := newEnv(t, unlisted)
	if out, err := e.cmd(t, "setup"); err != nil || !strings.Contains(out, "created erasure ledger") {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	// A short --max-clock-skew, for the workers and forget alike: forget
	// erases up to now + the skew (an event produced before it may carry
	// a time that far ahead), and the user's return is produced past it.
	fast := []string{"--erasure-refresh", "200ms", "--tenants-reload-interval", "100ms", "--max-clock-skew", "2s"}
	seq := 0
	events := func(user string, n int, at time.Time) [][]byte {
		var out [][]byte
		for range n {
			seq++
			out = append(out, click{EventID: fmt.Sprintf("e-%d", seq), TenantID: "acme", UserID: user,
				OccurredAt: at.Add(time.Duration(seq) * time.Millisecond).Format(time.RFC3339Nano)}.bytes())
		}
		return out
	}
	past := time.Now().Add(-time.Hour).UTC()
	stayed := 0 // events of u-stay produced, each its own row

	// Dead letters of both users, then rows of both.
	stop, _ := e.startWorker(t, fast...)
	testenv.Produce(t, e.brokers, e.topic, append(events("u-gone", 3, past), events("u-stay", 2, past)...)...)
	stayed += 2
	e.waitCommitted(t, 30*time.Second)
	e.writeTenants(t, listed)
	time.Sleep(500 * time.Millisecond) // the reload
	testenv.Produce(t, e.brokers, e.topic, append(events("u-gone", 3, past), events("u-stay", 2, past)...)...)
	stayed += 2
	e.waitRows(t, 5, 30*time.Second) // 3 of u-gone, 2 of u-stay
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// The backlog, produced while no worker runs.
	testenv.Produce(t, e.brokers, e.topic, append(events("u-gone", 2, time.Now().UTC().Add(-time.Minute)), events("u-stay", 1, past)...)...)
	stayed++

	out, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-gone", "--requested-by", "ticket-42", "--second-pass-after", "1s", "--max-clock-skew", "2s", "--format", "json")
	if err != nil {
		t.Fatalf("forget: %v\n%s", err, out)
	}
	var rc struct {
		Tenant     string
		ErasedUpTo time.Time `json:"erased_up_to"`
		Users      []struct {
			User        string
			RowsPerPass []int64 `json:"rows_per_pass"`
			Record      *struct {
				UpTo        time.Time `json:"erased_up_to"`
				RequestedBy string    `json:"requested_by"`
				Expires     time.Time
			} `json:"ledger_record"`
		}
		Unreachable []struct{ Store, Longest string } `json:"unreachable_stores"`
	}
	if err := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &rc); err != nil {
		t.Fatalf("receipt: %v\n%s", err, out)
	}
	if len(rc.Users) != 1 || rc.Users[0].User != "u-gone" || fmt.Sprint(rc.Users[0].RowsPerPass) != "[3 0]" || rc.Users[0].Record == nil ||
		!rc.Users[0].Record.UpTo.Equal(rc.ErasedUpTo) || rc.Users[0].Record.RequestedBy != "ticket-42" {
		t.Fatalf("receipt: %+v\n%s", rc, out)
	}
	stores := fmt.Sprint(rc.Unreachable)
	if !strings.Contains(stores, "input topic "+e.topic) || !strings.Contains(stores, "dead-letter topic "+e.topic+".dlq") {
		t.Errorf("unreachable stores %s: want the input and dead-letter topics", stores)
	}
	// The record lives as long as the longest copy: the input topic keeps
	// the broker's default (7 days and more), the longest of the stores.
	if exp := rc.Users[0].Record.Expires; !exp.IsZero() && exp.Before(time.Now().Add(7*24*time.Hour)) {
		t.Errorf("the ledger record expires %s, before the input topic lets the events go", exp)
	}
	if strings.Contains(logLines(out, "msg=forget"), "u-gone") || !strings.Contains(logLines(out, "msg=forget"), "requested_by=ticket-42") {
		t.Errorf("the audit line names the user or not the requester:\n%s", logLines(out, "msg=forget"))
	}
	erasedUpTo := rc.ErasedUpTo
	// The user comes back: an event of after erased_up_to, produced after
	// it (its time is the record's).
	for time.Now().Before(erasedUpTo.Add(100 * time.Millisecond)) {
		time.Sleep(50 * time.Millisecond)
	}
	seq++
	after := [][]byte{click{EventID: fmt.Sprintf("e-%d", seq), TenantID: "acme", UserID: "u-gone"}.bytes()}

	// The backlog, then a replay by another group, then the redrive.
	stop, logs := e.startWorker(t, fast...)
	testenv.Produce(t, e.brokers, e.topic, after...)
	e.waitCommitted(t, 30*time.Second)
	base := adminURL(t, logs)
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		_, body := testenv.MustGet(t, base+"/metrics")
		v, _ := metricValue(body, "cellttl_events_erased_total", `cellttl_tenant="acme"`)
		return v == 2, fmt.Sprintf("cellttl_events_erased_total{acme} = %v, want 2 (the backlog)", v)
	})
	_, status := testenv.MustGet(t, base+"/status")
	var st struct {
		Erasures struct {
			State       string
			ErasedUsers int `json:"erased_users"`
		}
		Totals struct{ Erased int64 }
	}
	if err := json.Unmarshal([]byte(status), &st); err != nil || st.Erasures.State != "loaded" || st.Erasures.ErasedUsers != 1 || st.Totals.Erased != 2 {
		t.Errorf("/status: %v %+v", err, st)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	replay, _ := e.startWorker(t, append(fast, "--group", testenv.Name("replay"))...)
	e.waitRows(t, stayed+1, 30*time.Second) // u-stay's all, and u-gone's later one
	time.Sleep(time.Second)                 // the replay's last batches
	if err := replay(); err != nil {
		t.Fatal(err)
	}
	out, err = e.cmd(t, "redrive", "--brokers", strings.Join(e.brokers, ","), "--topic", e.topic, "--apply", "--trust-unsigned-letters")
	if flat := strings.Join(strings.Fields(out), " "); err != nil || !strings.Contains(flat, "unlisted_tenant erased 3") || !strings.Contains(flat, "unlisted_tenant written 2") {
		t.Fatalf("redrive: %v\n%s", err, out)
	}

	// What is left.
	var gone, back, stay int
	for key := range e.rows(t) {
		p, err := rowkey.Parse(key)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case p.User == "u-stay":
			stay++
		case p.User == "u-gone" && p.Millis <= erasedUpTo.UnixMilli():
			gone++
			t.Errorf("a row of the erased user at %s, at or before erased_up_to %s", time.UnixMilli(p.Millis).UTC(), erasedUpTo)
		case p.User == "u-gone":
			back++
		}
	}
	if gone != 0 || back != 1 || stay != stayed {
		t.Errorf("rows: %d of u-gone erased, %d after erased_up_to, %d of u-stay; want 0, 1, %d", gone, back, stay, stayed)
	}
	if out, err := e.cmd(t, "audit", "--tenant", "acme"); err != nil {
		t.Errorf("audit after the erasure: %v\n%s", err, out)
	}
	// A row the ledger covers, as a restored backup would bring back.
	m := bigtable.NewMutation()
	m.Set("c", "event", bigtable.Now(), []byte("{}"))
	if err := e.dc.Open(e.table).Apply(t.Context(), rowkey.Key("acme", "u-gone", "restored", past.UnixMilli()), m); err != nil {
		t.Fatal(err)
	}
	out, err = e.cmd(t, "audit", "--tenant", "acme", "--format", "json")
	if codeOf(err) != 1 || !strings.Contains(out, `"erased_rows":1`) {
		t.Errorf("audit with a row of an erased user: exit %d\n%s", codeOf(err), out)
	}
}
