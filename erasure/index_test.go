package erasure

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// writeRecords writes records as forget does, in bulk: each record's rows,
// its journal row keyed by its RecordedAt (the history a test stands in
// for), and, unless legacy (a release before the expiry index), its index
// row.
func writeRecords(t testing.TB, s *Store, legacy bool, recs ...Erasure) {
	t.Helper()
	var keys []string
	var muts []*bigtable.Mutation
	flush := func() {
		if errs, err := s.tbl.ApplyBulk(context.Background(), keys, muts); err != nil || errs != nil {
			t.Fatal(err, errs)
		}
		keys, muts = keys[:0], muts[:0]
	}
	for _, r := range recs {
		k, m, err := Rows(r, r.RecordedAt)
		if err != nil {
			t.Fatal(err)
		}
		if legacy {
			// No index row, and a journal row that does not say it has one.
			k, m = k[:2], m[:2]
			m[1].DeleteCellsInColumn(Family, colHasIndex)
		}
		keys, muts = append(keys, k...), append(muts, m...)
		if len(keys) >= 3000 {
			flush()
		}
	}
	if len(keys) > 0 {
		flush()
	}
}

// indexedLedger creates a ledger table as worker setup does, with its
// index marker, and returns its store.
func indexedLedger(t testing.TB) *Store {
	t.Helper()
	dc, ac := testenv.Clients(t)
	name := testenv.Name("ledger")
	createLedger(t, ac, name)
	s := NewStore(dc, name)
	if n, already, err := s.Index(context.Background(), time.Now()); err != nil || n != 0 || already {
		t.Fatalf("index an empty ledger: %d, %t, %v", n, already, err)
	}
	return s
}

// history is n records that expired before at (n < 1,380: before at's
// hour), as three years of erasures leave them, then the records in force
// at at: inForce that expire later, and forever that never do.
func history(at time.Time, n, inForce, forever int) []Erasure {
	var recs []Erasure
	add := func(user string, recorded, expires time.Time) {
		recs = append(recs, Erasure{Tenant: fmt.Sprintf("t%d", len(recs)%7), User: user, UpTo: recorded.Add(time.Second),
			RecordedAt: recorded, Expires: expires, RequestedBy: "ticket"})
	}
	for i := range n {
		// Recorded two days before at and expired a day later, over
		// hours before at's (GC leaves them when at lies ahead of the
		// real clock).
		recorded := at.Add(-48*time.Hour + time.Duration(i)*time.Minute)
		add(fmt.Sprintf("gone-%d", i), recorded, recorded.Add(24*time.Hour))
	}
	for i := range inForce {
		add(fmt.Sprintf("held-%d", i), at.Add(-time.Duration(inForce-i)*time.Minute), at.Add(time.Duration(i+1)*time.Hour))
	}
	for i := range forever {
		add(fmt.Sprintf("kept-%d", i), at.Add(-time.Duration(forever-i)*time.Hour), time.Time{})
	}
	return recs
}

// watchAt is a watch of s whose clock reads *now.
func watchAt(s *Store, now *time.Time) *Watch {
	w := NewWatch(s, 5*time.Second, slog.New(slog.DiscardHandler))
	w.now = func() time.Time { return *now }
	return w
}

func (w *Watch) rows() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastRows
}

func erasedAt(l *Ledger, r Erasure) bool {
	return l.Erased(r.Tenant, r.User, r.UpTo.UnixMilli(), Position{})
}

// A worker starting reads the records in force, not the ledger's history:
// 300 records that expired are left in the table (GC is lazy) and none is
// read; the 4 in force, 1 of them forever, are read and obeyed.
func TestStartReadsOnlyTheRecordsInForce(t *testing.T) {
	s := indexedLedger(t)
	// A day ahead of the real clock, so that GC keeps the records this
	// worker's clock has seen expire.
	now := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Millisecond)
	recs := history(now, 300, 3, 1)
	writeRecords(t, s, false, recs...)
	w := watchAt(s, &now)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := w.Current()
	if l.Len() != 4 || w.rows() != 4 || !w.Status().Indexed {
		t.Errorf("start: %d users from %d rows (%s), want 4 from 4", l.Len(), w.rows(), w.Status().LastRead)
	}
	for i, r := range recs {
		if want := i >= 300; erasedAt(l, r) != want {
			t.Errorf("%s (expires %s): erased %t, want %t", r.User, r.Expires, !want, want)
		}
	}
	// The first refresh reads the journal of the last minutes: a few
	// rows, not the history.
	now = now.Add(5 * time.Second)
	if err := w.load(context.Background()); err != nil || w.rows() > 4 {
		t.Errorf("first refresh: %v, %d rows (%s)", err, w.rows(), w.Status().LastRead)
	}
}

// Refreshes read the journal alone, hour after hour: never every record
// (the release before read them all every 12th refresh). Once an hour the
// records in force are read again, those alone.
func TestRefreshesNeverReadEveryRecord(t *testing.T) {
	s := indexedLedger(t)
	now := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Millisecond)
	writeRecords(t, s, false, history(now, 300, 3, 1)...)
	w := watchAt(s, &now)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	most := 0
	var r Erasure
	for i := range 800 { // 66 minutes of 5 s refreshes
		now = now.Add(5 * time.Second)
		if i == 100 {
			// A forget records a user meanwhile.
			r = Erasure{Tenant: "t1", User: "new", UpTo: now, RecordedAt: now, Expires: now.Add(2 * time.Hour)}
			writeRecords(t, s, false, r)
		}
		if err := w.load(context.Background()); err != nil {
			t.Fatal(err)
		}
		most = max(most, w.rows())
	}
	if most > 5 {
		t.Errorf("a refresh read %d rows: more than the records in force", most)
	}
	// In force: the record written meanwhile, two of the three held
	// (the first expired an hour in) and the one kept forever.
	if l := w.Current(); !erasedAt(l, r) || l.Len() != 4 {
		t.Errorf("the record written meanwhile: %d users", l.Len())
	}
}

// Records written by a release before the expiry index have no index row.
// A worker starting on such a ledger reads every record, and obeys them;
// worker setup indexes them (once: run again it reads nothing), and a
// worker starting after reads them from the index.
func TestRecordsOfAnEarlierReleaseAreObeyed(t *testing.T) {
	dc, ac := testenv.Clients(t)
	ctx := context.Background()
	name := testenv.Name("ledger")
	createLedger(t, ac, name)
	s := NewStore(dc, name)
	now := time.Now().UTC().Truncate(time.Millisecond)
	recs := history(now, 0, 3, 1)
	for i := range recs { // recorded before the margin of a journal read
		recs[i].RecordedAt, recs[i].UpTo = recs[i].RecordedAt.Add(-10*time.Minute), recs[i].UpTo.Add(-10*time.Minute)
	}
	old := recs[0]
	old.Below, old.RecordedAt = &Mark{Topic: "clicks", Ends: []int64{7}}, old.RecordedAt.Add(time.Millisecond)
	recs = append(recs, old) // a user's second record, with a mark
	writeRecords(t, s, true, recs...)

	w := watchAt(s, &now)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Status(); st.Indexed || w.Current().Len() != 4 || !strings.Contains(st.LastRead, "every record") {
		t.Errorf("start on a ledger not indexed: %+v, %d users", st, w.Current().Len())
	}
	n, already, err := s.Index(ctx, now)
	if err != nil || n != 5 || already {
		t.Fatalf("index: %d, %t, %v", n, already, err)
	}
	if n, already, err := s.Index(ctx, now); err != nil || n != 0 || !already {
		t.Errorf("index again: %d, %t, %v", n, already, err)
	}
	w = watchAt(s, &now)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	l := w.Current()
	if st := w.Status(); !st.Indexed || l.Len() != 4 || w.rows() != 5 {
		t.Errorf("start on the indexed ledger: %+v, %d users from %d records", st, l.Len(), w.rows())
	}
	for _, r := range recs {
		if !erasedAt(l, r) {
			t.Errorf("%s is not erased after the index", r.User)
		}
	}
	if !l.Erased(old.Tenant, old.User, now.Add(time.Hour).UnixMilli(), Position{Topic: "clicks", Offset: 6}) {
		t.Error("the index lost a mark")
	}

	// The earlier release's forget, run once more after the index: a
	// worker starting then misses the record (what remains until setup
	// runs again), and the next index finds it in the journal, alone.
	late := Erasure{Tenant: "acme", User: "late", UpTo: now, RecordedAt: now.Add(time.Second), Expires: now.Add(time.Hour), Below: old.Below}
	writeRecords(t, s, true, late)
	now = now.Add(2 * time.Second)
	if n, already, err := s.Index(ctx, now); err != nil || n != 1 || !already {
		t.Errorf("index after the earlier release's forget: %d, %t, %v", n, already, err)
	}
	w = watchAt(s, &now)
	if err := w.Start(ctx); err != nil || !erasedAt(w.Current(), late) || w.Current().Len() != 5 ||
		!w.Current().Erased("acme", "late", now.Add(time.Hour).UnixMilli(), Position{Topic: "clicks", Offset: 6}) {
		t.Errorf("start after: %v, %d users", err, w.Current().Len())
	}
}

// A record leaves memory once it has expired, at the next read of the
// records in force; until then it is obeyed; a record that never expires
// stays.
func TestExpiredRecordsLeaveMemory(t *testing.T) {
	s := indexedLedger(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	recs := history(now, 0, 2, 1) // expiring in 1 h and 2 h, and never
	writeRecords(t, s, false, recs...)
	w := watchAt(s, &now)
	w.rereadEvery = 10 * time.Minute
	if err := w.Start(context.Background()); err != nil || w.Current().Len() != 3 {
		t.Fatalf("start: %v, %d users", err, w.Current().Len())
	}
	gen := w.Generation()
	// Past the first's expiry: each load a refresh (5 s) later.
	for now.Before(recs[0].Expires.Add(11 * time.Minute)) {
		now = now.Add(5 * time.Second)
		if err := w.load(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	l := w.Current()
	if l.Len() != 2 || erasedAt(l, recs[0]) || !erasedAt(l, recs[1]) || !erasedAt(l, recs[2]) {
		t.Errorf("an hour and 11 minutes on: %d users; expired erased %t", l.Len(), erasedAt(l, recs[0]))
	}
	if w.Generation() != gen {
		t.Errorf("a record expiring moved the generation from %d to %d", gen, w.Generation())
	}
}

// What remains of clocks that disagree: a record whose journal row
// carries a time further behind the worker's clock than the margin (forget
// refuses a clock more than ClockTolerance off Bigtable's; the worker's may
// run ahead) is missed by the journal reads, and read at the next read of
// the records in force, RereadEvery later at the latest.
func TestRereadFindsWhatTheJournalMissed(t *testing.T) {
	s := indexedLedger(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	writeRecords(t, s, false, history(now, 0, 1, 0)...)
	w := watchAt(s, &now)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	lagging := now.Add(-JournalMargin - time.Hour)
	r := Erasure{Tenant: "acme", User: "late", UpTo: lagging, RecordedAt: lagging, Expires: now.Add(24 * time.Hour)}
	writeRecords(t, s, false, r)
	for range 3 {
		now = now.Add(5 * time.Second)
		if err := w.load(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if erasedAt(w.Current(), r) {
		t.Fatal("the journal read a row further behind than the margin: the test shows nothing")
	}
	now = now.Add(RereadEvery)
	if err := w.load(context.Background()); err != nil || !erasedAt(w.Current(), r) {
		t.Errorf("the reread missed it too: %v (%s)", err, w.Status().LastRead)
	}
}

// A worker whose clock runs ahead of the journal's misses nothing between
// rereads, up to RereadEvery ahead: its journal reads start from the
// latest time the journal has shown it, not from its own clock. Ten
// minutes ahead, with and without a record read before (a quiet ledger,
// then a busy one); the build before read from its own clock less
// JournalMargin and saw these records only at the next reread.
//
// A row stamped a year ahead (a forget host's clock wrong, an earlier
// release's) must not hold the cursor at the worker's own clock: it is
// there from the start.
func TestJournalReadsFollowTheJournalsClock(t *testing.T) {
	s := indexedLedger(t)
	real := time.Now().UTC().Truncate(time.Millisecond)
	future := real.AddDate(1, 0, 0)
	writeRecords(t, s, false, Erasure{Tenant: "acme", User: "from-the-future", UpTo: future, RecordedAt: future, Expires: future.Add(24 * time.Hour)})
	ahead := real.Add(10 * time.Minute)
	w := watchAt(s, &ahead)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, quiet := range []bool{true, false} {
		real = real.Add(time.Second)
		r := Erasure{Tenant: "acme", User: fmt.Sprintf("user-%d", i), UpTo: real, RecordedAt: real, Expires: real.Add(24 * time.Hour)}
		writeRecords(t, s, false, r)
		ahead = ahead.Add(5 * time.Second)
		if err := w.load(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !erasedAt(w.Current(), r) {
			t.Errorf("a worker 10 minutes ahead missed a record written now (quiet ledger %t): %s", quiet, w.Status().LastRead)
		}
	}
}

// The cursor: the earlier of the last load and the journal's newest row,
// never earlier than a reread interval before the last load.
func TestJournalFrom(t *testing.T) {
	loaded := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		newest time.Time
		want   time.Time
	}{
		{time.Time{}, loaded.Add(-RereadEvery - JournalMargin)},                            // nothing read yet
		{loaded.Add(-time.Hour), loaded.Add(-RereadEvery - JournalMargin)},                 // quiet
		{loaded.Add(-2 * time.Minute), loaded.Add(-2*time.Minute - JournalMargin)},         // busy, or the worker ahead
		{loaded.Add(time.Minute), loaded.Add(-JournalMargin)},                              // the worker behind
		{loaded.Add(-RereadEvery - time.Minute), loaded.Add(-RereadEvery - JournalMargin)}, // ahead by more: the reread's
	} {
		if got := journalFrom(loaded, c.newest, RereadEvery); !got.Equal(c.want) {
			t.Errorf("newest %s: from %s, want %s", c.newest, got, c.want)
		}
	}
}

// Two records of a user in the index that expire at the same time (two
// that never do) share a row, each in its own cell: the narrower, later
// one does not overwrite the wider.
func TestIndexKeepsEveryRecordOfAUser(t *testing.T) {
	s := indexedLedger(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := s.Put(ctx, Erasure{Tenant: "acme", User: "u2", UpTo: now, RecordedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, Erasure{Tenant: "acme", User: "u2", UpTo: now.Add(-24 * time.Hour), RecordedAt: now.Add(time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.loadInForce(ctx, now)
	if err != nil || got.rows != 2 || !got.l.Erased("acme", "u2", now.UnixMilli(), Position{}) {
		t.Errorf("index: %v, %d records", err, got.rows)
	}
}

// BenchmarkRefreshWithNewErasures is what a refresh does with a forget of
// ten users at the working set of ten million erasures over three years
// (150,000 in force over 1,000 tenants): the new ledger, sharing the maps
// of the tenants the forget does not touch (the journal read itself is a
// few rows).
func BenchmarkRefreshWithNewErasures(b *testing.B) {
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	l := &Ledger{}
	for i := range 150_000 {
		l.add(fmt.Sprintf("tenant-%04d", i%1000), fmt.Sprintf("user-%09d", i), erased{upTo: 1, expires: forever})
	}
	var entries []entry
	for i := range 10 {
		entries = append(entries, entry{tenant: fmt.Sprintf("tenant-%04d", i*97), user: fmt.Sprintf("new-%d", i), erased: erased{upTo: 1, expires: forever}})
	}
	for b.Loop() {
		if next, grew := l.with(entries, now); !grew || next.Len() != 150_010 {
			b.Fatal("the forget did not reach the ledger")
		}
	}
}
