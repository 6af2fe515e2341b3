package erasure

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// foreverRecords writes records that never expire, recorded an hour ago
// (their journal rows with them, as forget wrote them then).
func foreverRecords(t *testing.T, s *Store, now time.Time, recs ...Erasure) {
	t.Helper()
	for i := range recs {
		recs[i].UpTo, recs[i].RecordedAt, recs[i].RequestedBy = now.Add(-time.Hour), now.Add(-time.Hour), "ticket-1"
	}
	writeRecords(t, s, false, recs...)
}

// A record kept forever for what its mark covers in the input topic gets
// the life of its other copies once every partition's log start offset has
// reached the mark: its record row and its index cell carry it, in the
// hour it expires; the never-expiring cell goes. Until then, or when the
// offsets cannot be read, or when its life is still forever, it stays. A
// record without a mark, or already finite, is none of Retire's business;
// one whose new life has passed leaves the records in force at once.
func TestRetire(t *testing.T) {
	s := indexedLedger(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	clicks := &Mark{Topic: "clicks", Ends: []int64{5, 3}}
	foreverRecords(t, s, now,
		Erasure{Tenant: "acme", User: "u1", Below: clicks},
		Erasure{Tenant: "initech", User: "u2", Below: clicks},
		Erasure{Tenant: "acme", User: "by-time"},
		Erasure{Tenant: "globex", User: "u3", Below: &Mark{Topic: "other", Ends: []int64{1}}})
	starts := map[string][]int64{"clicks": {5, 2}}
	logStarts := func(_ context.Context, topic string) ([]int64, string, error) {
		if st, ok := starts[topic]; ok {
			return st, "", nil
		}
		return nil, "", errors.New("unknown topic")
	}
	// initech's life has passed already: its record leaves at once.
	lives := map[string]time.Time{"acme": now.Add(90 * time.Minute), "initech": now.Add(-time.Minute), "globex": now.Add(time.Hour)}
	life := func(tenant string, upTo, recorded time.Time) time.Time {
		if !recorded.Equal(now.Add(-time.Hour)) || !upTo.Equal(now.Add(-time.Hour)) {
			t.Errorf("life asked for a record of %s recorded %s, up to %s", tenant, recorded, upTo)
		}
		return lives[tenant]
	}

	// Partition 1 still holds offset 2, below the mark's 3: nothing goes.
	done, err := s.Retire(ctx, now, logStarts, life)
	if err != nil || done.Records != 0 || done.Kept != 3 || len(done.Unread) != 1 {
		t.Fatalf("before the log start passed the mark: %+v, %v", done, err)
	}
	starts["clicks"] = []int64{7, 3}
	if done, err = s.Retire(ctx, now, logStarts, life); err != nil || done.Records != 2 || done.Kept != 1 {
		t.Fatalf("past the mark: %+v, %v", done, err)
	}

	recs, _, err := s.Load(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	expires := map[string]time.Time{}
	for _, r := range recs {
		expires[r.User] = r.Expires
	}
	if len(recs) != 3 || !expires["u1"].Equal(now.Add(90*time.Minute)) || !expires["by-time"].IsZero() || !expires["u3"].IsZero() {
		t.Errorf("records in force after: %+v", recs)
	}
	in, err := s.loadInForce(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if e := in.l.users["acme"]["u1"]; e.expires != now.Add(90*time.Minute).UnixMilli() || e.below == nil {
		t.Errorf("u1 in the index: %+v, want its mark, expiring in 90 minutes", e)
	}
	if _, ok := in.l.users["initech"]["u2"]; ok {
		t.Error("u2, whose life has passed, is still in force in the index")
	}
	left, err := s.foreverMarked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].user != "u3" {
		t.Errorf("never-expiring marked cells left: %+v, want u3's alone", left)
	}
	if !slices.ContainsFunc(recs, func(r Erasure) bool { return r.User == "u1" && r.Below != nil && r.RequestedBy == "ticket-1" }) {
		t.Errorf("u1's record lost a cell: %+v", recs)
	}
}

// A retired record lives no less than its own forget gave it
// (AtLeastUntil: its backups' keep, its tenant's TTL then), whatever the
// life the retiring forget works out from its own settings: an erasure
// recorded with 30 days of backups is not cut to a later forget's
// dead-letter keep, and a restore of a backup taken before it stays
// erased. A record whose own floor is earlier, or that states none (an
// earlier release's), takes the retiring forget's life.
func TestRetireKeepsARecordsOwnLife(t *testing.T) {
	s := indexedLedger(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	clicks := &Mark{Topic: "clicks", Ends: []int64{1}}
	backups := now.Add(30 * 24 * time.Hour)
	foreverRecords(t, s, now,
		Erasure{Tenant: "acme", User: "backed-up", Below: clicks, AtLeastUntil: backups},
		Erasure{Tenant: "acme", User: "short", Below: clicks, AtLeastUntil: now.Add(time.Minute)},
		Erasure{Tenant: "acme", User: "unstated", Below: clicks})
	life := now.Add(90 * time.Minute)
	done, err := s.Retire(ctx, now, func(context.Context, string) ([]int64, string, error) { return []int64{1}, "", nil },
		func(string, time.Time, time.Time) time.Time { return life })
	if err != nil || done.Records != 3 {
		t.Fatalf("retire: %+v, %v", done, err)
	}
	recs, _, err := s.Load(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{"backed-up": backups, "short": life, "unstated": life}
	for _, r := range recs {
		if !r.Expires.Equal(want[r.User]) {
			t.Errorf("%s's retired record expires at %s, want %s", r.User, r.Expires, want[r.User])
		}
	}
	in, err := s.loadInForce(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if e := in.l.users["acme"]["backed-up"]; e.expires != backups.UnixMilli() {
		t.Errorf("backed-up in the index expires at %d, want %d", e.expires, backups.UnixMilli())
	}
	if len(recs) != 3 {
		t.Errorf("%d records in force, want 3", len(recs))
	}
}

// A worker that has held a record forever takes its retired life at its
// next read of the records in force: it no longer holds everything it held
// (a life could then never shorten), only what its journal reads added
// lately, whose index cells it may have read too early.
func TestRereadTakesTheRetiredLife(t *testing.T) {
	s := indexedLedger(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	foreverRecords(t, s, now, Erasure{Tenant: "acme", User: "u1", Below: &Mark{Topic: "clicks", Ends: []int64{1}}})
	w := watchAt(s, &now)
	w.rereadEvery = time.Minute
	if err := w.Start(ctx); err != nil || w.Current().users["acme"]["u1"].expires != forever {
		t.Fatalf("start: %v, %+v", err, w.Current().users["acme"]["u1"])
	}
	retired := now.Add(2 * time.Hour)
	done, err := s.Retire(ctx, now, func(context.Context, string) ([]int64, string, error) { return []int64{1}, "", nil },
		func(string, time.Time, time.Time) time.Time { return retired })
	if err != nil || done.Records != 1 {
		t.Fatalf("retire: %+v, %v", done, err)
	}
	// A journal read, then the reread a minute on.
	for range 13 {
		now = now.Add(5 * time.Second)
		if err := w.load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if e := w.Current().users["acme"]["u1"]; e.expires != retired.UnixMilli() {
		t.Errorf("after the reread, u1 expires at %d, want %d (retired)", e.expires, retired.UnixMilli())
	}
}

// A record whose journal row a worker has read, but whose index cell a
// reread finds not yet written (forget writes the cell just after the
// row), stays in force through the reread: the watch keeps what its journal
// reads added in the last two periods. A record that never gets its index
// cell (a forget that failed between the two, and deleted nothing) is let
// go two rereads after the journal reads stop reading its row (they read
// the last JournalMargin and a reread period).
func TestRereadKeepsWhatTheJournalJustRead(t *testing.T) {
	s := indexedLedger(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	w := watchAt(s, &now)
	w.rereadEvery = time.Minute
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := Erasure{Tenant: "acme", User: "u1", UpTo: now, RecordedAt: now, RequestedBy: "ticket-1"}
	keys, muts, err := Rows(r, now)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the record row and the journal row; no index cell
		if err := s.tbl.Apply(ctx, keys[i], muts[i]); err != nil {
			t.Fatal(err)
		}
	}
	step := func(n int) {
		for range n {
			now = now.Add(5 * time.Second)
			if err := w.load(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	step(1)
	if !erasedAt(w.Current(), r) {
		t.Fatal("the journal read did not put the record in force")
	}
	step(11) // the reread, a minute on
	w.mu.Lock()
	readAt := w.readAt
	w.mu.Unlock()
	if !readAt.Equal(now) {
		t.Fatalf("the last load at %s was no reread (the last at %s)", now, readAt)
	}
	if !erasedAt(w.Current(), r) {
		t.Error("a reread dropped a record the journal had just read")
	}
	step(12 * 9) // the journal reads pass its row 6 minutes on; two rereads after that
	if erasedAt(w.Current(), r) {
		t.Error("a record without an index cell is still held 10 minutes on")
	}
}

// A journal row lives a day at most, whatever its record's life: a record
// kept forever, then retired, leaves no journal row behind it. The row
// says when its record expires, and a journal read holds it that long.
func TestJournalRowsLiveADay(t *testing.T) {
	s := indexedLedger(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	s.clock = func() time.Time { return now }
	soon := now.Add(2 * time.Hour)
	for _, r := range []Erasure{{Tenant: "acme", User: "forever", UpTo: now, RecordedAt: now}, {Tenant: "acme", User: "soon", UpTo: now, RecordedAt: now, Expires: soon}} {
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	entries, _, _, _, err := s.loadSince(ctx, now.Add(-time.Minute), now)
	if err != nil || len(entries) != 2 {
		t.Fatalf("journal: %v %+v", err, entries)
	}
	for _, e := range entries {
		want := map[string]int64{"forever": forever, "soon": soon.UnixMilli()}[e.user]
		if e.expires != want {
			t.Errorf("%s: the journal says it expires at %d, want %d", e.user, e.expires, want)
		}
	}
	dayOn := bigtable.Time(now.Add(JournalLife))
	err = s.tbl.ReadRows(ctx, bigtable.PrefixRange(journalPrefix), func(row bigtable.Row) bool {
		for _, it := range row[Family] {
			if it.Timestamp > dayOn {
				t.Errorf("journal cell %s of %s lives past a day: %s", it.Column, row.Key(), it.Timestamp.Time())
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A mark of another incarnation of the topic is never retired: the log
// start offsets read are another log's. One of the incarnation read is.
func TestRetireKeepsAnotherIncarnation(t *testing.T) {
	s := indexedLedger(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	foreverRecords(t, s, now,
		Erasure{Tenant: "acme", User: "old", Below: &Mark{Topic: "clicks", TopicID: "AAAAAAAAAAAAAAAAAAAAAA", Ends: []int64{1}}},
		Erasure{Tenant: "acme", User: "now", Below: &Mark{Topic: "clicks", TopicID: "BBBBBBBBBBBBBBBBBBBBBB", Ends: []int64{1}}})
	done, err := s.Retire(ctx, now, func(context.Context, string) ([]int64, string, error) {
		return []int64{5}, "BBBBBBBBBBBBBBBBBBBBBB", nil
	},
		func(string, time.Time, time.Time) time.Time { return now.Add(time.Hour) })
	if err != nil || done.Records != 1 || done.Kept != 1 {
		t.Fatalf("retire: %+v, %v; want the current incarnation's retired, the other's kept", done, err)
	}
	left, err := s.foreverMarked(ctx)
	if err != nil || len(left) != 1 || left[0].user != "old" {
		t.Errorf("never-expiring left: %+v, %v", left, err)
	}
}
