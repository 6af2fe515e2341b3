package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// A worker asked to stop while the erasure ledger cannot be read keeps
// reading it through the drain: once the ledger answers, the writes it
// held go out, and the worker ends within --drain-timeout, every event
// written and committed. The ledger's refresh stopped with SIGTERM, so a
// drain begun with a stale ledger could never write, and ended at its
// deadline with exit status 1 (found by the retention schedules: a
// restart just as a ledger outage ended).
func TestDrainWaitsOutALedgerOutage(t *testing.T) {
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	e := newEnv(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--erasure-refresh", "200ms", "--write-timeout", "2s", "--drain-timeout", "15s")
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-1", TenantID: "acme", UserID: "u-1"}.bytes())
	e.waitCommitted(t, 30*time.Second)

	proxy.SetReadRowsFault(e.table+"-erasures", status.Error(codes.Unavailable, "injected: the ledger cannot answer"))
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "erasure ledger refresh failed"), "the ledger's refresh has not failed yet"
	})
	// The ledger is stale: e-2's write waits.
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-2", TenantID: "acme", UserID: "u-2"}.bytes())
	time.Sleep(time.Second)
	if rows := e.rows(t); len(rows) != 1 {
		t.Fatalf("%d rows while the ledger is stale, want e-1's alone", len(rows))
	}
	stopped := make(chan error, 1)
	began := time.Now()
	go func() { stopped <- stop() }()
	time.Sleep(2 * time.Second)
	proxy.SetReadRowsFault("", nil)
	if err := <-stopped; err != nil {
		t.Fatalf("stopped %s after SIGTERM with %v, want a clean drain once the ledger answered", time.Since(began).Round(time.Millisecond), err)
	}
	if rows := e.rows(t); len(rows) != 2 {
		t.Errorf("%d rows after the drain, want e-1's and e-2's", len(rows))
	}
	e.waitCommitted(t, 5*time.Second)
}
