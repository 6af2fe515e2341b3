package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// An erased user held by the ledger's compact part (records kept forever,
// past the first the worker holds exactly) is looked up before its event
// is decided, and the lookup holds its partition alone: while the ledger
// table cannot answer, the other partition's events are written and
// committed, and nothing of the waiting partition is written, committed
// or taken as not erased. Once the table answers, the erased user's
// events are not written and the rest are.
func TestCompactErasureLookupHoldsOnlyItsPartition(t *testing.T) {
	// The ledger stops answering through a proxy that refuses its reads,
	// its records intact: a ledger deleted and made again would answer
	// "not erased" between the table's return and its records'.
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	dc, ac := testenv.Clients(t)
	ctx := context.Background()
	name := testenv.Name("ledger")
	createLedgerTable(t, ac, name)
	store := erasure.NewStore(dc, name)
	store.CompactAbove = 1
	store.LookupAttempt = 300 * time.Millisecond
	now := time.Now()
	var recs []erasure.Erasure
	for i := range 4 {
		recs = append(recs, erasure.Erasure{Tenant: "acme", User: fmt.Sprintf("gone-%d", i), UpTo: now.Add(time.Hour), RecordedAt: now})
	}
	for _, r := range recs {
		if err := store.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := store.Index(ctx, now); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.Buffer{}
	w := erasure.NewWatch(store, time.Minute, slog.New(slog.NewTextHandler(logs, nil)))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	gone := ""
	for _, r := range recs {
		if !w.Current().Known("acme", r.User) {
			gone = r.User
			break
		}
	}
	if gone == "" {
		t.Fatal("no erased user held compact")
	}
	proxy.SetReadRowsFault(name, status.Error(codes.Unavailable, "injected: the ledger table cannot answer"))
	ev := func(i int, user string) string {
		return fmt.Sprintf(`{"event_id":"e-%d","tenant_id":"acme","user_id":%q}`, i, user)
	}
	src := twoPartitions([]string{ev(0, gone), ev(1, "kept"), ev(2, gone)}, []string{ev(3, "kept"), ev(4, "other")})
	wr := &fakeWriter{}
	cfg := DefaultConfig()
	cfg.FlushInterval = 50 * time.Millisecond
	cfg.Erasures = w.Current
	stop, p := start(t, cfg, src, wr, &fakeDLQ{}, func() *tenants.Config { return testConfig(t) })
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		got := fmt.Sprint(wr.events())
		return got == "[e-3 e-4]", "rows " + got + ", want partition 1's [e-3 e-4]"
	})
	// The client retries an unavailable table in silence: the wait is
	// known once an attempt's deadline passes, and says so once, for as
	// long as it lasts.
	const failing, answering = "looking up erased users held compact fails", "lookups of erased users held compact answer again"
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		return logs.Count(failing) > 0, "no warning of the failing lookups"
	})
	time.Sleep(2 * store.LookupAttempt) // more attempts failing meanwhile
	if got := fmt.Sprint(wr.events()); got != "[e-3 e-4]" || src.committed() != -1 {
		t.Fatalf("while the lookup cannot be answered: rows %s committed %d, want [e-3 e-4] and nothing of partition 0", got, src.committed())
	}
	if n, st := logs.Count(failing), w.Status(); n != 1 || st.LookupsFailingSince == nil {
		t.Errorf("while the lookup cannot be answered: %d warnings, failing since %v; want 1 and a time", n, st.LookupsFailingSince)
	}
	proxy.SetReadRowsFault("", nil)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		return src.committed() == 5, fmt.Sprintf("committed %d, want 5", src.committed())
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n, m, st := logs.Count(failing), logs.Count(answering), w.Status(); n != 1 || m != 1 || st.LookupsFailingSince != nil {
		t.Errorf("once answered: %d warnings, %d recoveries, failing since %v; want 1, 1, none", n, m, st.LookupsFailingSince)
	}
	if got := fmt.Sprint(wr.events()); got != "[e-1 e-3 e-4]" {
		t.Errorf("rows %s, want [e-1 e-3 e-4] (%s's e-0 and e-2 erased)", got, gone)
	}
	if n := p.Stats().Tenant("acme").Erased.Load(); n != 2 {
		t.Errorf("acme erased %d, want 2", n)
	}
}

func createLedgerTable(t *testing.T, ac *bigtable.AdminClient, name string) {
	t.Helper()
	ctx := context.Background()
	if err := ac.CreateTable(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.DeleteTable(context.Background(), name) })
	if err := ac.CreateColumnFamilyWithConfig(ctx, name, erasure.Family, bigtable.Family{GCPolicy: bigtable.MaxAgePolicy(erasure.GCMaxAge)}); err != nil {
		t.Fatal(err)
	}
}
