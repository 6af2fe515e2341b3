package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// A replay without --ttl-from (let through on purpose with
// --ttl-from-change, as a writer of an earlier release would do unasked)
// writes a second version of each row that gave its own TTL, living its
// tenant's TTL: worker audit counts the rows that outlive the TTL their
// event asked for, names them by a hash (never a user), and exits 1; the
// text says which settings the table's rows were written with; worker
// retime puts the rows back at their own TTL while their ttl cell is
// there, and the audit is clean again.
func TestAuditFindsRowsOutlivingTheirOwnTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fmt.Sprintf(ownTTLTenants, "default-expiration"))
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, _ := e.startWorker(t, "--ttl-from", "json:ttl")
	occurred := time.Now().Add(-5 * time.Minute).Truncate(time.Millisecond).UTC()
	event := func(id, tenant, user, ttl string) []byte {
		v := map[string]any{"event_id": id, "tenant_id": tenant, "user_id": user, "occurred_at": occurred.Format(time.RFC3339Nano)}
		if ttl != "" {
			v["ttl"] = ttl
		}
		b, _ := json.Marshal(v)
		return b
	}
	testenv.Produce(t, e.brokers, e.topic,
		event("a-1", "acme", "secret-user-1", "30m"), event("a-2", "acme", "secret-user-2", "30m"), event("a-3", "acme", "secret-user-3", "2h"), // the replay's 1h is shorter: another finding (it breaks the rule), not this one
		event("a-4", "acme", "secret-user-4", ""), // its tenant's TTL: the replay writes the same cells
		event("g-1", "globex", "secret-user-5", "1d"))
	e.waitRows(t, 5, 30*time.Second)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	audit := func(want map[string]int64) (string, error) {
		t.Helper()
		out, err := e.cmd(t, "audit", "--format", "json")
		var rep struct {
			Tenants []struct {
				Tenant string `json:"tenant"`
				Longer int64  `json:"longer_than_own_ttl"`
			} `json:"tenants"`
			Samples []string `json:"longer_than_own_ttl_samples"`
		}
		if jerr := json.Unmarshal([]byte(out[:strings.IndexByte(out, '\n')+1]), &rep); jerr != nil {
			t.Fatalf("audit: %v %v\n%s", err, jerr, out)
		}
		for _, ta := range rep.Tenants {
			if ta.Longer != want[ta.Tenant] {
				t.Errorf("audit: %d rows of %s longer than their own TTL, want %d\n%s", ta.Longer, ta.Tenant, want[ta.Tenant], out)
			}
		}
		for _, s := range rep.Samples {
			if strings.Contains(s, "secret-user") || !strings.HasPrefix(s, "row ") {
				t.Errorf("audit sample %q: want a row named by a hash, never by its user", s)
			}
		}
		if n := want["acme"] + want["globex"]; int64(len(rep.Samples)) != n {
			t.Errorf("audit: %d samples, want %d", len(rep.Samples), n)
		}
		return out, err
	}
	if out, err := audit(map[string]int64{}); err != nil {
		t.Fatalf("audit before the replay: %v\n%s", err, out)
	}

	stop, _ = e.startWorker(t, "--group", testenv.Name("replay"), "--ttl-from-change")
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		two := 0
		for _, r := range e.rows(t) {
			if len(cellsOf(r)["event"]) == 2 {
				two++
			}
		}
		return two == 4, fmt.Sprintf("%d rows with a second version, want 4", two)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := audit(map[string]int64{"acme": 2, "globex": 1}); codeOf(err) != 1 {
		t.Errorf("audit after the replay: exit %d, want 1\n%s", codeOf(err), out)
	}
	out, _ := e.cmd(t, "audit")
	if !strings.Contains(out, "LONGER THAN OWN TTL") || !strings.Contains(out, `rows written with --ttl-from "json:ttl" since`) ||
		!strings.Contains(out, "rows written with no --ttl-from since") || strings.Contains(out, "secret-user") {
		t.Errorf("audit, text:\n%s", out)
	}

	if out, err := e.cmd(t, "retime", "--tenant", "acme,globex", "--passes", "1"); err != nil {
		t.Fatalf("retime: %v\n%s", err, out)
	}
	if out, err := audit(map[string]int64{}); err != nil {
		t.Errorf("audit after retime: %v\n%s", err, out)
	}
}
