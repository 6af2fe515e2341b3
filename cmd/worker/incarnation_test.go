package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// An erasure's mark names the incarnation of the input topic its offsets
// are of (Kafka's topic id). The topic deleted and created again (or the
// mirror of a failover) counts its offsets anew: there the mark covers
// every record of the erased user while its record is in force, since
// offsets say nothing of which records were appended before the erasure.
// u-1's events stamped an hour ahead, at offsets past the old ends of the
// new topic, were written by a worker that compared offsets alone.
// Against the real broker and emulator.
func TestMarkCoversAnotherIncarnation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-0", TenantID: "acme", UserID: "u-1"}.bytes())
	out, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--allow-empty", "--requested-by", "ticket-3",
		"--second-pass-after", "10ms", "--format", "json")
	var rc struct {
		ErasedBelow struct {
			TopicID string `json:"topic_id"`
		} `json:"erased_below"`
		Bound string
	}
	if err != nil || json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &rc) != nil || len(rc.ErasedBelow.TopicID) != 22 || !strings.Contains(rc.Bound, rc.ErasedBelow.TopicID) {
		t.Fatalf("forget: %v: the receipt names no topic id\n%s", err, out)
	}

	testenv.RecreateTopic(t, e.brokers, e.topic, partitions, nil)
	ahead := time.Now().Add(time.Hour)
	var msgs []kafka.Message
	for i := range 8 {
		msgs = append(msgs, kafka.Message{Value: click{EventID: fmt.Sprintf("e-%d", i+1), TenantID: "acme", UserID: "u-1"}.bytes(), Time: ahead})
	}
	msgs = append(msgs, kafka.Message{Value: click{EventID: "e-other", TenantID: "acme", UserID: "u-2"}.bytes(), Time: ahead})
	testenv.ProduceMessages(t, e.brokers, e.topic, msgs...)

	stop, _ := e.startWorker(t, "--erasure-refresh", "200ms")
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rows := e.rows(t)
	for key := range rows {
		if strings.Contains(key, "#u-1#") {
			t.Errorf("u-1's event of the topic created again written: %s", key)
		}
	}
	if len(rows) != 1 {
		t.Errorf("%d rows, want u-2's alone", len(rows))
	}
}

// A letter names the incarnation of the input topic its record was read
// from (cellttl.source.topic_id), and worker redrive holds the record to
// an erasure's mark by that one, not by the incarnation it reads itself.
// newco/u-1's event, stamped half an hour ahead, is lettered (newco is
// unlisted); the topic is deleted and created again; u-1 is erased, the
// mark naming the new topic, empty; newco is listed and the letters
// redriven. The letter's offset lies past the new topic's ends, and its
// time past erased_up_to: compared by offsets, a redrive wrote it.
func TestRedriveHoldsALetterToItsIncarnation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	dlq := e.topic + ".letters"
	ahead := time.Now().Add(30 * time.Minute)
	testenv.ProduceMessages(t, e.brokers, e.topic, kafka.Message{Time: ahead,
		Value: click{EventID: "e-1", TenantID: "newco", UserID: "u-1", OccurredAt: ahead.UTC().Format(time.RFC3339Nano)}.bytes()})
	stop, _ := e.startWorker(t, "--dlq-topic", dlq)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	old, err := kafkaconn.TopicID(context.Background(), e.brokers, kafkaconn.Security{}, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	letters := testenv.ReadToEnd(t, e.brokers, dlq)
	if len(letters) != 1 || headerOf(letters[0], deadletter.HeaderSourceTopicID) != old {
		t.Fatalf("%d letters, the first naming incarnation %q; want one, naming %s", len(letters), headerOf(letters[0], deadletter.HeaderSourceTopicID), old)
	}

	testenv.RecreateTopic(t, e.brokers, e.topic, partitions, nil)
	if out, err := e.cmd(t, "forget", "--tenant", "newco", "--user", "u-1", "--allow-empty", "--requested-by", "ticket-7",
		"--second-pass-after", "10ms"); err != nil || strings.Contains(out, old) {
		t.Fatalf("forget on the topic created again: %v (its mark must name the new incarnation)\n%s", err, out)
	}
	e.writeTenants(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n  newco: 1h\n")
	if out, err := e.cmd(t, "redrive", "--brokers", strings.Join(e.brokers, ","), "--topic", e.topic, "--dlq-topic", dlq,
		"--apply", "--trust-unsigned-letters"); err != nil {
		t.Fatalf("redrive: %v\n%s", err, out)
	}
	for key := range e.rows(t) {
		t.Errorf("u-1's letter of the topic's earlier incarnation written by redrive after u-1's erasure: %s", key)
	}
}

// A worker that runs while its input topic is deleted and created again
// reads the topic's id again (every --dlq-check-interval) and takes the
// new one: it says so, and its letters name the new incarnation.
func TestWorkerFollowsTheTopicCreatedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	dlq := e.topic + ".letters"
	stop, logs := e.startWorker(t, "--dlq-topic", dlq, "--dlq-check-interval", "500ms")
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "joined consumer group"), "the worker has not joined its group"
	})
	testenv.RecreateTopic(t, e.brokers, e.topic, partitions, nil)
	now, err := kafkaconn.TopicID(context.Background(), e.brokers, kafkaconn.Security{}, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		// The periodic check's own line (the consumer says "created again"
		// too, when a fetch finds the topic gone): it moves the letters.
		return strings.Contains(logs.String(), "held to the new incarnation's marks") && strings.Contains(logs.String(), now), "the worker has not said it follows the new incarnation " + now
	})
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-1", TenantID: "newco", UserID: "u-1"}.bytes())
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		letters := testenv.ReadToEnd(t, e.brokers, dlq)
		return len(letters) == 1 && headerOf(letters[0], deadletter.HeaderSourceTopicID) == now, fmt.Sprintf("%d letters, want one naming %s", len(letters), now)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A topic deleted and created again under a running worker counts its
// offsets from 0. The worker's position in the old incarnation means
// nothing in the new one: read from there, the new topic's first records
// would never be written. Every event of the new incarnation has its row.
// Against the real broker and emulator.
func TestWorkerReadsTheTopicCreatedAgainFromItsStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, _ := e.startWorker(t, "--dlq-check-interval", "500ms")
	clicks := func(prefix string, n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = click{EventID: fmt.Sprintf("%s-%d", prefix, i), TenantID: "acme", UserID: "u-1"}.bytes()
		}
		return out
	}
	testenv.Produce(t, e.brokers, e.topic, clicks("old", 30*partitions)...)
	e.waitCommitted(t, 30*time.Second)

	testenv.RecreateTopic(t, e.brokers, e.topic, partitions, nil)
	const fresh = 90 * partitions // past the old incarnation's ends on every partition
	testenv.Produce(t, e.brokers, e.topic, clicks("new", fresh)...)
	testenv.Eventually(t, 60*time.Second, func() (bool, string) {
		written := 0
		for key := range e.rows(t) {
			if strings.Contains(key, "#new-") {
				written++
			}
		}
		return written == fresh, fmt.Sprintf("%d of the new incarnation's %d events written", written, fresh)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
