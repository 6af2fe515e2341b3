package forget

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/rowkey"
)

// A rejoin that stopped after recording (the command killed in its wait)
// is finished by the same command run again: it finds the rejoin in force
// and the offboarding still in the table, and ends it, rather than say
// the tenant is not offboarded and leave an offboarding that never
// expires to come back once the rejoin's record has gone. An offboarding
// run after it from a host whose clock lies behind is recorded after the
// rejoin all the same, so that it is in force.
func TestRejoinFinishesAndOffboardingFollowsIt(t *testing.T) {
	dc, events, store := replicationSetup(t)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	now := time.Now().UTC().Truncate(time.Millisecond)
	drop := func(ctx context.Context, prefix string) error { return nil }
	if _, err := Offboard(ctx, dc.Open(events), store, OffboardRequest{Tenant: "acme", RequestedBy: "t", Now: now, Drop: drop, SecondPassAfter: time.Millisecond}, log); err != nil {
		t.Fatal(err)
	}
	// The first run's rejoin, recorded, its offboarding not ended.
	left, err := store.Offboarding(ctx, "acme", now)
	if err != nil || left == nil {
		t.Fatalf("offboarding: %v %v", left, err)
	}
	first := erasure.Erasure{Tenant: "acme", Offboard: true, UpTo: left.RecordedAt.Add(time.Second), RecordedAt: now.Add(time.Second), RequestedBy: "t"}
	if err := store.Put(ctx, first); err != nil {
		t.Fatal(err)
	}
	req := RejoinRequest{Tenant: "acme", RequestedBy: "t", Now: now.Add(2 * time.Second), MaxClockSkew: time.Second, EndAfter: time.Millisecond}
	rc, err := Rejoin(ctx, store, req, log)
	if err != nil || !rc.Finished || rc.Ended != 1 || !rc.Record.RecordedAt.Equal(first.RecordedAt) {
		t.Fatalf("rejoin run again: %+v, %v; want the first run's rejoin finished, one offboarding ended", rc, err)
	}
	recs, err := store.TenantRecords(ctx, "acme", time.Now())
	if err != nil || len(recs) != 1 || recs[0].Whole() {
		t.Errorf("after the rejoin the table holds %+v (%v), want the rejoin alone", recs, err)
	}
	if _, err := Rejoin(ctx, store, req, log); !errors.Is(err, ErrNotOffboarded) {
		t.Errorf("a rejoin of a tenant rejoined: %v, want ErrNotOffboarded", err)
	}
	// An offboarding from a clock behind the rejoin's.
	behind := first.RecordedAt.Add(-500 * time.Millisecond)
	if _, err := Offboard(ctx, dc.Open(events), store, OffboardRequest{Tenant: "acme", RequestedBy: "t", Now: behind, Drop: drop, SecondPassAfter: time.Millisecond}, log); err != nil {
		t.Fatal(err)
	}
	all, _, err := store.Load(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l := erasure.NewLedger(all, time.Now())
	if !l.Offboarded("acme") || !l.ErasedKey(rowkey.Key("acme", "u-9", "e-9", time.Now().UnixMilli()), erasure.Position{}) {
		t.Error("an offboarding recorded from a clock behind the rejoin is not in force")
	}
}
