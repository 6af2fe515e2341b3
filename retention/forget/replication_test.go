package forget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// twoClusters stands for a replicated instance on the one-cluster
// emulator: rows a worker wrote through the other cluster reach this one
// (the emulator's table) only when forget waits for replication, as they
// would by then at the latest; every call is recorded with what the
// tables held.
type twoClusters struct {
	t      *testing.T
	dc     *bigtable.Client
	events string
	ledger *erasure.Store
	delay  time.Duration // how long the ledger takes to reach every cluster

	// inFlight is a row a worker that has not read the record yet writes
	// through the other cluster once it is recorded: it reaches this
	// cluster only by the next wait for the events' table.
	inFlight string

	mu      sync.Mutex
	pending []string // row keys written through the other cluster, not here yet
	calls   []waitCall
}

type waitCall struct {
	table        string
	rows         int  // the user's rows here when the wait returned
	recorded     bool // the ledger erases the user
	start, ended time.Time
}

func (w waitCall) String() string {
	return fmt.Sprintf("{%s rows %d recorded %t}", w.table, w.rows, w.recorded)
}

func (c *twoClusters) Wait(ctx context.Context, table string) error {
	start := time.Now()
	if table == c.ledger.Table() {
		time.Sleep(c.delay)
	} else {
		c.replicate()
	}
	l, err := c.ledger.LoadUsers(ctx, "acme", []string{"u-1"}, time.Now())
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.Erased("acme", "u-1", 0, erasure.Position{}) && c.inFlight != "" {
		c.pending, c.inFlight = append(c.pending, c.inFlight), ""
	}
	c.calls = append(c.calls, waitCall{table: table, rows: userRows(c.t, c.dc, c.events), recorded: l.Erased("acme", "u-1", 0, erasure.Position{}), start: start, ended: time.Now()})
	return nil
}

// replicate applies here the rows written through the other cluster.
func (c *twoClusters) replicate() {
	c.mu.Lock()
	keys := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, k := range keys {
		putRow(c.t, c.dc, c.events, k)
	}
}

func putRow(t *testing.T, dc *bigtable.Client, table, key string) {
	m := bigtable.NewMutation()
	m.Set("c", "event", bigtable.Now(), []byte("{}"))
	if err := dc.Open(table).Apply(context.Background(), key, m); err != nil {
		t.Error(err)
	}
}

func userRows(t *testing.T, dc *bigtable.Client, table string) int {
	n := 0
	err := dc.Open(table).ReadRows(context.Background(), bigtable.PrefixRange(rowkey.UserPrefix("acme", "u-1")), func(bigtable.Row) bool { n++; return true })
	if err != nil {
		t.Error(err)
	}
	return n
}

func replicationSetup(t *testing.T) (*bigtable.Client, string, *erasure.Store) {
	dc, ac := testenv.Clients(t)
	events := testenv.Table(t, ac, dc, 48*time.Hour).Table
	ledger := testenv.Name("erasures")
	ctx := context.Background()
	if err := ac.CreateTable(ctx, ledger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.DeleteTable(context.Background(), ledger) })
	if err := ac.CreateColumnFamilyWithConfig(ctx, ledger, erasure.Family, bigtable.Family{GCPolicy: bigtable.MaxAgePolicy(erasure.GCMaxAge)}); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	for i, id := range []string{"e-1", "e-2"} {
		putRow(t, dc, events, rowkey.Key("acme", "u-1", id, past.UnixMilli()+int64(i)))
	}
	return dc, events, erasure.NewStore(dc, ledger)
}

func replicationRequest(rp Replication) Request {
	return Request{Tenant: "acme", Users: []string{"u-1"}, RequestedBy: "ticket-1", Now: time.Now().UTC().Truncate(time.Millisecond),
		MaxClockSkew: time.Second, SecondPassAfter: 300 * time.Millisecond, Table: "events", LongestTTL: time.Hour, Replication: rp}
}

// On a replicated instance, forget waits for consistency: both tables
// before counting, the ledger after recording (the bound counts from when
// every cluster has the record: the second pass comes at least
// --second-pass-after after that wait), the table before the second pass
// (a row a worker wrote through another cluster before its bound is then
// here to be deleted) and after it (the deletions everywhere); the receipt
// says so. Once replication has caught up, no row of the user is left.
func TestForgetWaitsForReplication(t *testing.T) {
	dc, events, store := replicationSetup(t)
	c := &twoClusters{t: t, dc: dc, events: events, ledger: store, delay: 200 * time.Millisecond,
		inFlight: rowkey.Key("acme", "u-1", "in-flight", time.Now().Add(-time.Minute).UnixMilli())}
	r := replicationRequest(Replication{Wait: c.Wait, Table: events})
	rc, err := Forget(context.Background(), dc.Open(events), store, r, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c.replicate() // whatever forget did not wait for arrives now
	if n := userRows(t, dc, events); n != 0 {
		t.Errorf("%d rows of the user once replication caught up, want 0 (rows per pass %v)", n, rc.Users[0].RowsPerPass)
	}
	calls := c.calls
	var ledgerDone time.Time
	var beforeSecond bool
	for i, call := range calls {
		switch {
		case i < 2 && call.recorded:
			t.Errorf("call %d (%s), before counting: the user is recorded already", i, call.table)
		case call.table == store.Table() && call.recorded && ledgerDone.IsZero():
			ledgerDone = call.ended
			if call.rows == 0 {
				t.Errorf("the ledger waited for after the rows were deleted: the bound would count from its write")
			}
		case call.table == events && !ledgerDone.IsZero() && i < len(calls)-1:
			beforeSecond = true
			if wait := call.start.Sub(ledgerDone); wait < r.SecondPassAfter {
				t.Errorf("the second pass came %s after the ledger reached every cluster, want at least %s", wait, r.SecondPassAfter)
			}
		}
	}
	if len(calls) < 5 || ledgerDone.IsZero() || !beforeSecond {
		t.Errorf("waits %v: want both tables before counting, the ledger after recording, the table before and after the second pass", calls)
	}
	if last := calls[len(calls)-1]; last.table != events || last.rows != 0 {
		t.Errorf("the last wait %v: want the table's, after the second pass", last)
	}
	if !rc.Replication.Waited || !strings.Contains(rc.Replication.Summary, "waited for consistency") {
		t.Errorf("receipt: %+v", rc.Replication)
	}
}

// Without the right to wait, forget stops before it records or deletes
// anything, and names both ways out; without waiting (single cluster
// stated), the receipt says why.
func TestForgetReplicationRefusedOrStated(t *testing.T) {
	dc, events, store := replicationSetup(t)
	denied := func(context.Context, string) error {
		return status.Error(codes.PermissionDenied, "bigtable.tables.generateConsistencyToken")
	}
	_, err := Forget(context.Background(), dc.Open(events), store, replicationRequest(Replication{Wait: denied, Table: events}), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "nothing was recorded") || !strings.Contains(err.Error(), "--replication single-cluster") {
		t.Errorf("forget without the right to wait: %v", err)
	}
	l, lerr := store.LoadUsers(context.Background(), "acme", []string{"u-1"}, time.Now())
	if lerr != nil || l.Len() != 0 || userRows(t, dc, events) != 2 {
		t.Errorf("after the refusal: ledger %v (%v), %d rows; want empty and 2", l, lerr, userRows(t, dc, events))
	}
	rc, err := Forget(context.Background(), dc.Open(events), store, replicationRequest(Replication{Statement: "single-cluster profile: x", Table: events}), slog.New(slog.DiscardHandler))
	if err != nil || rc.Replication.Waited || rc.Replication.Summary != "single-cluster profile: x" || userRows(t, dc, events) != 0 {
		t.Errorf("single cluster: %v, %+v", err, rc.Replication)
	}
}

// forget's app profile, when it can be read, must route to one cluster.
func TestSingleCluster(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	single := &adminpb.AppProfile{RoutingPolicy: &adminpb.AppProfile_SingleClusterRouting_{SingleClusterRouting: &adminpb.AppProfile_SingleClusterRouting{ClusterId: "c1"}}}
	anyOf := func(ids ...string) *adminpb.AppProfile {
		return &adminpb.AppProfile{RoutingPolicy: &adminpb.AppProfile_MultiClusterRoutingUseAny_{MultiClusterRoutingUseAny: &adminpb.AppProfile_MultiClusterRoutingUseAny{ClusterIds: ids}}}
	}
	if s, err := SingleCluster("p", single, nil, log); err != nil || !strings.Contains(s, "single-cluster profile") || !strings.Contains(s, "c1") {
		t.Errorf("single-cluster routing: %q, %v", s, err)
	}
	if s, err := SingleCluster("", anyOf("c2"), nil, log); err != nil || !strings.Contains(s, "default") || !strings.Contains(s, "c2") {
		t.Errorf("multi-cluster routing to one cluster: %q, %v", s, err)
	}
	for _, ap := range []*adminpb.AppProfile{anyOf(), anyOf("c1", "c2")} {
		if _, err := SingleCluster("p", ap, nil, log); err == nil || !strings.Contains(err.Error(), "--replication wait") {
			t.Errorf("multi-cluster routing %v: %v, want a refusal", ap, err)
		}
	}
	if s, err := SingleCluster("p", nil, errors.New("unimplemented"), log); err != nil || !strings.HasPrefix(s, "not checked: ") {
		t.Errorf("profile unreadable: %q, %v", s, err)
	}
}

// forget refuses to record when its clock lies more than the tolerance
// from Bigtable's, behind (the workers would read its journal rows late)
// or ahead (it would erase the users' events to come): nothing is
// recorded or deleted, and the error says why. Within it, forget runs.
func TestForgetRefusesAClockOffBigtables(t *testing.T) {
	dc, events, store := replicationSetup(t)
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		off  time.Duration
		word string
	}{{-erasure.ClockTolerance - time.Minute, "behind"}, {erasure.ClockTolerance + time.Minute, "ahead of"}} {
		r := replicationRequest(Replication{Statement: "single-cluster profile: x", Table: events})
		r.Now = r.Now.Add(c.off)
		_, err := Forget(context.Background(), dc.Open(events), store, r, log)
		if err == nil || !strings.Contains(err.Error(), c.word+" Bigtable's") || !strings.Contains(err.Error(), "nothing was recorded") {
			t.Errorf("a clock %s off: %v", c.off, err)
		}
		if l, err := store.LoadUsers(context.Background(), "acme", []string{"u-1"}, time.Now()); err != nil || l.Len() != 0 || userRows(t, dc, events) != 2 {
			t.Errorf("after the refusal: ledger of %d users (%v), %d rows; want none and 2", l.Len(), err, userRows(t, dc, events))
		}
	}
	r := replicationRequest(Replication{Statement: "single-cluster profile: x", Table: events})
	r.Now = r.Now.Add(-erasure.ClockTolerance / 2)
	if _, err := Forget(context.Background(), dc.Open(events), store, r, log); err != nil || userRows(t, dc, events) != 0 {
		t.Errorf("a clock within the tolerance: %v", err)
	}
}
