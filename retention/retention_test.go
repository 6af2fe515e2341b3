package retention

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/reader"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/sink/sinktest"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
)

var ctx = context.Background()

func policy(t testing.TB, yaml string) *expiry.Policy {
	t.Helper()
	cfg, err := tenants.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Policy
}

// event is a seeded event: its key, and its base time.
type event struct {
	key  string
	base time.Time
}

// seed writes n events of tenant, spread over ages (their base times are
// now minus each age), as the worker would under p.
func seed(t testing.TB, dc *bigtable.Client, tgt sink.Target, p *expiry.Policy, tenant string, ages []time.Duration) []event {
	t.Helper()
	now := time.Now()
	var rows []sink.Row
	var evs []event
	for i, age := range ages {
		base := now.Add(-age).Truncate(time.Millisecond)
		key := rowkey.Key(tenant, fmt.Sprintf("u%d", i%7), fmt.Sprintf("e%d", i), base.UnixMilli())
		rows = append(rows, sinktest.Event(p, tenant, key, base, fmt.Appendf(nil, `{"i":%d}`, i)))
		evs = append(evs, event{key: key, base: base})
	}
	sinktest.Write(t, dc, tgt, rows)
	return evs
}

// cells reads every version of every cell of the table's rows, by key.
func cells(t *testing.T, tbl *bigtable.Table, family string) map[string][]bigtable.ReadItem {
	t.Helper()
	out := map[string][]bigtable.ReadItem{}
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		out[r.Key()] = r[family]
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkFollows asserts that every seeded event still live under p has one
// version of each of its two cells, at p's timestamp, and that every event
// expired under p has no row.
func checkFollows(t *testing.T, tbl *bigtable.Table, family string, p *expiry.Policy, tenant string, evs []event, now time.Time) {
	t.Helper()
	got := cells(t, tbl, family)
	for _, e := range evs {
		cell := p.Cell(tenant, e.base)
		items := got[e.key]
		if expiry.Expired(cell.Expiry, now) {
			if len(items) != 0 {
				t.Errorf("%s: expired at %s under the new file, still has %d cells", e.key, cell.Expiry, len(items))
			}
			continue
		}
		if len(items) != 2 {
			t.Errorf("%s: %d cells, want event and written_at, one version each", e.key, len(items))
			continue
		}
		for _, it := range items {
			if int64(it.Timestamp) != cell.Timestamp {
				t.Errorf("%s %s: timestamp %d, want %d", e.key, it.Column, it.Timestamp, cell.Timestamp)
			}
		}
	}
}

// liveKeys is what a correct reader returns for the tenant now.
func liveKeys(t *testing.T, tbl *bigtable.Table, family string, p *expiry.Policy, tenant string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	err := reader.New(tbl, family, p).Read(ctx, reader.Query{Tenant: tenant}, func(ev reader.Event) bool {
		out[ev.Key] = ev.Expiry
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRetimeShorterAndLonger(t *testing.T) {
	dc, ac := testenv.Clients(t)
	for _, tc := range []struct {
		name     string
		old, new string
	}{
		{"shorter", "default_ttl: 2d\ntenants:\n  acme: 3h\n", "default_ttl: 2d\ntenants:\n  acme: 1h\n"},
		{"longer", "default_ttl: 2d\ntenants:\n  acme: 1h\n", "default_ttl: 2d\ntenants:\n  acme: 3h\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, now := policy(t, tc.old), policy(t, tc.new)
			tgt := sink.Target(testenv.Table(t, ac, dc, old.GCMaxAge()))
			tbl := dc.Open(tgt.Table)
			// 10m and 50m old: live under both. 2h old: expired under
			// 1h, live under 3h; lengthening must not bring it back once
			// it has expired. 5h old: expired under both.
			evs := seed(t, dc, tgt, old, "acme", []time.Duration{10 * time.Minute, 50 * time.Minute, 2 * time.Hour, 5 * time.Hour})
			other := seed(t, dc, tgt, old, "globex", []time.Duration{time.Minute})

			var plan Report
			plan, err := Retime(ctx, tbl, tgt.Family, now, RetimeOptions{Tenants: []string{"acme"}, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			// The rows expired under the old file (the 5h-old one, and
			// the 2h-old one under 1h) lie past the table's max-age: the
			// emulator's GC may collect them at any moment.
			const gcMayTake = 2
			if plan.Scanned < 4-gcMayTake || plan.Scanned > 4 || plan.Changed() != plan.Scanned {
				t.Errorf("dry run: %+v, want 4 rows to change (fewer if GC took expired ones)", plan)
			}
			if got := cells(t, tbl, tgt.Family); int64(got[evs[0].key][0].Timestamp) != old.Cell("acme", evs[0].base).Timestamp {
				t.Fatal("the dry run changed a cell")
			}

			rep, err := Retime(ctx, tbl, tgt.Family, now, RetimeOptions{Tenants: []string{"acme"}, Passes: 2})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Rewritten != 2 || rep.Deleted < 2-gcMayTake || rep.Deleted > 2 {
				t.Errorf("retime: %+v, want 2 rewritten and 2 deleted (fewer if GC took expired rows)", rep)
			}
			checkFollows(t, tbl, tgt.Family, now, "acme", evs[:2], time.Now())
			if got := cells(t, tbl, tgt.Family); len(got[evs[2].key])+len(got[evs[3].key]) != 0 {
				t.Errorf("an expired event is still there: %v %v", got[evs[2].key], got[evs[3].key])
			}
			checkFollows(t, tbl, tgt.Family, old, "globex", other, time.Now())
			live := liveKeys(t, tbl, tgt.Family, now, "acme")
			for i, e := range evs {
				want := now.Cell("acme", e.base).Expiry
				if exp, ok := live[e.key]; ok != (i < 2) || (ok && !exp.Equal(want)) {
					t.Errorf("%s: read %v (live %t), want expiry %s", e.key, exp, ok, want)
				}
			}
			again, err := Retime(ctx, tbl, tgt.Family, now, RetimeOptions{Tenants: []string{"acme"}})
			if err != nil || again.Changed() != 0 || again.Unchanged != 2 {
				t.Errorf("second run: %+v, %v: retime is not idempotent", again, err)
			}
		})
	}
}

// An interrupted retime resumed from its checkpoint ends where an
// uninterrupted one does.
func TestRetimeResumes(t *testing.T) {
	dc, ac := testenv.Clients(t)
	old, now := policy(t, "default_ttl: 2d\ntenants:\n  acme: 3h\n"), policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	tgt := sink.Target(testenv.Table(t, ac, dc, old.GCMaxAge()))
	tbl := dc.Open(tgt.Table)
	ages := make([]time.Duration, 1500)
	for i := range ages {
		ages[i] = time.Duration(i%100) * time.Minute
	}
	evs := seed(t, dc, tgt, old, "acme", ages)
	cpFile := filepath.Join(t.TempDir(), "checkpoint")
	cctx, cancel := context.WithCancel(ctx)
	o := RetimeOptions{Tenants: []string{"acme"}, Checkpoint: cpFile, RowsPerSecond: 2000, ProgressEvery: time.Millisecond,
		Progress: func(p Progress) {
			if p.Report.Scanned > 700 {
				cancel()
			}
		}}
	first, err := Retime(cctx, tbl, tgt.Family, now, o)
	if err == nil {
		t.Fatalf("the run was not interrupted: %+v", first)
	}
	var cp checkpoint
	cp.path = cpFile
	if ok, err := cp.load(Job{Tenants: []string{"acme"}, Shard: "0/1"}); !ok || err != nil || cp.Done["acme"] == "" || cp.Done["acme"] == doneMark {
		t.Fatalf("checkpoint after the interruption: %+v, %v", cp.Done, err)
	}
	o.Progress, o.Resume = nil, true
	rest, err := Retime(ctx, tbl, tgt.Family, now, o)
	if err != nil {
		t.Fatal(err)
	}
	// Rows after the checkpoint were not applied (the interrupted batch is
	// dropped), rows before it were: a resume that starts after it finds
	// nothing already done.
	if rest.Unchanged != 0 || rest.Scanned == 0 {
		t.Errorf("resume: %+v: it did not start after the checkpoint", rest)
	}
	checkFollows(t, tbl, tgt.Family, now, "acme", evs, time.Now())
}

// A worker still on the old file writes during the first pass; the second
// pass re-times what it wrote.
func TestRetimeSecondPassCatchesLateWrites(t *testing.T) {
	dc, ac := testenv.Clients(t)
	old, now := policy(t, "default_ttl: 2d\ntenants:\n  acme: 3h\n"), policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	tgt := sink.Target(testenv.Table(t, ac, dc, old.GCMaxAge()))
	tbl := dc.Open(tgt.Table)
	evs := seed(t, dc, tgt, old, "acme", []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute})
	var late []event
	first := true
	o := RetimeOptions{Tenants: []string{"acme"}, Passes: 3, PassDelay: 10 * time.Millisecond, ProgressEvery: time.Nanosecond,
		Progress: func(p Progress) {
			if p.Completed && first {
				first = false
				// After the first pass: the late writer's events, old TTL.
				late = seed(t, dc, tgt, old, "acme", []time.Duration{30 * time.Second, 40 * time.Second})
			}
		}}
	rep, err := Retime(ctx, tbl, tgt.Family, now, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(late) != 2 || rep.Rewritten != 5 {
		t.Errorf("%+v: want the 3 seeded and the 2 late rows re-timed", rep)
	}
	checkFollows(t, tbl, tgt.Family, now, "acme", append(evs, late...), time.Now())
}

// Regression: interrupted while it waited between its passes,
// then resumed (the shipped Kubernetes Job always passes --resume), retime
// found the first pass done, changed nothing and took that for the end: the
// second pass, for rows a worker still on the old file wrote meanwhile,
// never ran. The checkpoint now records the pass.
func TestRetimeResumeKeepsTheSecondPass(t *testing.T) {
	dc, ac := testenv.Clients(t)
	old, now := policy(t, "default_ttl: 2d\ntenants:\n  acme: 3h\n"), policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	tgt := sink.Target(testenv.Table(t, ac, dc, old.GCMaxAge()))
	tbl := dc.Open(tgt.Table)
	evs := seed(t, dc, tgt, old, "acme", []time.Duration{time.Minute, 2 * time.Minute})
	cpFile := filepath.Join(t.TempDir(), "checkpoint")
	job := Job{Table: tgt.Table, Family: tgt.Family, Config: "v2"}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o := RetimeOptions{Tenants: []string{"acme"}, Checkpoint: cpFile, Resume: true, Job: job, Passes: 2, PassDelay: time.Hour, ProgressEvery: time.Nanosecond,
		Progress: func(p Progress) {
			if p.Completed {
				cancel() // in the delay before the second pass
			}
		}}
	if rep, err := Retime(cctx, tbl, tgt.Family, now, o); err == nil || rep.Rewritten != 2 {
		t.Fatalf("first run: %+v, %v: want the 2 rows re-timed, then the interruption", rep, err)
	}
	// A worker still on the old file wrote meanwhile.
	late := seed(t, dc, tgt, old, "acme", []time.Duration{30 * time.Second})
	o.Progress, o.PassDelay = nil, 10*time.Millisecond
	rep, err := Retime(ctx, tbl, tgt.Family, now, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rewritten != 1 {
		t.Errorf("resumed: %+v, want the second pass to re-time the late row", rep)
	}
	checkFollows(t, tbl, tgt.Family, now, "acme", append(evs, late...), time.Now())
	// The second pass changed a row: a third would run, but --passes is 2.
	if again, err := Retime(ctx, tbl, tgt.Family, now, o); err != nil || again.Scanned != 0 {
		t.Errorf("resumed after the last pass: %+v, %v; want nothing to do", again, err)
	}
}

// A checkpoint written for another table, tenants, shard or tenants file
// is refused by --resume, naming both: resuming from it would skip rows.
func TestRetimeRefusesAnotherJobsCheckpoint(t *testing.T) {
	dc, ac := testenv.Clients(t)
	p := policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	tgt := sink.Target(testenv.Table(t, ac, dc, p.GCMaxAge()))
	tbl := dc.Open(tgt.Table)
	seed(t, dc, tgt, p, "acme", []time.Duration{time.Minute})
	cpFile := filepath.Join(t.TempDir(), "checkpoint")
	job := Job{Table: tgt.Table, Family: tgt.Family, Config: "v1"}
	if _, err := Retime(ctx, tbl, tgt.Family, p, RetimeOptions{Tenants: []string{"acme"}, Checkpoint: cpFile, Job: job}); err != nil {
		t.Fatal(err)
	}
	other := func(f func(*RetimeOptions)) RetimeOptions {
		o := RetimeOptions{Tenants: []string{"acme"}, Checkpoint: cpFile, Resume: true, Job: job}
		f(&o)
		return o
	}
	for name, o := range map[string]RetimeOptions{
		"table":        other(func(o *RetimeOptions) { o.Job.Table = "other" }),
		"tenants":      other(func(o *RetimeOptions) { o.Tenants = []string{"globex"} }),
		"shard":        other(func(o *RetimeOptions) { o.Shard = Shard{Index: 1, Count: 2} }),
		"tenants file": other(func(o *RetimeOptions) { o.Job.Config = "v2" }),
	} {
		_, err := Retime(ctx, tbl, tgt.Family, p, o)
		if err == nil || !strings.Contains(err.Error(), "was written for table "+tgt.Table) || !strings.Contains(err.Error(), "give this run a --checkpoint of its own") {
			t.Errorf("%s: %v, want a refusal naming both jobs", name, err)
		}
	}
	if _, err := Retime(ctx, tbl, tgt.Family, p, other(func(*RetimeOptions) {})); err != nil {
		t.Errorf("the same job: %v", err)
	}
}

func TestDeleteUserRows(t *testing.T) {
	dc, ac := testenv.Clients(t)
	p := policy(t, "default_ttl: 2d\n")
	tgt := sink.Target(testenv.Table(t, ac, dc, p.GCMaxAge()))
	tbl := dc.Open(tgt.Table)
	// Users u0..u6 cycle: u0 has events 0, 7, 14 at ages 0, 7h, 14h.
	ages := make([]time.Duration, 21)
	for i := range ages {
		ages[i] = time.Duration(i) * time.Hour
	}
	evs := seed(t, dc, tgt, p, "acme", ages)
	seed(t, dc, tgt, p, "globex", ages[:1]) // another tenant's u0
	rep, err := DeleteUserRows(ctx, tbl, UserRows{Tenant: "acme", User: "u0", Before: time.Now().Add(-5 * time.Hour)})
	if err != nil || rep.Rows != 2 {
		t.Fatalf("forget before 5h ago: %+v, %v; want 2 rows", rep, err)
	}
	got := cells(t, tbl, tgt.Family)
	if len(got[evs[0].key]) == 0 || len(got[evs[7].key]) != 0 || len(got[evs[14].key]) != 0 {
		t.Error("--before erased the wrong rows")
	}
	if rep, err = DeleteUserRows(ctx, tbl, UserRows{Tenant: "acme", User: "u0", DryRun: true}); err != nil || rep.Rows != 1 {
		t.Fatalf("dry run: %+v, %v", rep, err)
	}
	if rep, err = DeleteUserRows(ctx, tbl, UserRows{Tenant: "acme", User: "u0"}); err != nil || rep.Rows != 1 {
		t.Fatalf("forget: %+v, %v", rep, err)
	}
	got = cells(t, tbl, tgt.Family)
	if len(got) != 21-3+1 {
		t.Errorf("%d rows left, want 19: the other users and the other tenant untouched", len(got))
	}
	if _, err := DeleteUserRows(ctx, tbl, UserRows{Tenant: "acme", User: "u#0"}); err == nil {
		t.Error("a user id with the separator was accepted")
	}
}

func TestAudit(t *testing.T) {
	dc, ac := testenv.Clients(t)
	old, cur := policy(t, "default_ttl: 2d\ntenants:\n  acme: 3h\n"), policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	// The table keeps cells a month, not the policy's max-age: the
	// emulator collects a cell past its family's max-age within 1.5 s,
	// and the expired row the audit must count is past it.
	tgt := sink.Target(testenv.Table(t, ac, dc, 30*24*time.Hour))
	tbl := dc.Open(tgt.Table)
	seed(t, dc, tgt, cur, "acme", []time.Duration{time.Minute, 2 * time.Hour})    // correct: one live, one expired
	seed(t, dc, tgt, old, "acme", []time.Duration{10 * time.Minute})              // under the old TTL: breaks the rule
	seed(t, dc, tgt, cur, "globex", []time.Duration{time.Minute, 30 * time.Hour}) // correct, leaves within a day
	m := bigtable.NewMutation()
	m.Set(tgt.Family, "x", bigtable.Now(), []byte("foreign"))
	if err := tbl.Apply(ctx, "not-a-cellttl-key", m); err != nil {
		t.Fatal(err)
	}
	rep, err := Audit(ctx, tbl, tgt.Family, cur, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || rep.Foreign != 1 || len(rep.Tenants) != 2 {
		t.Fatalf("audit: %+v", rep)
	}
	acme, globex := rep.Tenants[0], rep.Tenants[1]
	if acme.LiveRows != 2 || acme.ExpiredRows != 1 || acme.RuleBreaking != 1 || acme.LeavesWithin["hour"] != 1 || acme.LeavesWithin["day"] != 1 {
		t.Errorf("acme: %+v", acme)
	}
	if globex.LiveRows != 2 || globex.RuleBreaking != 0 || globex.LeavesWithin["day"] != 1 || globex.LeavesWithin["week"] != 1 {
		t.Errorf("globex: %+v", globex)
	}
	if _, err := Retime(ctx, tbl, tgt.Family, cur, RetimeOptions{Tenants: []string{"acme"}}); err != nil {
		t.Fatal(err)
	}
	rep, err = Audit(ctx, tbl, tgt.Family, cur, AuditOptions{Tenants: []string{"acme", "globex"}})
	if err != nil || !(rep.Foreign == 0 && rep.Clean()) {
		t.Errorf("after retime, audit of the tenants: %+v, %v", rep, err)
	}
}

// N shards together touch every row exactly once, for retime and audit.
func TestShardsTouchEveryRowOnce(t *testing.T) {
	dc, ac := testenv.Clients(t)
	old, cur := policy(t, "default_ttl: 2d\ntenants:\n  acme: 3h\n"), policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	tgt := sink.Target(testenv.Table(t, ac, dc, cur.GCMaxAge()))
	tbl := dc.Open(tgt.Table)
	w, err := sink.NewWriter(dc, tgt, sink.DefaultWriterConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	now := time.Now()
	var rows []sink.Row
	for i := range n {
		tenant := []string{"acme", "globex"}[i%2]
		base := now.Add(-time.Duration(i) * time.Second)
		rows = append(rows, sink.Row{Key: rowkey.Key(tenant, fmt.Sprintf("user-%d", i), fmt.Sprintf("e%d", i), base.UnixMilli()),
			Timestamp: old.Cell(tenant, base).Timestamp, Value: []byte("{}")})
	}
	if _, err := w.Write(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// A key outside cellttl's layout, between the tenants: passed over
	// when the tenants of the whole table are listed for shards.
	if _, err := w.Write(ctx, []sink.Row{{Key: "b-foreign", Timestamp: old.Cell("x", now).Timestamp, Value: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	for _, count := range []int{1, 3, 4} {
		var scanned, wholeScanned, live int64
		for i := range count {
			sh := Shard{Index: i, Count: count}
			rep, err := Retime(ctx, tbl, tgt.Family, cur, RetimeOptions{Tenants: []string{"acme", "globex"}, Shard: sh, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if count > 1 && (rep.Scanned == 0 || rep.Scanned == n) {
				t.Errorf("shard %s scanned %d of %d rows: the split is not a split", sh, rep.Scanned, n)
			}
			scanned += rep.Scanned
			// Every row of the table (a migration's step), in shards too.
			whole, err := Retime(ctx, tbl, tgt.Family, cur, RetimeOptions{Shard: sh, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			wholeScanned += whole.Scanned - whole.Foreign
			a, err := Audit(ctx, tbl, tgt.Family, cur, AuditOptions{Tenants: []string{"acme", "globex"}, Shard: sh})
			if err != nil {
				t.Fatal(err)
			}
			for _, ta := range a.Tenants {
				live += ta.LiveRows + ta.ExpiredRows
			}
		}
		if scanned != n || live != n || wholeScanned != n {
			t.Errorf("%d shards: retime scanned %d rows (%d of the whole table), audit counted %d, want %d each: every row exactly once", count, scanned, wholeScanned, live, n)
		}
	}
	if _, err := Audit(ctx, tbl, tgt.Family, cur, AuditOptions{Shard: Shard{Index: 0, Count: 2}}); err == nil {
		t.Error("a sharded audit of the whole table was accepted")
	}
	for _, bad := range []string{"4/4", "-1/2", "1", "a/b", "0/0"} {
		if _, err := ParseShard(bad); err == nil {
			t.Errorf("--shard %q accepted", bad)
		}
	}
}

// Regression (review): the rows a batch changes were counted in the
// checkpoint only after Bigtable took them. Interrupted in between (here:
// the reply lost after the emulator applied the batch), the resumed pass
// found those rows already re-timed, counted nothing, and skipped the next
// pass, which rows a worker on the old file wrote meanwhile need.
func TestRetimeCountsChangesBeforeWritingThem(t *testing.T) {
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	dc, ac := testenv.Clients(t)
	old, now := policy(t, "default_ttl: 2d\ntenants:\n  acme: 3h\n"), policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	tgt := sink.Target(testenv.Table(t, ac, dc, old.GCMaxAge()))
	tbl := dc.Open(tgt.Table)
	evs := seed(t, dc, tgt, old, "acme", []time.Duration{time.Minute, 2 * time.Minute})
	cpFile := filepath.Join(t.TempDir(), "checkpoint")
	o := RetimeOptions{Tenants: []string{"acme"}, Checkpoint: cpFile, Resume: true, Job: Job{Table: tgt.Table, Family: tgt.Family, Config: "v2"},
		Passes: 2, PassDelay: 10 * time.Millisecond}
	// Rewrites are conditional, one request each (applyRewrites); deletions
	// go in bulk: every reply lost.
	proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		return testenv.MutateRowsFault{LostReply: status.Error(codes.PermissionDenied, "reply lost")}
	})
	proxy.SetCondLostReply(status.Error(codes.PermissionDenied, "reply lost"))
	if _, err := Retime(ctx, tbl, tgt.Family, now, o); err == nil {
		t.Fatal("the first run did not fail")
	}
	proxy.SetFault(nil)
	proxy.SetCondLostReply(nil)
	checkFollows(t, tbl, tgt.Family, now, "acme", evs, time.Now()) // applied, though the run failed
	var late []event
	o.ProgressEvery = time.Nanosecond
	o.Progress = func(p Progress) {
		if p.Completed && p.Pass == 1 {
			late = seed(t, dc, tgt, old, "acme", []time.Duration{30 * time.Second})
		}
	}
	if _, err := Retime(ctx, tbl, tgt.Family, now, o); err != nil {
		t.Fatal(err)
	}
	checkFollows(t, tbl, tgt.Family, now, "acme", append(evs, late...), time.Now())
}

// forgetMidway is a table on which worker forget deletes rows between a
// retime's read and its write: del runs before the first write.
type forgetMidway struct {
	*bigtable.Table
	once sync.Once
	del  func()
}

func (f *forgetMidway) Apply(ctx context.Context, row string, m *bigtable.Mutation, opts ...bigtable.ApplyOption) error {
	f.once.Do(f.del)
	return f.Table.Apply(ctx, row, m, opts...)
}

func (f *forgetMidway) ApplyBulk(ctx context.Context, keys []string, muts []*bigtable.Mutation, opts ...bigtable.ApplyOption) ([]error, error) {
	f.once.Do(f.del)
	return f.Table.ApplyBulk(ctx, keys, muts, opts...)
}

// A row deleted between retime's read and its rewrite (worker forget's
// pass, for a user the ledger covers only by its mark, which a row does
// not carry) stays deleted: the rewrite sets cells only while the row is
// there. A blind rewrite wrote the erased user's row back, at its new TTL.
func TestRetimeNeverWritesBackADeletedRow(t *testing.T) {
	dc, ac := testenv.Clients(t)
	old, now := policy(t, "default_ttl: 2d\ntenants:\n  acme: 3h\n"), policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	tgt := sink.Target(testenv.Table(t, ac, dc, old.GCMaxAge()))
	tbl := dc.Open(tgt.Table)
	evs := seed(t, dc, tgt, old, "acme", []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute})
	gone := evs[1]
	mid := &forgetMidway{Table: tbl, del: func() {
		m := bigtable.NewMutation()
		m.DeleteRow()
		if err := tbl.Apply(ctx, gone.key, m); err != nil {
			t.Error(err)
		}
	}}
	rep, err := Retime(ctx, mid, tgt.Family, now, RetimeOptions{Tenants: []string{"acme"}, Passes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rewritten != 3 || rep.Vanished != 1 {
		t.Errorf("%+v: want 3 rewrites planned, 1 of a row gone meanwhile", rep)
	}
	if items := cells(t, tbl, tgt.Family)[gone.key]; len(items) != 0 {
		t.Errorf("%s, deleted after retime read it: %d cells written back", gone.key, len(items))
	}
	checkFollows(t, tbl, tgt.Family, now, "acme", []event{evs[0], evs[2]}, time.Now())
}
