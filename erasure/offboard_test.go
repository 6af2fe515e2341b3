package erasure

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cellttl/cellttl/rowkey"
)

// offboarding is the record worker offboard writes for tenant.
func offboarding(tenant string, at time.Time) Erasure {
	return Erasure{Tenant: tenant, Offboard: true, UpTo: Whole, RecordedAt: at, RequestedBy: "contract ended"}
}

// A tenant's offboarding erases every event of the tenant: any user, an
// event without one, any time, any place in the topic; and a dead letter
// of it keeps nothing. Other tenants, and a user of the same id elsewhere,
// are untouched, and the users' listing does not take the tenant for a
// user.
func TestOffboardingErasesTheWholeTenant(t *testing.T) {
	l := NewLedger([]Erasure{offboarding("acme", t0), {Tenant: "globex", User: "u1", UpTo: t0}}, t0)
	far := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for _, c := range []struct {
		tenant, user string
		millis       int64
		want         bool
	}{
		{"acme", "u1", t0.UnixMilli(), true},
		{"acme", "u9", far, true}, // a later event, stamped far ahead
		{"acme", "", t0.UnixMilli(), true},
		{"acme", "u2", 0, true},
		{"globex", "u1", t0.UnixMilli(), true},
		{"globex", "u1", t0.UnixMilli() + 1, false},
		{"globex", "", t0.UnixMilli(), false},
		{"initech", "u1", t0.UnixMilli(), false},
	} {
		if got := l.Erased(c.tenant, c.user, c.millis, Position{Topic: "clicks", Offset: 1 << 40}); got != c.want {
			t.Errorf("Erased(%s, %q, %d) = %t, want %t", c.tenant, c.user, c.millis, got, c.want)
		}
		if c.user != "" && c.millis <= rowkey.MaxMillis { // a key holds no later time
			if got := l.ErasedKey(rowkey.Key(c.tenant, c.user, "e1", c.millis), Position{}); got != c.want {
				t.Errorf("ErasedKey(%s/%s) = %t, want %t", c.tenant, c.user, got, c.want)
			}
		}
	}
	if !l.Offboarded("acme") || l.Offboarded("globex") {
		t.Errorf("Offboarded: acme %t, globex %t", l.Offboarded("acme"), l.Offboarded("globex"))
	}
	if f := l.Letter(Subject{Tenant: "acme", User: "u1", UserRead: true, Millis: t0.UnixMilli()}); f != DropLetter {
		t.Errorf("letter of an offboarded tenant's user: %d, want DropLetter", f)
	}
	if f := l.Letter(Subject{Tenant: "acme", Millis: t0.UnixMilli()}); f != LetterWithoutPayload {
		t.Errorf("letter of an offboarded tenant, its user unread: %d, want LetterWithoutPayload", f)
	}
	l.Users("acme", func(u string, _ time.Time) { t.Errorf("Users lists %q for the offboarded tenant", u) })
	// A ledger built on from this one keeps the offboarding.
	next, _ := l.with([]entry{{tenant: "initech", user: "u1", erased: erased{upTo: t0.UnixMilli(), expires: forever}}}, t0)
	if !next.Erased("acme", "u5", far, Position{}) || !next.Offboarded("acme") {
		t.Error("a ledger built on an offboarding lost it")
	}
}

// An offboarding is one record: it is written, read back as the record of
// no user, reaches a worker through the journal and through the index,
// and stays held exactly when the records kept forever are held compact
// (the filter is asked by user, and would never name the tenant's).
func TestOffboardingRecordRoundTrips(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var recs []Erasure
	for i := range 5 {
		recs = append(recs, Erasure{Tenant: "globex", User: fmt.Sprintf("u%d", i), UpTo: now, RecordedAt: now})
	}
	recs = append(recs, offboarding("acme", now))
	// Held exactly: one record kept forever; the offboarding comes last.
	w, _ := compactWatch(t, 1, now, recs...)
	l := w.Current()
	if !l.Offboarded("acme") || !l.Erased("acme", "anyone", now.Add(time.Hour).UnixMilli(), Position{}) {
		t.Fatalf("a worker starting from the index does not hold the offboarding (%d records)", l.Len())
	}
	all, _, err := w.store.Load(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range all {
		if r.Tenant == "acme" {
			found = r.Offboard && r.User == "" && r.UpTo.Equal(Whole) && r.Expires.IsZero()
		}
	}
	if !found {
		t.Errorf("Load: the offboarding is not read back as one: %+v", all)
	}
	// Through the journal: a worker already running reads it at its next
	// refresh.
	s := indexedLedger(t)
	w2 := watchAt(s, &now)
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, offboarding("initech", now)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if err := w2.load(ctx); err != nil {
		t.Fatal(err)
	}
	if !w2.Current().Offboarded("initech") || !w2.Current().Erased("initech", "", 0, Position{}) {
		t.Error("a refresh did not read the offboarding from the journal")
	}
	// A user's record can never be written as one, nor an offboarding
	// name a user.
	if _, _, err := Rows(Erasure{Tenant: "acme", RecordedAt: now}, now); err == nil {
		t.Error("a user's record with no user was written")
	}
	if _, _, err := Rows(Erasure{Tenant: "acme", User: "u1", Offboard: true, RecordedAt: now}, now); err == nil {
		t.Error("an offboarding naming a user was written")
	}
}

// A rejoin ends an offboarding at the next refresh of a worker that held
// it: the tenant's events before it left, and every event appended before
// the rejoin, stay erased; its events after are not. A reread then holds
// the rejoin alone, as does a read of every record (audit, plan), and an
// offboarding again, recorded later, erases everything again, and is not
// ended with those before the rejoin.
func TestRejoinEndsAnOffboarding(t *testing.T) {
	s := indexedLedger(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	leftAt := now.Add(-time.Hour)
	if err := s.Put(ctx, offboarding("acme", leftAt)); err != nil {
		t.Fatal(err)
	}
	w := watchAt(s, &now)
	w.rereadEvery = time.Minute
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if at, ok := w.Current().LeftAt("acme"); !ok || !at.Equal(leftAt) {
		t.Fatalf("LeftAt: %s %t, want %s", at, ok, leftAt)
	}
	mark := &Mark{Topic: "clicks", Ends: []int64{100}}
	rejoin := Erasure{Tenant: "acme", Offboard: true, UpTo: leftAt.Add(5 * time.Minute), Below: mark, RecordedAt: now, Expires: now.Add(30 * 24 * time.Hour)}
	if err := s.Put(ctx, rejoin); err != nil {
		t.Fatal(err)
	}
	check := func(when string, l *Ledger) {
		t.Helper()
		before := Position{Topic: "clicks", Offset: 99}
		after := Position{Topic: "clicks", Offset: 100}
		later := now.Add(time.Minute).UnixMilli()
		switch {
		case l.Offboarded("acme"):
			t.Errorf("%s: still offboarded", when)
		case !l.Erased("acme", "u1", leftAt.UnixMilli(), after):
			t.Errorf("%s: an event from before the tenant left is written again", when)
		case !l.Erased("acme", "u1", later, before):
			t.Errorf("%s: an event appended before the rejoin is written", when)
		case l.Erased("acme", "u1", later, after) || l.Erased("acme", "", later, after):
			t.Errorf("%s: an event after the rejoin is erased", when)
		}
	}
	now = now.Add(5 * time.Second)
	if err := w.load(ctx); err != nil {
		t.Fatal(err)
	}
	check("the next refresh", w.Current())
	if ended, err := s.EndOffboardings(ctx, "acme", rejoin.RecordedAt, now); err != nil || ended != 1 {
		t.Fatalf("end the offboarding: %d ended, %v", ended, err)
	}
	for range 13 { // past the reread
		now = now.Add(5 * time.Second)
		if err := w.load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("the reread", w.Current())
	all, _, err := s.Load(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	check("a read of every record", NewLedger(all, now))
	again := offboarding("acme", now)
	if err := s.Put(ctx, again); err != nil {
		t.Fatal(err)
	}
	if ended, err := s.EndOffboardings(ctx, "acme", rejoin.RecordedAt, now); err != nil || ended != 0 {
		t.Errorf("ending the offboardings before the rejoin ended %d (%v), want none: the later one stays", ended, err)
	}
	now = now.Add(5 * time.Second)
	if err := w.load(ctx); err != nil {
		t.Fatal(err)
	}
	if !w.Current().Offboarded("acme") || !w.Current().Erased("acme", "u1", now.Add(time.Hour).UnixMilli(), Position{Topic: "clicks", Offset: 500}) {
		t.Error("an offboarding after the rejoin does not erase everything again")
	}
}

// A journal read that only moves a tenant's record later (the same
// offboarding read again, with a later time) builds a ledger of its own:
// the ledger in force, which workers read while it is built, is never
// written.
func TestWithNeverWritesTheLedgerInForce(t *testing.T) {
	l := NewLedger([]Erasure{offboarding("acme", t0)}, t0)
	before := l.tenants["acme"]
	same := entry{tenant: "acme", erased: before.erased, recorded: t0.Add(time.Second).UnixMilli()}
	user := entry{tenant: "globex", user: "u1", erased: erased{upTo: t0.UnixMilli(), expires: forever}}
	next, _ := l.with([]entry{same, user}, t0)
	if l.tenants["acme"] != before {
		t.Errorf("the ledger in force changed: %+v, was %+v", l.tenants["acme"], before)
	}
	if next.tenants["acme"].recorded != same.recorded || !next.Offboarded("acme") || !next.Erased("globex", "u1", t0.UnixMilli(), Position{}) {
		t.Errorf("the ledger built: %+v", next.tenants)
	}
}
