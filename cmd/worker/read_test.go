package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

func TestReadCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	var values [][]byte
	for i, ago := range []time.Duration{30 * time.Minute, 20 * time.Minute, 10 * time.Minute} {
		values = append(values, click{EventID: fmt.Sprintf("r-%d", i), TenantID: "acme", UserID: "u-1", OccurredAt: now.Add(-ago).Format(time.RFC3339Nano)}.bytes())
	}
	values = append(values, click{EventID: "other-user", TenantID: "acme", UserID: "u-2", OccurredAt: now.Format(time.RFC3339Nano)}.bytes())
	stop, _ := e.startWorker(t)
	testenv.Produce(t, e.brokers, e.topic, values...)
	e.waitRows(t, len(values), 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	out, err := e.cmd(t, "read", "--tenant", "acme", "--user", "u-1", "--format", "json")
	if err != nil {
		t.Fatalf("read: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("read --user u-1: %d lines, want 3:\n%s", len(lines), out)
	}
	for i, line := range lines {
		var ev jsonEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		occurred := now.Add(-[]time.Duration{30 * time.Minute, 20 * time.Minute, 10 * time.Minute}[i])
		if ev.EventID != fmt.Sprintf("r-%d", i) || !ev.Expiry.Equal(occurred.Add(time.Hour)) || ev.Expired || ev.WrittenAt == nil || !strings.Contains(string(ev.Value), ev.EventID) {
			t.Errorf("line %d: %s; want r-%d expiring %s", i, line, i, occurred.Add(time.Hour))
		}
	}
	out, err = e.cmd(t, "read", "--tenant", "acme", "--since", "15m")
	if err != nil || strings.Count(out, "acme") != 2 || !strings.Contains(out, "r-2") || !strings.Contains(out, "other-user") || !strings.Contains(out, "(in 49m") {
		t.Errorf("read --since 15m: %v\n%s", err, out)
	}
}
