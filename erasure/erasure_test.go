package erasure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// createLedger makes the ledger table as worker setup does, deleted when
// the test ends.
func createLedger(t testing.TB, ac *bigtable.AdminClient, name string) {
	t.Helper()
	ctx := context.Background()
	if err := ac.CreateTable(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.DeleteTable(context.Background(), name) })
	if err := ac.CreateColumnFamilyWithConfig(ctx, name, Family, bigtable.Family{GCPolicy: bigtable.MaxAgePolicy(GCMaxAge)}); err != nil {
		t.Fatal(err)
	}
}

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// An erasure covers its user's events up to and including erased_up_to,
// of its tenant only; an event without a user is never erased; the latest
// erased_up_to of a user wins; an expired record erases nothing.
func TestLedgerErases(t *testing.T) {
	l := NewLedger([]Erasure{
		{Tenant: "acme", User: "u1", UpTo: t0},
		{Tenant: "acme", User: "u1", UpTo: t0.Add(-time.Hour)},
		{Tenant: "acme", User: "u2", UpTo: t0, Expires: t0.Add(-time.Millisecond)},
		{Tenant: "acme", User: "u3", UpTo: t0, Expires: t0.Add(time.Hour)},
	}, t0)
	ms := t0.UnixMilli()
	for _, c := range []struct {
		tenant, user string
		millis       int64
		want         bool
	}{
		{"acme", "u1", ms, true},
		{"acme", "u1", ms - 3_600_000, true},
		{"acme", "u1", ms + 1, false}, // the user came back
		{"globex", "u1", ms, false},   // another tenant's u1
		{"acme", "u2", ms, false},     // the record expired
		{"acme", "u3", ms, true},
		{"acme", "", ms, false},
		{"acme", "u", ms, false},
	} {
		if got := l.Erased(c.tenant, c.user, c.millis, Position{}); got != c.want {
			t.Errorf("Erased(%s, %s, %d) = %t, want %t", c.tenant, c.user, c.millis-ms, got, c.want)
		}
		key := rowkey.Key(c.tenant, c.user, "e1", c.millis)
		if got := l.ErasedKey(key, Position{}); got != c.want && c.user != "" {
			t.Errorf("ErasedKey(%s) = %t, want %t", rowkey.Describe(key), got, c.want)
		}
	}
	if l.Len() != 2 {
		t.Errorf("Len %d, want 2 (u1, u3)", l.Len())
	}
	var none *Ledger
	if none.Erased("acme", "u1", ms, Position{}) || none.Len() != 0 || none.ErasedKey("x", Position{}) {
		t.Error("a nil ledger erases")
	}
}

// The generation grows only when a load erases something new: a user, or
// a later erased_up_to; records expiring do not move it.
func TestGenerationGrowsOnlyWithNewErasures(t *testing.T) {
	a := NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0}}, t0)
	for _, c := range []struct {
		name string
		next *Ledger
		want bool
	}{
		{"same", NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0}}, t0), false},
		{"fewer", NewLedger(nil, t0), false},
		{"new user", NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0}, {Tenant: "acme", User: "u2", UpTo: t0}}, t0), true},
		{"later up-to", NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0.Add(time.Second)}}, t0), true},
		{"earlier up-to", NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0.Add(-time.Second)}}, t0), false},
		{"other tenant", NewLedger([]Erasure{{Tenant: "globex", User: "u1", UpTo: t0}}, t0), true},
	} {
		if got := c.next.newer(a); got != c.want {
			t.Errorf("%s: newer %t, want %t", c.name, got, c.want)
		}
	}
	if NewLedger(nil, t0).newer(nil) || !a.newer(nil) {
		t.Error("against no ledger")
	}
}

// Records go into the table and come back, each with its expiry as its
// cells' timestamp; an expired one is left out though GC has not run; a
// row not written by forget is ignored and counted; a missing table is
// ErrMissing, to write and to read.
func TestStore(t *testing.T) {
	dc, ac := testenv.Clients(t)
	ctx := context.Background()
	name := testenv.Name("ledger")
	s := NewStore(dc, name)
	if _, _, err := s.Load(ctx, t0); !errors.Is(err, ErrMissing) {
		t.Fatalf("load of a missing table: %v", err)
	}
	if err := s.Put(ctx, Erasure{Tenant: "acme", User: "u1", UpTo: t0}); !errors.Is(err, ErrMissing) {
		t.Fatalf("put into a missing table: %v", err)
	}
	createLedger(t, ac, name)
	now := time.Now().UTC().Truncate(time.Millisecond)
	recs := []Erasure{
		{Tenant: "acme", User: "u 1", UpTo: now, RecordedAt: now, RequestedBy: "ticket-1", Expires: now.Add(time.Hour)},
		{Tenant: "acme", User: "u2", UpTo: now, RecordedAt: now, RequestedBy: "ticket-2"}, // never expires
		{Tenant: "acme", User: "u3", UpTo: now, RecordedAt: now, RequestedBy: "ticket-3", Expires: now.Add(-time.Minute)},
	}
	for _, r := range recs {
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, Erasure{Tenant: "acme", User: "u#4", UpTo: now}); err == nil {
		t.Error("a user id with the separator was recorded")
	}
	m := bigtable.NewMutation()
	m.Set(Family, colUpTo, bigtable.Now(), millis(now))
	if err := dc.Open(name).Apply(ctx, "no-separator", m); err != nil {
		t.Fatal(err)
	}
	got, ignored, err := s.Load(ctx, now)
	if err != nil || ignored != 1 || len(got) != 2 {
		t.Fatalf("load: %v, %d ignored, %+v", err, ignored, got)
	}
	byUser := map[string]Erasure{}
	for _, r := range got {
		byUser[r.User] = r
	}
	for _, want := range recs[:2] {
		if g := byUser[want.User]; g != want {
			t.Errorf("loaded %+v, want %+v", g, want)
		}
	}
	if got, err := s.loadAll(ctx, now); err != nil || got.l.Len() != 2 || !got.l.Erased("acme", "u 1", now.UnixMilli(), Position{}) {
		t.Errorf("ledger: %v, %+v", err, got)
	}
	// The journal: every record recorded since a moment; the expired one
	// is there, and left out of a ledger.
	entries, _, _, _, err := s.loadSince(ctx, now.Add(-time.Minute), now)
	if err != nil || len(entries) != 3 {
		t.Fatalf("journal: %v %+v", err, entries)
	}
	if l, _ := (&Ledger{}).with(entries, now); l.Len() != 2 || l.Erased("acme", "u3", now.UnixMilli(), Position{}) {
		t.Errorf("ledger from the journal: %d users", l.Len())
	}
	if entries, _, _, _, err := s.loadSince(ctx, time.Now().Add(time.Minute), time.Now()); err != nil || len(entries) != 0 {
		t.Errorf("journal of the future: %v %+v", err, entries)
	}
	// A second erasure of u2, never expiring as the first, erasing less:
	// both are kept (one did not overwrite the other), the first wins.
	if err := s.Put(ctx, Erasure{Tenant: "acme", User: "u2", UpTo: now.Add(-24 * time.Hour), RecordedAt: now.Add(time.Millisecond), RequestedBy: "ticket-4"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.loadAll(ctx, now); err != nil || !got.l.Erased("acme", "u2", now.UnixMilli(), Position{}) {
		t.Errorf("a second, narrower erasure of u2 undid the first: %v", err)
	}
	if got, _, err := s.Load(ctx, now); err != nil || len(got) != 3 {
		t.Errorf("records after a second erasure of u2: %v %+v", err, got)
	}
}

// A ledger with entries is a new ledger that shares the maps of the
// tenants they leave alone, and leaves the old one as it was.
func TestLedgerWith(t *testing.T) {
	old := NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0}, {Tenant: "globex", User: "u1", UpTo: t0}}, t0)
	ms := t0.UnixMilli()
	if l, grew := old.with([]entry{{tenant: "acme", user: "u1", erased: erased{upTo: ms - 1, expires: forever}}}, t0); l != old || grew {
		t.Error("an entry erasing nothing new made a new ledger")
	}
	next, grew := old.with([]entry{{tenant: "acme", user: "u2", erased: erased{upTo: ms, expires: forever}}, {tenant: "acme", user: "u3", erased: erased{upTo: ms, expires: ms}}}, t0)
	if !grew {
		t.Error("a new user did not grow the ledger")
	}
	if next.Len() != 3 || !next.Erased("acme", "u2", ms, Position{}) || next.Erased("acme", "u3", ms, Position{}) || old.Erased("acme", "u2", ms, Position{}) || old.Len() != 2 {
		t.Errorf("with: %d users, old %d", next.Len(), old.Len())
	}
	if fmt.Sprintf("%p", next.users["globex"]) != fmt.Sprintf("%p", old.users["globex"]) {
		t.Error("an untouched tenant's map was copied")
	}
}

// The watch puts a record in force within its interval, holds writes once
// its ledger is older than StaleAfter intervals, and tells a row decided
// before an erasure from one decided after.
func TestWatch(t *testing.T) {
	dc, ac := testenv.Clients(t)
	ctx := context.Background()
	name := testenv.Name("ledger")
	s := NewStore(dc, name)
	w := NewWatch(s, 50*time.Millisecond, slog.New(slog.DiscardHandler))
	// The watch's clock moves only when the test moves it: a load that
	// takes longer than StaleAfter refreshes on a loaded machine (150 ms
	// here) must not make the ledger stale before the test says so.
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	w.now = func() time.Time { return time.Unix(0, clock.Load()) }
	if w.Held() == nil {
		t.Error("writes not held before the first load")
	}
	// No table is not "no erasure": start-up fails at once.
	if err := w.Start(ctx); !errors.Is(err, ErrMissing) || w.Held() == nil {
		t.Fatalf("start without the table: %v, held %v", err, w.Held())
	}
	createLedger(t, ac, name)
	if err := w.Start(ctx); err != nil || w.Held() != nil || w.Status().State != "loaded" {
		t.Fatalf("start: %v, held %v, %+v", err, w.Held(), w.Status())
	}
	// Past the first read of the records in force, only the journal is
	// read: the record must come from it.
	w.rereadEvery = time.Hour
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(rctx) }()
	defer func() { cancel(); <-done }()

	key := rowkey.Key("acme", "u1", "e1", t0.UnixMilli())
	gen := w.Generation()
	if !admits(t, w, key) {
		t.Fatal("an empty ledger refuses a row")
	}
	if err := s.Put(ctx, Erasure{Tenant: "acme", User: "u1", UpTo: t0, RecordedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() (bool, string) {
		return !admits(t, w, key), "the record is not in force"
	})
	if w.Generation() <= gen || w.Status().ErasedUsers != 1 || w.Status().State != "loaded" {
		t.Errorf("after the record: generation %d (was %d), %+v", w.Generation(), gen, w.Status())
	}

	// The table goes away under the worker: that is not "no erasure",
	// it is a ledger that cannot be read. Past the bound, writes wait,
	// and the ledger in force stays.
	if err := ac.DeleteTable(ctx, name); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(time.Minute))
	testenv.Eventually(t, 5*time.Second, func() (bool, string) {
		return w.Held() != nil && w.Status().State == "stale", "writes not held with a stale ledger"
	})
	if !w.Current().Erased("acme", "u1", t0.UnixMilli(), Position{}) {
		t.Error("a failed load dropped the ledger in force")
	}
}

// admits asks w about a row whose record is not known, failing t when it
// cannot tell.
func admits(t *testing.T, w *Watch, key string) bool {
	t.Helper()
	ok, err := w.Admits(context.Background(), key, Position{})
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
