package erasure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Records that never expire past the first CompactAbove are held as a
// filter: a user it names is not known until looked up, and once looked
// up is erased exactly as the exact ledger erases (by time, and by the
// mark of its input topic); a user it does not name is known at once, and
// not erased. A dead letter of a user not yet looked up keeps no payload.
func TestCompactHoldsRecordsKeptForever(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	upTo := now.Add(-time.Hour)
	const users = 40
	var recs []Erasure
	for i := range users {
		r := Erasure{Tenant: "acme", User: fmt.Sprintf("u-%d", i), UpTo: upTo, RecordedAt: now, RequestedBy: "t"}
		if i%2 == 1 {
			r.Below = &Mark{Topic: "clicks", Ends: []int64{100}}
		}
		recs = append(recs, r)
	}
	recs = append(recs, Erasure{Tenant: "acme", User: "u-expiring", UpTo: upTo, RecordedAt: now, Expires: now.Add(time.Hour)})
	w, _ := compactWatch(t, 2, now, recs...)
	l := w.Current()
	if got := l.compact.len(); got != users-2 {
		t.Fatalf("records held compact: %d, want %d (all kept forever but the first two)", got, users-2)
	}
	if l.Len() != users+1 {
		t.Errorf("Len %d, want %d", l.Len(), users+1)
	}
	if st := w.Status(); st.CompactUsers != users-2 || st.ErasedUsers != users+1 {
		t.Errorf("status: %d compact of %d erased users, want %d of %d", st.CompactUsers, st.ErasedUsers, users-2, users+1)
	}
	before, after := upTo.UnixMilli(), now.UnixMilli()
	unknown := 0
	for i := range users {
		u := fmt.Sprintf("u-%d", i)
		if !l.Known("acme", u) {
			unknown++
			if l.Erased("acme", u, before, Position{}) {
				t.Errorf("%s erased before it was looked up (the decision must ask Known first)", u)
			}
			if got := l.Letter(Subject{Tenant: "acme", User: u, UserRead: true, Millis: after}); got != LetterWithoutPayload {
				t.Errorf("a letter of %s, not looked up: %v, want without payload", u, got)
			}
			if err := l.Resolve(ctx, "acme", u); err != nil {
				t.Fatal(err)
			}
		}
		if !l.Erased("acme", u, before, Position{}) {
			t.Errorf("%s's event at erased_up_to not erased", u)
		}
		marked := l.Erased("acme", u, after, Position{Topic: "clicks", Offset: 99})
		if marked != (i%2 == 1) {
			t.Errorf("%s's event after erased_up_to, below its mark: erased %v, want %v", u, marked, i%2 == 1)
		}
		if l.Erased("acme", u, after, Position{Topic: "clicks", Offset: 100}) {
			t.Errorf("%s's event after erased_up_to and past the mark erased", u)
		}
	}
	if unknown != users-2 {
		t.Errorf("users not known before a lookup: %d, want the %d held compact", unknown, users-2)
	}
	// Others: known at once but for the filter's false positives, which a
	// lookup finds not erased.
	const others = 20_000
	positives := 0
	for i := range others {
		u := fmt.Sprintf("other-%d", i)
		if !l.Known("acme", u) {
			positives++
			if err := l.Resolve(ctx, "acme", u); err != nil {
				t.Fatal(err)
			}
		}
		if l.Erased("acme", u, before, Position{}) {
			t.Fatalf("%s, never erased, is", u)
		}
	}
	if positives > others/50 {
		t.Errorf("the filter named %d of %d users it does not hold, more than 2%%", positives, others)
	}
	if !l.Covers("acme") || l.Covers("globex") {
		t.Errorf("Covers: acme %v globex %v, want true false", l.Covers("acme"), l.Covers("globex"))
	}
	t.Logf("false positives: %d of %d", positives, others)
}

// A lookup the ledger table cannot answer is tried again until it can:
// the record waits, it is never taken as not erased.
func TestCompactLookupWaitsForTheTable(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	w, drop := compactWatch(t, 1, now, Erasure{Tenant: "acme", User: "u-1", UpTo: now, RecordedAt: now}, Erasure{Tenant: "acme", User: "u-2", UpTo: now, RecordedAt: now})
	l := w.Current()
	u := "u-1"
	if l.Known("acme", u) {
		u = "u-2"
	}
	drop()
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := l.Resolve(sctx, "acme", u); err == nil || l.Known("acme", u) {
		t.Fatalf("a lookup without the table: %v, known %v; want it to wait until its context ends", err, l.Known("acme", u))
	}
}

// compactWatch puts recs into a new ledger table, indexes them as worker
// setup does, and starts a watch holding records kept forever exactly up
// to above; drop deletes the table under it.
func compactWatch(t *testing.T, above int, now time.Time, recs ...Erasure) (w *Watch, drop func()) {
	t.Helper()
	dc, ac := testenv.Clients(t)
	ctx := context.Background()
	name := testenv.Name("ledger")
	createLedger(t, ac, name)
	s := NewStore(dc, name)
	s.CompactAbove = above
	for _, r := range recs {
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Index(ctx, now); err != nil {
		t.Fatal(err)
	}
	w = NewWatch(s, time.Minute, slog.New(slog.DiscardHandler))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return w, func() {
		if err := ac.DeleteTable(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
}

// The filter names every key added, across the filters it grows, and
// about 1 in 150 of the others at 12 bits a key.
func TestBloom(t *testing.T) {
	c := newCompact(1000, nil)
	const n = 100_000
	for i := range n {
		c.add("t", fmt.Sprint(i))
	}
	if len(c.filters) < 2 {
		t.Errorf("%d filters for %d keys of a first sized for 65,536", len(c.filters), n)
	}
	for i := range n {
		if !c.may("t", fmt.Sprint(i)) {
			t.Fatalf("key %d added and not named", i)
		}
	}
	fp := 0
	for i := range n {
		if c.may("t", fmt.Sprint("x", i)) {
			fp++
		}
	}
	if rate := float64(fp) / n; rate > 0.012 {
		t.Errorf("false positives %.4f, want at most 0.012", rate)
	}
	t.Logf("false positives: %d of %d", fp, n)
}

// BenchmarkCompact is the hot path's question to a ledger holding ten
// million records kept forever compact: an event of a user the filter
// does not name (every event but those of erased users and about 1 in
// 150 others), which Decide asks Known, then Erased.
func BenchmarkCompact(b *testing.B) {
	const n = 10_000_000
	c := newCompact(n, nil)
	for i := range n {
		c.add(fmt.Sprintf("tenant-%04d", i%1000), fmt.Sprintf("user-%09d", i))
	}
	l := &Ledger{users: map[string]map[string]erased{}, compact: c}
	var words int
	for _, f := range c.filters {
		words += len(f.words)
	}
	at := time.Now().UnixMilli()
	for b.Loop() {
		if !l.Known("tenant-0242", "user-999999999") || l.Erased("tenant-0242", "user-999999999", at, Position{}) {
			b.Fatal("wrong answer")
		}
	}
	b.ReportMetric(float64(words*8)/n, "filter_B/record")
}

// A row decided before its user was erased, whose write stalls across
// two rereads of the records in force, is rechecked before it is sent
// (Watch.Admits): after the rereads the record is held compact and its
// answer is gone, so the recheck looks the user up and withdraws the row.
// A recheck the ledger table cannot answer holds the write, neither
// written nor withdrawn, and says so: /status, the counters, and /readyz
// past LookupPatience.
func TestAdmitsLooksUpUsersHeldCompact(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	first := Erasure{Tenant: "acme", User: "u-first", UpTo: now, RecordedAt: now}
	w, drop := compactWatch(t, 1, now, first)
	// Users whose index cells come after u-first's: past the one record
	// held exactly, a reread holds them compact.
	var late []string
	for i := 0; len(late) < 2; i++ {
		u := fmt.Sprintf("u-%d", i)
		if indexKey(never, "acme", u, now.UnixMilli()) > indexKey(never, "acme", first.User, now.UnixMilli()) {
			late = append(late, u)
		}
	}
	dc, ac := testenv.Clients(t)
	events := sink.Target(testenv.Table(t, ac, dc, 48*time.Hour))
	cfg := sink.DefaultWriterConfig()
	cfg.InitialBackoff, cfg.MaxBackoff, cfg.Gate = 10*time.Millisecond, 50*time.Millisecond, watchGate{w}
	sw, err := sink.NewWriter(dc, events, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// Rows decided now, before their users are erased.
	gen := w.Generation()
	row := func(user string) sink.Row {
		return sink.Row{Key: rowkey.Key("acme", user, "e1", now.Add(-time.Hour).UnixMilli()), Timestamp: now.UnixMicro(), Value: []byte("v"), Gen: gen}
	}
	for _, u := range late {
		if !w.Current().Known("acme", u) || w.Current().Erased("acme", u, now.Add(-time.Hour).UnixMilli(), Position{}) {
			t.Fatalf("%s known %v, erased before its record", u, w.Current().Known("acme", u))
		}
		if err := w.store.Put(ctx, Erasure{Tenant: "acme", User: u, UpTo: now, RecordedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		w.mu.Lock()
		w.rereadAt = time.Time{}
		w.mu.Unlock()
		w.refresh(ctx)
	}
	if st := w.Status(); st.CompactUsers != 2 || st.Error != "" {
		t.Fatalf("after two rereads: %+v, want the two late users held compact", st)
	}
	for _, u := range late {
		if w.Current().Known("acme", u) {
			t.Fatalf("%s known after the rereads: the recheck would not need to look it up", u)
		}
	}
	rows := []sink.Row{row(late[0]), row("u-never-erased")}
	res, err := sw.Write(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0], sink.ErrWithdrawn) || res[1] != nil {
		t.Fatalf("results %v, want the erased user's row withdrawn and the other written", res)
	}
	if row, err := dc.Open(events.Table).ReadRow(ctx, rows[0].Key); err != nil || len(row) != 0 {
		t.Fatalf("the erased user's row: %v %v, want none", row, err)
	}

	// The ledger table gone: the recheck of late[1] cannot be answered.
	drop()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	res, err = sw.Write(wctx, []sink.Row{row(late[1])})
	if err == nil || errors.Is(res[0], sink.ErrWithdrawn) {
		t.Fatalf("a recheck without the ledger table: %v, %v; want the write held until its context ends", res, err)
	}
	if row, err := dc.Open(events.Table).ReadRow(ctx, row(late[1]).Key); err != nil || len(row) != 0 {
		t.Fatalf("the row held: %v %v, want none", row, err)
	}
	st := w.Status()
	if st.LookupsFailingSince == nil || !strings.Contains(st.LookupError, "does not exist") || w.store.lookups.failed.Load() == 0 {
		t.Errorf("status while lookups fail: since %v, error %q, %d failed", st.LookupsFailingSince, st.LookupError, w.store.lookups.failed.Load())
	}
	if err := w.Problem(); err != nil {
		t.Errorf("ready within LookupPatience: %v", err)
	}
	w.store.lookups.now = func() time.Time { return time.Now().Add(LookupPatience + time.Second) }
	if err := w.Problem(); err == nil || !strings.Contains(err.Error(), "have failed since") {
		t.Errorf("not ready past LookupPatience: %v", err)
	}
}

// watchGate is w as the writer's gate, as the worker wires it.
type watchGate struct{ *Watch }

func (g watchGate) Admits(ctx context.Context, key string, at sink.Source) (bool, error) {
	return g.Watch.Admits(ctx, key, Position{Topic: at.Topic, TopicID: at.TopicID, Partition: at.Partition, Offset: at.Offset})
}
