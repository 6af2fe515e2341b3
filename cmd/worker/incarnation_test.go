package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/testenv"
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

	c := &kafka.Client{Addr: kafka.TCP(e.brokers...), Timeout: 10 * time.Second, Transport: &kafka.Transport{}}
	defer c.Transport.(*kafka.Transport).CloseIdleConnections()
	if _, err := c.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{e.topic}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		res, err := c.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: e.topic, NumPartitions: partitions, ReplicationFactor: 1}}})
		if err == nil {
			err = res.Errors[e.topic]
		}
		return err == nil, fmt.Sprint(err)
	})
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
