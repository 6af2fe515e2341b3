package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/reader"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/testkit/testenv"
)

func TestPlanMigrationOrder(t *testing.T) {
	d2 := policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	d3 := policy(t, "default_ttl: 3d\ntenants:\n  acme: 1h\n")
	one := policy(t, "strategy: one-second\ndefault_ttl: 2d\ntenants:\n  acme: 1h\n")
	for _, tc := range []struct {
		name     string
		old, new *expiry.Policy
		repl     bool
		want     string
	}{
		// Every row: an unlisted tenant's event with its own TTL moves too.
		{"raise", d2, d3, false, "[purge gc 3d retime all]"},
		{"lower", d3, d2, false, "[retime all gc 2d]"},
		{"to one-second", d2, one, false, "[retime all gc 1s]"},
		{"from one-second", one, d2, false, "[purge gc 2d retime all]"},
		{"raise by 200d, replicated", d2, policy(t, "default_ttl: 202d\ntenants:\n  acme: 1h\n"), true, "[purge gc 92d gc 182d gc 202d retime all]"},
		{"a tenant's TTL", d2, policy(t, "default_ttl: 2d\ntenants:\n  acme: 2h\n"), false, "[retime [acme]]"},
		{"a tenant's bounds", d2, policy(t, "default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, max_ttl: 3h}\n"), false, "[retime [acme]]"},
		{"the unlisted tenants' bounds", d2, policy(t, "default_ttl: 2d\nmin_ttl: 1m\ntenants:\n  acme: {ttl: 1h, min_ttl: 0s}\n"), false, "[retime all]"},
	} {
		var got []string
		for _, s := range PlanMigration(tc.old, tc.new, tc.repl) {
			switch {
			case s.Purge:
				got = append(got, "purge")
			case !s.Retime:
				got = append(got, "gc "+fmtTTL(s.MaxAge))
			case s.Tenants == nil:
				got = append(got, "retime all")
			default:
				got = append(got, fmt.Sprintf("retime %v", s.Tenants))
			}
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, got, tc.want)
		}
	}
}

// A migration resumed where the family's rule stands: the GC steps before
// that rule are done; a rule on no step's path is no plan at all.
func TestPendingSteps(t *testing.T) {
	d2 := policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	plan := PlanMigration(d2, policy(t, "default_ttl: 202d\ntenants:\n  acme: 1h\n"), true) // purge, gc 92d, gc 182d, gc 202d, retime
	day := 24 * time.Hour
	for current, want := range map[time.Duration]int{2 * day: 5, 92 * day: 3, 182 * day: 2, 202 * day: 1, 7 * day: 0} {
		got := PendingSteps(plan, 2*day, current)
		if len(got) != want || (want > 0 && got[len(got)-1].String() != plan[len(plan)-1].String()) {
			t.Errorf("rule at %s: %d steps left %v, want the last %d", current, len(got), got, want)
		}
	}
}

// A migration with TTLs of seconds, while the emulator's GC runs (every
// 0.5 to 1.5 s) and a reader samples every 100 ms: GC never takes a cell
// before the earlier of its old and new expiry, and no event is readable
// past the later by more than the migration lasts. The reader moves to the
// new file when the GC rule changes (as the workers would, restarted).
//
// A quarter of the events gave their own TTL (2s: within every tenant's
// bounds), the unlisted walk-in's too: their cells sit at that TTL less
// default_ttl, so a new default_ttl moves them as it moves a listed
// tenant's.
func TestMigrationKeepsItsPromises(t *testing.T) {
	dc, ac := testenv.Clients(t)
	for _, tc := range []struct{ name, old, new string }{
		{"raise default_ttl", "default_ttl: 6s\ntenants:\n  acme: 3s\n  globex: 10s\n", "default_ttl: 9s\ntenants:\n  acme: 3s\n  globex: 10s\n"},
		{"lower default_ttl", "default_ttl: 9s\ntenants:\n  acme: 3s\n  globex: 10s\n", "default_ttl: 6s\ntenants:\n  acme: 3s\n  globex: 10s\n"},
		{"to one-second", "default_ttl: 6s\ntenants:\n  acme: 3s\n  globex: 10s\n", "strategy: one-second\ndefault_ttl: 6s\ntenants:\n  acme: 3s\n  globex: 10s\n"},
		{"from one-second", "strategy: one-second\ndefault_ttl: 6s\ntenants:\n  acme: 3s\n  globex: 10s\n", "default_ttl: 6s\ntenants:\n  acme: 3s\n  globex: 10s\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			old, new := policy(t, tc.old), policy(t, tc.new)
			tgt := sink.Target(testenv.Table(t, ac, dc, old.GCMaxAge()))
			tbl := dc.Open(tgt.Table)
			w, err := sink.NewWriter(dc, tgt, sink.DefaultWriterConfig(), nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			type ev struct {
				key, tenant string
				lo, hi      time.Time // the earlier and the later promised expiry
			}
			var evs []ev
			var rows []sink.Row
			now := time.Now()
			for i := range 60 {
				tenant := []string{"acme", "globex", "walk-in"}[i%3]
				base := now.Add(-time.Duration(i) * 100 * time.Millisecond).Truncate(time.Millisecond)
				key := rowkey.Key(tenant, fmt.Sprintf("u%d", i), fmt.Sprintf("e%d", i), base.UnixMilli())
				co, cn := old.Cell(tenant, base), new.Cell(tenant, base)
				var own sink.TTL
				if i%4 == 0 {
					to, _ := old.EventTTL(tenant, 2*time.Second)
					tn, _ := new.EventTTL(tenant, 2*time.Second)
					co, cn = old.CellTTL(to, base), new.CellTTL(tn, base)
					own = sink.TTL{Effective: to, Requested: 2 * time.Second, Own: true}
				}
				eo, en := co.Expiry, cn.Expiry
				lo, hi := eo, en
				if en.Before(eo) {
					lo, hi = en, eo
				}
				evs = append(evs, ev{key, tenant, lo, hi})
				rows = append(rows, sink.Row{Key: key, Timestamp: co.Timestamp, Value: []byte("{}"), WrittenAt: true, TTL: own})
			}
			if _, err := w.Write(ctx, rows); err != nil {
				t.Fatal(err)
			}

			var switched atomic.Bool // readers on the new file
			var started, ended atomic.Int64
			started.Store(time.Now().UnixNano())
			var latest atomic.Int64 // the most an event was seen past its later expiry, ns
			var failures []string
			var mu sync.Mutex
			fail := func(f string, a ...any) {
				mu.Lock()
				if len(failures) < 10 {
					failures = append(failures, fmt.Sprintf(f, a...))
				}
				mu.Unlock()
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					p := old
					if switched.Load() {
						p = new
					}
					before := time.Now()
					visible := map[string]bool{}
					for _, tenant := range []string{"acme", "globex", "walk-in"} {
						_ = reader.New(tbl, tgt.Family, p).Read(ctx, reader.Query{Tenant: tenant}, func(e reader.Event) bool {
							visible[e.Key] = true
							return true
						})
					}
					stored := map[string]bool{}
					_ = tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool { stored[r.Key()] = true; return true },
						bigtable.RowFilter(bigtable.StripValueFilter()))
					after := time.Now()
					for _, e := range evs {
						if late := before.Sub(e.hi); visible[e.key] && late > 0 {
							for {
								cur := latest.Load()
								if int64(late) <= cur || latest.CompareAndSwap(cur, int64(late)) {
									break
								}
							}
						}
						if !stored[e.key] && after.Before(e.lo) {
							fail("%s gone at %s, before its earlier expiry %s", e.key, after.Format("15:04:05.000"), e.lo.Format("15:04:05.000"))
						}
					}
				}
			})

			steps := PlanMigration(old, new, false)
			setGC := func(ctx context.Context, maxAge time.Duration) error {
				return ac.SetGCPolicy(ctx, tgt.Table, tgt.Family, bigtable.MaxAgePolicy(maxAge))
			}
			_, err = Migrate(ctx, tbl, tgt.Family, old, new, steps, setGC, RetimeOptions{RowsPerSecond: 40, Passes: 1}, func(_ int, s Step, done bool) {
				if done && !s.Retime {
					switched.Store(true)
				}
			})
			switched.Store(true)
			ended.Store(time.Now().UnixNano())
			if err != nil {
				t.Fatal(err)
			}
			// Watch until the last event is past its later expiry and GC.
			var last time.Time
			for _, e := range evs {
				if e.hi.After(last) {
					last = e.hi
				}
			}
			time.Sleep(time.Until(last) + 2*time.Second)
			close(stop)
			wg.Wait()
			for _, f := range failures {
				t.Error(f)
			}
			lasted := time.Duration(ended.Load() - started.Load())
			if late := time.Duration(latest.Load()); late > lasted {
				t.Errorf("an event was readable %s past its later expiry, more than the migration's %s", late, lasted)
			} else {
				t.Logf("readable at most %s past the later expiry; the migration lasted %s", late, lasted)
			}
			t.Logf("steps %v; migration took %s", steps, time.Duration(ended.Load()-started.Load()))
		})
	}
}

// What one run of a migration does: one step, or every step left; a shard
// takes a re-timing or purge step, never the GC rule's.
func TestStepsToRun(t *testing.T) {
	d2 := policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	plan := PlanMigration(d2, policy(t, "default_ttl: 3d\ntenants:\n  acme: 1h\n"), false) // purge, gc 3d, retime
	day := 24 * time.Hour
	two := Shard{Index: 1, Count: 2}
	for _, c := range []struct {
		name    string
		current time.Duration
		only    int
		shard   Shard
		steps   int
		err     string
	}{
		{"every step", 2 * day, 0, All, 3, ""},
		{"after the GC step", 3 * day, 0, All, 1, ""},
		{"one step", 2 * day, 3, All, 1, ""},
		{"a shard of the re-timing", 3 * day, 3, two, 1, ""},
		{"a shard of the GC step", 2 * day, 2, two, 0, "--step 2 changes the GC rule"},
		{"a shard without a step", 2 * day, 0, two, 0, "--shard needs --step"},
		{"no such step", 2 * day, 4, All, 0, "--step 4: the plan has steps 1 to 3"},
		{"a rule off the path", 5 * day, 0, All, 0, ErrOffPath.Error()},
	} {
		steps, err := StepsToRun(plan, 2*day, c.current, c.only, c.shard)
		if len(steps) != c.steps || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %d steps, %v; want %d, %q", c.name, len(steps), err, c.steps, c.err)
		}
	}
}

// A run's plan says which steps an earlier run did, which this one takes,
// and refuses a family whose rule is no max-age or off the plan's path,
// naming the rule.
func TestPlanRun(t *testing.T) {
	d2 := policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	d3 := policy(t, "default_ttl: 3d\ntenants:\n  acme: 1h\n")
	day := 24 * time.Hour
	run, err := PlanRun(d2, d3, 3*day, true, "max-age 3d", false, 0, All) // purge, gc 3d done; retime left
	if err != nil || len(run.Plan) != 3 || len(run.Steps) != 1 || !run.Done(0) || !run.Done(1) || run.Done(2) || run.ThisRun(2) {
		t.Errorf("after the GC step: %+v, %v", run, err)
	}
	if run, err := PlanRun(d2, d3, 2*day, true, "max-age 2d", false, 3, All); err != nil || !run.ThisRun(2) || run.Done(0) {
		t.Errorf("--step 3: %+v, %v", run, err)
	}
	if _, err := PlanRun(d2, d3, 0, false, "versions 1", false, 0, All); !errors.Is(err, ErrNotMaxAge) || !strings.Contains(err.Error(), "versions 1") {
		t.Errorf("a rule of no max-age: %v", err)
	}
	if _, err := PlanRun(d2, d3, 5*day, true, "max-age 5d", false, 0, All); !errors.Is(err, ErrOffPath) || !strings.Contains(err.Error(), "max-age 5d is neither the old file's (2d) nor a step towards the new one's (3d)") {
		t.Errorf("a rule off the path: %v", err)
	}
}
