package retention

import (
	"log/slog"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Rows of users the erasure ledger holds compact (records kept forever,
// past the first it holds exactly) are looked up and deleted by retime,
// as those of users it holds exactly are, even where the tenants file
// leaves their cells as they are.
func TestRetimeDeletesRowsOfUsersHeldCompact(t *testing.T) {
	dc, ac := testenv.Clients(t)
	p := policy(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	tgt := sink.Target(testenv.Table(t, ac, dc, p.GCMaxAge()))
	tbl := dc.Open(tgt.Table)
	evs := seed(t, dc, tgt, p, "acme", []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute})

	name := testenv.Name("ledger")
	if err := ac.CreateTable(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.DeleteTable(ctx, name) })
	if err := ac.CreateColumnFamilyWithConfig(ctx, name, erasure.Family, bigtable.Family{GCPolicy: bigtable.MaxAgePolicy(erasure.GCMaxAge)}); err != nil {
		t.Fatal(err)
	}
	store := erasure.NewStore(dc, name)
	store.CompactAbove = 1
	now := time.Now()
	for _, u := range []string{"u0", "u1", "u2"} { // seed's users of the first three events
		if err := store.Put(ctx, erasure.Erasure{Tenant: "acme", User: u, UpTo: now.Add(time.Hour), RecordedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := store.Index(ctx, now); err != nil {
		t.Fatal(err)
	}
	w := erasure.NewWatch(store, time.Minute, slog.New(slog.DiscardHandler))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Current().KnownKeys([]string{evs[0].key, evs[1].key, evs[2].key}) {
		t.Fatal("every erased user known at once: none held compact")
	}
	rep, err := Retime(ctx, tbl, tgt.Family, p, RetimeOptions{Tenants: []string{"acme"}, Erasures: w.Current})
	if err != nil {
		t.Fatal(err)
	}
	got := cells(t, tbl, tgt.Family)
	for i, e := range evs {
		if kept := len(got[e.key]) > 0; kept != (i == 3) {
			t.Errorf("%s: kept %v, want %v", e.key, kept, i == 3)
		}
	}
	if rep.Erased != 3 {
		t.Errorf("retime: %+v, want 3 rows of erased users", rep)
	}
}
