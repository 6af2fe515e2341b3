package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Regression (the GC rule watched while running): the family's GC rule changed under a running
// worker (an operator ran `worker setup --update-gc-policy` with an edited
// tenants file before restarting the workers) was checked at start-up
// only, and the worker went on writing cells timed for the old rule, which
// the new one collects at the wrong time. Now, within
// --gc-rule-check-interval, writes wait (nothing written, nothing
// dead-lettered), /readyz names both rules, and once the rule is set back
// the waiting events are written.
func TestGCRuleChangedUnderTheWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--gc-rule-check-interval", "200ms")
	base := adminURL(t, logs)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	// globex's cells lie in the future: the narrower rule set below does not
	// collect this one while the test counts rows.
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "before", TenantID: "globex", OccurredAt: now}.bytes())
	e.waitRows(t, 1, 30*time.Second)

	ctx := context.Background()
	if err := e.ac.SetGCPolicy(ctx, e.table, "c", bigtable.MaxAgePolicy(time.Hour)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, `GC rule "max-age 1h", the configuration needs "max-age 2d"`), fmt.Sprintf("/readyz %d: %s", code, body)
	})
	testenv.Produce(t, e.brokers, e.topic,
		click{EventID: "during-1", TenantID: "acme", OccurredAt: now}.bytes(),
		click{EventID: "during-2", TenantID: "globex", OccurredAt: now}.bytes())
	// Long enough for the worker to fetch, batch and (wrongly) write them.
	time.Sleep(3 * time.Second)
	if n := len(e.rows(t)); n != 1 {
		t.Errorf("%d rows while the family's rule disagrees with the tenants file, want the 1 written before", n)
	}
	if dl := testenv.ReadAll(t, e.brokers, e.topic+".dlq", 1, 2*time.Second); len(dl) != 0 {
		t.Errorf("%d dead letters while writes were held", len(dl))
	}
	if !strings.Contains(logs.String(), "GC rule changed under the worker") {
		t.Errorf("no error logged:\n%s", logs)
	}

	if err := e.ac.SetGCPolicy(ctx, e.table, "c", bigtable.MaxAgePolicy(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.waitRows(t, 3, 30*time.Second)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == 200, fmt.Sprintf("/readyz %d: %s", code, body)
	})
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
}

// A rule that collects by age put on the record's family under a running
// worker (GC would delete the record within days) makes it unready within
// --gc-rule-check-interval, naming the rule and the fix, and logs it once;
// writes go on meanwhile (the events' cells do not depend on it); set back,
// the worker is ready again.
func TestRecordFamilyRuleChangedUnderTheWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--gc-rule-check-interval", "200ms")
	base := adminURL(t, logs)
	ctx := context.Background()
	if err := e.ac.SetGCPolicy(ctx, e.table, tablemeta.Family, bigtable.MaxAgePolicy(time.Hour)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "GC rule max-age 1h") && strings.Contains(body, "--update-gc-policy"), fmt.Sprintf("/readyz %d: %s", code, body)
	})
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "during", TenantID: "globex", OccurredAt: time.Now().UTC().Format(time.RFC3339Nano)}.bytes())
	e.waitRows(t, 1, 30*time.Second)
	if err := e.ac.SetGCPolicy(ctx, e.table, tablemeta.Family, tablemeta.GCRule); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == 200, fmt.Sprintf("/readyz %d: %s", code, body)
	})
	if n := strings.Count(logs.String(), "the table is not as the workers need it"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs)
	}
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
}
