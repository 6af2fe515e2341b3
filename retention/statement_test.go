package retention

import (
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/expiry"
)

// statementFacts are a clean system's facts: an input topic keeping 30m,
// a dead-letter topic 1d, acme at 1h with min_ttl 10m and max_ttl 3h.
func statementFacts() Facts {
	p := &expiry.Policy{Strategy: expiry.DefaultExpiration, DefaultTTL: 2 * 24 * time.Hour,
		Tenants:       map[string]time.Duration{"acme": time.Hour},
		Bounds:        map[string]expiry.Bounds{"acme": {Min: 10 * time.Minute, Max: 3 * time.Hour}},
		DefaultBounds: expiry.Bounds{Max: 2 * 24 * time.Hour}}
	return Facts{Policy: p, UnlistedBound: p.DefaultTTL, Table: "clicks:c", FamilyRule: "max-age 2d", FamilyMaxAge: p.DefaultTTL, FamilyHasMaxAge: true,
		Input:              TopicKeep{Topic: "clicks", Keeps: 30 * time.Minute, Settings: "retention.ms 30m"},
		DeadLetters:        []TopicKeep{{Topic: "clicks.dlq", Keeps: 24 * time.Hour, Settings: "retention.ms 1d"}},
		RecordTimesBounded: true, RecordTimes: "bounded",
		Ledger: "clicks-erasures",
	}
}

func storeOf(t *testing.T, ts TenantStatement, prefix string) StoreLife {
	t.Helper()
	for _, s := range ts.Stores {
		if strings.HasPrefix(s.Store, prefix) {
			return s
		}
	}
	t.Fatalf("no store %q in %+v", prefix, ts.Stores)
	return StoreLife{}
}

// An event may ask for as little as its tenant's min_ttl (--ttl-from):
// the statement says so where it reasons about the shortest life, and an
// input topic that keeps records longer than that is a breach.
func TestStatementCountsMinTTL(t *testing.T) {
	f := statementFacts()
	st := StatementOf(f, []string{"acme"})
	if !st.Clean() {
		t.Fatalf("without --ttl-from, a 30m input topic under acme's 1h: %+v", st)
	}
	f.OwnTTLs = true
	st = StatementOf(f, []string{"acme"})
	acme := st.Tenants[0]
	if live := storeOf(t, acme, "table, live cells"); !strings.Contains(live.DecidedBy, "min_ttl 10m") {
		t.Errorf("live cells do not say an event may ask for min_ttl 10m: %q", live.DecidedBy)
	}
	in := storeOf(t, acme, "input topic clicks")
	if !strings.Contains(in.Breach, "min_ttl 10m") || !strings.Contains(in.Breach, "30m") {
		t.Errorf("input topic keeping 30m, acme's min_ttl 10m: breach %q", in.Breach)
	}
	f.Input.Keeps = 5 * time.Minute
	if st := StatementOf(f, []string{"acme"}); !st.Clean() {
		t.Errorf("an input topic keeping 5m under min_ttl 10m: %+v", st)
	}
}

// The erasure ledger is a store: its records keep the erased ids as long
// as forget's rule says, then until Bigtable collects them; forever is a
// breach.
func TestStatementIncludesTheLedger(t *testing.T) {
	f := statementFacts()
	st := StatementOf(f, []string{"acme", Unlisted})
	acme, unlisted := st.Tenants[0], st.Tenants[1]
	l := storeOf(t, acme, "erasure ledger clicks-erasures")
	// 1d (the dead-letter topic's keep), then Bigtable's GC lag.
	if l.Longest != "8d" || l.Breach != "" || !strings.Contains(l.DecidedBy, "forget") {
		t.Errorf("acme's ledger line: %+v", l)
	}
	if l := storeOf(t, unlisted, "erasure ledger clicks-erasures"); l.Longest != "9d" {
		t.Errorf("the unlisted tenants' ledger line (their 2d TTL): %+v", l)
	}
	f.DeadLetters[0].Keeps = Forever
	l = storeOf(t, StatementOf(f, []string{"acme"}).Tenants[0], "erasure ledger")
	if l.Longest != "forever" || !strings.Contains(l.Breach, "forever") {
		t.Errorf("a ledger whose records never expire: %+v", l)
	}
}
