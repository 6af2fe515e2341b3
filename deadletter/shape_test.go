package deadletter

import (
	"io"
	"log/slog"
	"testing"

	"github.com/segmentio/kafka-go"
)

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
