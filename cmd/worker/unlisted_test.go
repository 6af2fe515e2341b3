package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A misspelt tenant id must not pass unnoticed under either policy:
// unlisted_tenants: default_ttl writes its events with the default TTL,
// dead-letter sets them aside (reason unlisted_tenant) and writes nothing;
// both count them in cellttl_events_unlisted_total, which carries no tenant
// label (a producer sending random ids must not grow the series), and /status
// names the most frequent ids, the misspelling first, ten at most.
func TestUnlistedTenants(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"default_ttl", "dead-letter"} {
		t.Run(policy, func(t *testing.T) { testUnlisted(t, policy) })
	}
}

func testUnlisted(t *testing.T, policy string) {
	e := newEnv(t, tenantsYAML+"unlisted_tenants: "+policy+"\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t)
	base := adminURL(t, logs)
	occurred := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond).UTC()
	at := occurred.Format(time.RFC3339Nano)
	// acmee 4, acme-corp 3 and eleven ids once each: thirteen unlisted ids,
	// more than /status names.
	var values [][]byte
	add := func(tenant string, n int) {
		for i := range n {
			values = append(values, click{EventID: fmt.Sprintf("%s-%d", tenant, i), TenantID: tenant, UserID: "u", OccurredAt: at}.bytes())
		}
	}
	add("acmee", 4)
	add("acme-corp", 3)
	for i := range 11 {
		add(fmt.Sprintf("x-%02d", i), 1)
	}
	const unlisted = 18
	add("acme", 2)
	testenv.Produce(t, e.brokers, e.topic, values...)
	e.waitCommitted(t, 30*time.Second)

	rows := e.rows(t)
	letters := testenv.ReadToEnd(t, e.brokers, e.topic+".dlq")
	switch policy {
	case "default_ttl":
		if len(rows) != unlisted+2 || len(letters) != 0 {
			t.Fatalf("%d rows and %d dead letters, want %d rows and none", len(rows), len(letters), unlisted+2)
		}
		for key, r := range rows {
			tenant := key[:strings.Index(key, "#")]
			ev := cellsOf(r)["event"]
			if want := wantTimestamp(tenant, occurred); len(ev) != 1 || int64(ev[0].Timestamp) != want {
				t.Errorf("row of %s: event cells %v, want one at %d", tenant, ev, want)
			}
		}
	case "dead-letter":
		if len(rows) != 2 || len(letters) != unlisted {
			t.Fatalf("%d rows and %d dead letters, want acme's 2 rows and %d letters", len(rows), len(letters), unlisted)
		}
		for _, m := range letters {
			if c := headerOf(m, deadletter.HeaderReasonClass); c != "unlisted_tenant" || headerOf(m, deadletter.HeaderTenant) == "" {
				t.Errorf("letter %q: reason class %q, tenant %q; want unlisted_tenant and its id", m.Value, c, headerOf(m, deadletter.HeaderTenant))
			}
		}
	}

	lettered := 0.0
	if policy == "dead-letter" {
		lettered = unlisted
	}
	var body string
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		_, body = testenv.MustGet(t, base+"/metrics")
		v, ok := metricValue(body, "cellttl_events_unlisted_total")
		if !ok || v != unlisted {
			return false, fmt.Sprintf("cellttl_events_unlisted_total %v (found %t), want %d", v, ok, unlisted)
		}
		if v, ok := metricValue(body, "cellttl_dead_letters_total", `reason="unlisted_tenant"`); !ok || v != lettered {
			return false, fmt.Sprintf(`cellttl_dead_letters_total{reason="unlisted_tenant"} %v (found %t), want %v`, v, ok, lettered)
		}
		return true, ""
	})
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "cellttl_events_unlisted_total") && strings.Contains(line, "cellttl_tenant=") {
			t.Errorf("cellttl_events_unlisted_total has a tenant label: %s", line)
		}
	}

	// The brief page counts them and names none: they are tenant ids.
	if _, brief := testenv.MustGet(t, base+"/status"); strings.Contains(brief, "acmee") || !strings.Contains(brief, fmt.Sprintf(`"total": %d`, unlisted)) {
		t.Errorf("brief /status names an unlisted id or misses the count:\n%s", brief)
	}
	code, page := testenv.MustGet(t, base+"/status?tenants=true")
	var st struct {
		Config struct {
			Unlisted string `json:"unlisted_tenants"`
		} `json:"config"`
		Unlisted struct {
			Total int64                    `json:"total"`
			Top   []pipeline.UnlistedCount `json:"top"`
		} `json:"unlisted"`
	}
	if err := json.Unmarshal([]byte(page), &st); err != nil || code != 200 {
		t.Fatalf("/status %d: %v\n%s", code, err, page)
	}
	// A misspelt tenant is named, with the tenant it lies near; a
	// producer's own id (an email, a user id) only by its length.
	want := []pipeline.UnlistedCount{{Tenant: "acmee", Near: "acme", Bytes: 5, Events: 4}, {Bytes: 9, Events: 3}}
	for range 8 {
		want = append(want, pipeline.UnlistedCount{Bytes: 4, Events: 1})
	}
	if st.Config.Unlisted != policy || st.Unlisted.Total != unlisted || fmt.Sprint(st.Unlisted.Top) != fmt.Sprint(want) {
		t.Errorf("/status: policy %q, unlisted %d, top %v; want %s, %d, %v", st.Config.Unlisted, st.Unlisted.Total, st.Unlisted.Top, policy, unlisted, want)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
