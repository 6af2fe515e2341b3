package deadletter

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// syncBuffer is a log that a writer's goroutines write and a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A dead-letter topic gets 3 replicas where the cluster has them, and as
// many as there are brokers where it has fewer; the flag wins.
func TestShapeReplicasCappedAtTheBrokers(t *testing.T) {
	brokers := func(n int) *kafka.MetadataResponse {
		return &kafka.MetadataResponse{Brokers: make([]kafka.Broker, n)}
	}
	for _, c := range []struct {
		flag, brokers, want int
	}{
		{0, 1, 1}, {0, 2, 2}, {0, 3, 3}, {0, 9, 3},
		{0, 0, -1}, // no broker listed: the broker's default
		{2, 9, 2}, {5, 3, 5},
	} {
		d := &Writer{topics: Topics{Partitions: 4, ReplicationFactor: c.flag}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		parts, rf := d.shape(t.Context(), brokers(c.brokers))
		if parts != 4 || rf != c.want {
			t.Errorf("--dlq-replication-factor %d on %d brokers: %d partitions, replication %d; want 4, %d", c.flag, c.brokers, parts, rf, c.want)
		}
	}
}

// An existing topic is measured against the shape, and only a shortfall
// is reported: more partitions or replicas than asked is no problem.
func TestCheckShapeReportsShortfalls(t *testing.T) {
	topic := func(name string, parts, replicas int) kafka.Topic {
		tp := kafka.Topic{Name: name}
		for range parts {
			tp.Partitions = append(tp.Partitions, kafka.Partition{Replicas: make([]kafka.Broker, replicas)})
		}
		return tp
	}
	md := &kafka.MetadataResponse{Topics: []kafka.Topic{topic("a", 2, 1), topic("b", 8, 3), topic("c", 4, 2)}}
	rs := []TopicRetention{{Topic: "a"}, {Topic: "b"}, {Topic: "c"}, {Topic: "missing"}}
	d := &Writer{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.checkShape(md, rs, nil, 4, 3)
	want := []string{"2 partitions, fewer than 4 and replication factor 1, less than 3", "", "replication factor 2, less than 3", ""}
	for i, r := range rs {
		if r.ShortOf != want[i] {
			t.Errorf("%s: short of %q, want %q", r.Topic, r.ShortOf, want[i])
		}
	}
	if rs[0].Partitions != 2 || rs[0].Replicas != 1 {
		t.Errorf("a: %d partitions, %d replicas; want 2, 1", rs[0].Partitions, rs[0].Replicas)
	}
}

// A dead-letter topic whose records are stamped by their producer
// (CreateTime, Kafka's default, with after.max.ms unbounded) can be frozen:
// one letter stamped ten years ahead keeps its segment, and every later
// letter, ten years. It keeps records forever in the worker's eyes: its
// letters keep no payload, and the shortfall is logged once, with the fix,
// and shown in /status until fixed. The topics the worker creates are
// stamped by the broker (LogAppendTime), and fall short of nothing.
func TestTopicStampedByItsProducersIsAShortfall(t *testing.T) {
	testenv.BrokerVersionMatters(t, "message.timestamp.type and the timestamp bounds the broker applies")
	brokers := testenv.Kafka(t)
	frozen := testenv.Name("stamped")
	testenv.CreateTopicWith(t, brokers, frozen, 1, testenv.AnyTimeAhead(map[string]string{"retention.ms": "3600000", "segment.ms": "300000"}))
	var logs syncBuffer
	made := frozen + ".1h"
	d, err := NewWriter(brokers, Topics{Base: frozen, Retention: time.Hour, Classes: []time.Duration{time.Hour}, ReplicationFactor: 1}, kafkaconn.Security{}, nil,
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for range 2 {
		if _, err := d.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	rs := d.Topics()
	const short = "message.timestamp.type CreateTime, not LogAppendTime"
	if len(rs) != 2 || rs[0].Topic != frozen || rs[0].ShortOf != short || rs[0].Keeps != 0 {
		t.Fatalf("%s: short of %q, keeps %s; want %q and forever", frozen, rs[0].ShortOf, rs[0].Keeps, short)
	}
	if rs[1].Topic != made || rs[1].Stamping.Type != "LogAppendTime" || rs[1].ShortOf != "" || rs[1].Keeps <= time.Hour {
		t.Errorf("%s: stamped %q, short of %q, keeps %s; want LogAppendTime, bounded", made, rs[1].Stamping.Type, rs[1].ShortOf, rs[1].Keeps)
	}
	if topic, payload := place(rs, time.Now(), time.Now().Add(365*24*time.Hour)); topic != made || !payload {
		t.Errorf("a letter of a year placed in %s (payload %t), want %s with its payload", topic, payload, made)
	}
	rs[1].Keeps = 0
	if _, payload := place(rs, time.Now(), time.Now().Add(365*24*time.Hour)); payload {
		t.Error("the topic its producers stamp took a letter's payload")
	}
	fix := "--entity-name " + frozen + " --add-config message.timestamp.type=LogAppendTime"
	if n := strings.Count(logs.String(), fix); n != 1 {
		t.Errorf("the fix logged %d times over two checks, want once:\n%s", n, logs.String())
	}
}
