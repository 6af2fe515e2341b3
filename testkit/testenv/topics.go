package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/cellttl/cellttl/testkit/lab"
)

// This file holds the kit's Kafka topic helpers: create, alter and
// recreate a topic, produce to it, and read it and its group's offsets
// back.

// DeadLetterConfigs are what a test gives the dead-letter topics it makes
// before the worker starts: a retention short enough (30 minutes, with
// 2-minute segments) that dead letters of the tests' TTLs, an hour and
// more, keep their payload, which the tests read back; stamped by the
// broker (LogAppendTime), as the worker creates its own. A topic with the
// broker's defaults (7 days, 7-day segments, producers' timestamps
// unbounded) would get letters without it.
var DeadLetterConfigs = map[string]string{"retention.ms": "1800000", "segment.ms": "120000", "message.timestamp.type": "LogAppendTime"}

// AnyTimeAhead returns configs (a new map) with producers let to stamp
// records any time ahead (message.timestamp.after.max.ms unbounded):
// Kafka 3.x's default, which 4.0 bounded to an hour (KIP-1030). A test of
// what the worker does on such a topic says so, whichever broker runs.
// kfake knows no such setting: it is left out there.
func AnyTimeAhead(configs map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range configs {
		out[k] = v
	}
	if os.Getenv("KAFKA_BROKERS") != "" {
		out["message.timestamp.after.max.ms"] = "9223372036854775807"
	}
	return out
}

// CreateTopic creates a topic with partitions partitions.
func CreateTopic(t testing.TB, brokers []string, topic string, partitions int) {
	t.Helper()
	CreateTopicWith(t, brokers, topic, partitions, nil)
}

// CreateTopicWith creates a topic with partitions partitions and the given
// topic configs (max.message.bytes, ...), and waits for their leaders.
func CreateTopicWith(t testing.TB, brokers []string, topic string, partitions int, configs map[string]string) {
	t.Helper()
	if err := lab.CreateTopic(context.Background(), brokers, topic, partitions, configs); err != nil {
		t.Fatal(err)
	}
}

// RecreateTopic deletes topic and creates it again under its name, with
// partitions partitions and configs: a new incarnation, with a new id and
// offsets from 0. The broker refuses the name while the deletion is under
// way.
func RecreateTopic(t testing.TB, brokers []string, topic string, partitions int, configs map[string]string) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: tr}
	res, err := c.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{topic}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("delete %s: %v", topic, err)
	}
	Eventually(t, 30*time.Second, func() (bool, string) {
		err := lab.CreateTopic(context.Background(), brokers, topic, partitions, configs)
		return err == nil, fmt.Sprintf("create %s again: %v", topic, err)
	})
}

// AlterTopic replaces a topic's configs (AlterConfigs sets them all:
// any not given falls back to the broker's default), and waits until the
// broker answering DescribeConfigs reads them.
func AlterTopic(t testing.TB, brokers []string, topic string, configs map[string]string) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	var cs []kafka.AlterConfigRequestConfig
	for k, v := range configs {
		cs = append(cs, kafka.AlterConfigRequestConfig{Name: k, Value: v})
	}
	res, err := c.AlterConfigs(context.Background(), &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, Configs: cs}}})
	if err == nil {
		for _, e := range res.Errors {
			if e != nil {
				err = e
			}
		}
	}
	if err != nil {
		t.Fatalf("alter %s: %v", topic, err)
	}
	// The controller has taken the change; the broker that answers
	// DescribeConfigs learns it from the metadata log a moment later (a
	// worker started at once read the old value, under load).
	names := make([]string, 0, len(configs))
	for k := range configs {
		names = append(names, k)
	}
	Eventually(t, 10*time.Second, func() (bool, string) {
		res, err := c.DescribeConfigs(context.Background(), &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: names}}})
		if err != nil || len(res.Resources) != 1 || res.Resources[0].Error != nil {
			return false, fmt.Sprintf("configs of %s: %v", topic, err)
		}
		seen := map[string]string{}
		for _, e := range res.Resources[0].ConfigEntries {
			seen[e.ConfigName] = e.ConfigValue
		}
		for k, v := range configs {
			if seen[k] != v {
				return false, fmt.Sprintf("%s of %s is %q, not yet %q", k, topic, seen[k], v)
			}
		}
		return true, ""
	})
}

// Produce writes values to topic, without keys or headers, and waits for
// the broker's acknowledgement.
func Produce(t testing.TB, brokers []string, topic string, values ...[]byte) {
	t.Helper()
	msgs := make([]kafka.Message, len(values))
	for i, v := range values {
		msgs[i] = kafka.Message{Value: v}
	}
	ProduceMessages(t, brokers, topic, msgs...)
}

// ProduceMessages writes msgs to topic, with their keys and headers, and
// waits for the broker's acknowledgement.
func ProduceMessages(t testing.TB, brokers []string, topic string, msgs ...kafka.Message) {
	t.Helper()
	// A transport of its own: the shared default caches metadata that
	// predates topics the test just created.
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Balancer: &kafka.RoundRobin{}, Transport: tr}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce %d messages to %s: %v", len(msgs), topic, err)
	}
}

// ProduceTo writes values to one partition of topic and waits for the
// broker's acknowledgement.
func ProduceTo(t testing.TB, brokers []string, topic string, partition int, values ...[]byte) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Transport: tr,
		Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return partition })}
	defer w.Close()
	msgs := make([]kafka.Message, len(values))
	for i, v := range values {
		msgs[i] = kafka.Message{Value: v}
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatalf("produce %d messages to %s/%d: %v", len(msgs), topic, partition, err)
	}
}

// ReadAll reads every message of topic from the start until n have been
// read or the timeout passes.
func ReadAll(t testing.TB, brokers []string, topic string, n int, timeout time.Duration) []kafka.Message {
	t.Helper()
	conn, err := kafka.Dial("tcp", brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []kafka.Message
	for _, p := range parts {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		for len(out) < n {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			m, err := r.ReadMessage(pctx)
			pcancel()
			if err != nil {
				break
			}
			out = append(out, m)
		}
		r.Close()
	}
	return out
}

// Offsets returns, per partition of topic, the group's committed offset
// (-1 when none) and the log end offset.
func Offsets(t testing.TB, brokers []string, group, topic string, partitions int) (committed, end map[int]int64) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: tr}
	ids := make([]int, partitions)
	reqs := make([]kafka.OffsetRequest, partitions)
	for i := range ids {
		ids[i] = i
		reqs[i] = kafka.LastOffsetOf(i)
	}
	ctx := context.Background()
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
	switch {
	case err != nil:
	case errors.Is(of.Error, kafka.GroupIdNotFound):
		of.Error, of.Topics = nil, nil // no commit yet
	case errors.Is(of.Error, kafka.NotCoordinatorForGroup), errors.Is(of.Error, kafka.GroupCoordinatorNotAvailable), errors.Is(of.Error, kafka.GroupLoadInProgress):
		// A broker just started creates and loads its offsets topic at the
		// first group request: nothing can be committed yet, and the
		// callers poll.
		of.Error, of.Topics = nil, nil
	}
	if err != nil || of.Error != nil {
		t.Fatalf("fetch offsets of group %s: %v %v", group, err, of)
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	committed, end = map[int]int64{}, map[int]int64{}
	for _, id := range ids {
		committed[id] = -1
	}
	for _, p := range of.Topics[topic] {
		committed[p.Partition] = p.CommittedOffset
	}
	for _, p := range lo.Topics[topic] {
		end[p.Partition] = p.LastOffset
	}
	return committed, end
}

// LogStarts returns, per partition of topic, the log start offset: where
// the broker's retention has left it.
func LogStarts(t testing.TB, brokers []string, topic string, partitions int) map[int]int64 {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: tr}
	reqs := make([]kafka.OffsetRequest, partitions)
	for i := range reqs {
		reqs[i] = kafka.FirstOffsetOf(i)
	}
	lo, err := c.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	start := map[int]int64{}
	for _, p := range lo.Topics[topic] {
		start[p.Partition] = p.FirstOffset
	}
	return start
}

// ProduceLarge writes values one per request, each up to 4 MiB (past
// kafka-go's default batch size), retrying a partition without a leader.
func ProduceLarge(t testing.TB, brokers []string, topic string, values ...[]byte) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, BatchBytes: 4 << 20, BatchSize: 1, RequiredAcks: kafka.RequireAll, Transport: tr}
	defer w.Close()
	for _, v := range values {
		// Metadata read just after the topic was made may show a partition
		// without its leader yet; the client then sends nothing, and a
		// second try cannot duplicate the message.
		var err error
		for attempt := 1; attempt <= 5; attempt++ {
			if err = w.WriteMessages(context.Background(), kafka.Message{Value: v}); err == nil || !NoLeader(err) {
				break
			}
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("produce %d bytes: %v", len(v), err)
		}
	}
}

// NoLeader reports whether every write of err failed for want of a
// partition leader in the client's metadata.
func NoLeader(err error) bool {
	var we kafka.WriteErrors
	if !errors.As(err, &we) {
		return errors.Is(err, protocol.ErrNoLeader) || errors.Is(err, kafka.LeaderNotAvailable)
	}
	for _, e := range we {
		if e != nil && !errors.Is(e, protocol.ErrNoLeader) && !errors.Is(e, kafka.LeaderNotAvailable) {
			return false
		}
	}
	return true
}

// ReadToEnd reads every partition of topic from its first offset to its
// end, as it is when called (the oracles' read: nothing left out).
func ReadToEnd(t interface{ Fatalf(string, ...any) }, brokers []string, topic string) []kafka.Message {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	var out []kafka.Message
	for _, p := range parts {
		pc, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p.ID)
		if err != nil {
			t.Fatalf("leader of %s/%d: %v", topic, p.ID, err)
		}
		first, last, err := pc.ReadOffsets()
		pc.Close()
		if err != nil {
			t.Fatalf("offsets of %s/%d: %v", topic, p.ID, err)
		}
		if last <= first {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MaxBytes: 10 << 20, MaxWait: 200 * time.Millisecond})
		if err := r.SetOffset(first); err != nil {
			t.Fatalf("%v", err)
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read %s/%d: %v", topic, p.ID, err)
			}
			out = append(out, m)
			if m.Offset+1 >= last {
				break
			}
		}
		r.Close()
	}
	return out
}
