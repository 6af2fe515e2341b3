package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/testkit/testenv"
)

func TestBadEventsGoToDeadLetterTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	bad := map[string]string{ // value -> text the reason must contain
		`not json`:                                                 "not a JSON object",
		`{"tenant_id":"acme"}`:                                     "event_id is missing",
		`{"event_id":"e#1","tenant_id":"acme"}`:                    "contains '#'",
		`{"event_id":"e","tenant_id":"acme","user_id":7}`:          "user_id must be a string",
		`{"event_id":"e","tenant_id":"acme","occurred_at":"noon"}`: `occurred_at "noon"`,
		"\x00\xff\xfe binary":                                      "not a JSON object",
		`{"event_id":"big","tenant_id":"acme","pad":"` + strings.Repeat("x", 2000) + `"}`: "more than the limit of 1024",
	}
	var values [][]byte
	good := 0
	for v := range bad {
		values = append(values, []byte(v))
		c := click{EventID: fmt.Sprintf("good-%d", good), TenantID: "acme", UserID: "u"}
		values = append(values, c.bytes())
		good++
	}
	stop, _ := e.startWorker(t, "--max-event-bytes", "1024")
	testenv.Produce(t, e.brokers, e.topic, values...)
	e.waitRows(t, good, 30*time.Second)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
	if n := len(e.rows(t)); n != good {
		t.Errorf("%d rows, want the %d good events", n, good)
	}
	dead := testenv.ReadAll(t, e.brokers, e.topic+".dlq", len(bad), 20*time.Second)
	if len(dead) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(bad))
	}
	for _, m := range dead {
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		want, ok := bad[string(m.Value)]
		if !ok {
			t.Errorf("dead letter with a value that was not sent bad: %q", m.Value)
			continue
		}
		if !strings.Contains(h[deadletter.HeaderReason], want) {
			t.Errorf("value %.30q: reason %q, want it to say %q", m.Value, h[deadletter.HeaderReason], want)
		}
		off, err := strconv.ParseInt(h[deadletter.HeaderSourceOffset], 10, 64)
		if h[deadletter.HeaderSourceTopic] != e.topic || h[deadletter.HeaderSourcePartition] == "" || err != nil || off < 0 {
			t.Errorf("source headers %v", h)
		}
	}
}

func TestStartupRefusesGCRuleMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	out, err := e.cmd(t, "run")
	if err == nil || !strings.Contains(err.Error(), "worker setup") {
		t.Fatalf("run before setup: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup"); err != nil || !strings.Contains(out, `"max-age 2d"`) {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	// The operator changes default_ttl in the file without running setup.
	e.writeTenants(t, strings.Replace(tenantsYAML, "default_ttl: 2d", "default_ttl: 3d", 1))
	_, err = e.cmd(t, "run")
	if err == nil || !strings.Contains(err.Error(), `"max-age 2d"`) || !strings.Contains(err.Error(), `"max-age 3d"`) {
		t.Fatalf("run with a mismatched rule: %v; want both rules named", err)
	}
	// Setup refuses to change the rule silently, and does it when asked.
	if out, err := e.cmd(t, "setup"); err == nil || !strings.Contains(err.Error(), "--update-gc-policy") {
		t.Fatalf("setup over another rule: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup", "--update-gc-policy"); err != nil || !strings.Contains(out, `from "max-age 2d" to "max-age 3d"`) {
		t.Fatalf("setup --update-gc-policy: %v\n%s", err, out)
	}
	// One-second strategy needs max-age 1s.
	e.writeTenants(t, "strategy: one-second\ndefault_ttl: 3d\n")
	if _, err := e.cmd(t, "run"); err == nil || !strings.Contains(err.Error(), `"max-age 1000000"`) && !strings.Contains(err.Error(), `"max-age 1s"`) {
		t.Fatalf("run one-second on a 3d family: %v", err)
	}
}

func TestBadTenantsFileFailsStartup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\ntenants:\n  acme: 0s\n")
	_, err := e.cmd(t, "run")
	if err == nil || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), `"0s"`) {
		t.Fatalf("bad tenants file: %v", err)
	}
}
