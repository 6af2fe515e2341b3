package deadletter

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A worker says each topic it can use and how long it keeps a letter, and
// warns of the tenants whose letters no topic can keep with their payload
// (their TTL ends before the shortest keep): a topic with a problem keeps
// nothing.
func TestLogTopics(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	rs := []TopicRetention{
		{Topic: "clicks.dlq", Retention: 24 * time.Hour, Keeps: 25 * time.Hour},
		{Topic: "clicks.dlq.1h", Retention: time.Hour, Keeps: 70 * time.Minute},
		{Topic: "clicks.dlq.1m", Problem: errors.New("denied")},
	}
	LogTopics(rs, map[string]time.Duration{"acme": time.Hour, "globex": 3 * 24 * time.Hour, "brief": 30 * time.Minute}, log)
	got := out.String()
	if strings.Count(got, `msg="dead-letter topic ready"`) != 2 || strings.Contains(got, "topic=clicks.dlq.1m") {
		t.Errorf("the ready topics, the one with a problem left out:\n%s", got)
	}
	if !strings.Contains(got, `tenants="acme 1h, brief 30m"`) || !strings.Contains(got, "count=2") || !strings.Contains(got, "shortest_keep=1h10m") {
		t.Errorf("the tenants whose letters keep no payload (their TTL under the shortest keep, 1h10m):\n%s", got)
	}
	out.Reset()
	LogTopics(rs[:1], map[string]time.Duration{"globex": 3 * 24 * time.Hour}, log)
	if strings.Contains(out.String(), "keep no payload") {
		t.Errorf("every tenant's letters keep their payload, yet:\n%s", out.String())
	}
}
