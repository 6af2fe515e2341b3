package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// A partition's time lag is the age of its oldest event fetched and not
// settled: the record's timestamp, or the fetch for a record stamped
// ahead (a producer cannot hide lag by stamping the future). It follows
// the settles, and is 0 when nothing waits. Each generation joined is a
// rebalance, counted with the time the worker owned no partition.
func TestTimeLagAndRebalances(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the record timestamps the broker returns")
	t.Parallel()
	brokers := testenv.Kafka(t)
	topic := testenv.Name("topic")
	testenv.CreateTopic(t, brokers, topic, 1)
	old := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	testenv.ProduceMessages(t, brokers, topic, kafka.Message{Value: []byte("old"), Time: old},
		kafka.Message{Value: []byte("ahead"), Time: time.Now().Add(30 * time.Minute)})
	reader := sdkmetric.NewManualReader()
	c := newMeteredConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group")},
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fetchedFrom := time.Now()
	var acks []Ack
	for range 2 {
		_, ack, err := fetch(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	oldest := func() *time.Time {
		t.Helper()
		s := c.Status()
		if len(s.Partitions) != 1 {
			t.Fatalf("status %+v, want one partition", s)
		}
		return s.Partitions[0].OldestUnsettled
	}
	if o := oldest(); o == nil || !o.Equal(old) {
		t.Errorf("oldest unsettled %v, want the first record's time %v", o, old)
	}
	if lag := timeLag(t, reader); lag < 3599 || lag > 3700 {
		t.Errorf("time lag %.0f s with a record of an hour ago unsettled", lag)
	}
	c.Done(acks[0])
	if o := oldest(); o == nil || o.Before(fetchedFrom.Truncate(time.Millisecond)) || o.After(time.Now()) {
		t.Errorf("oldest unsettled %v: want the record stamped ahead taken at its fetch, after %v", o, fetchedFrom)
	}
	c.Done(acks[1])
	if o, lag := oldest(), timeLag(t, reader); o != nil || lag != 0 {
		t.Errorf("nothing unsettled: oldest %v, time lag %v; want none and 0", o, lag)
	}
	if n := counted(t, reader, "cellttl.kafka.consumer.rebalances"); n < 1 {
		t.Errorf("%d rebalances counted after the join", n)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if h := find(rm, "cellttl.kafka.consumer.rebalance.duration"); h == nil || h.Data.(metricdata.Histogram[float64]).DataPoints[0].Count < 1 {
		t.Errorf("rebalance durations: %+v", h)
	}
}

// timeLag is the one partition's cellttl.kafka.consumer.time_lag.
func timeLag(t *testing.T, reader *sdkmetric.ManualReader) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := find(rm, "cellttl.kafka.consumer.time_lag")
	if m == nil {
		t.Fatal("no cellttl.kafka.consumer.time_lag")
	}
	g := m.Data.(metricdata.Gauge[float64])
	if len(g.DataPoints) != 1 {
		t.Fatalf("time lag points %+v, want one partition's", g.DataPoints)
	}
	return g.DataPoints[0].Value
}

func find(rm metricdata.ResourceMetrics, name string) *metricdata.Metrics {
	for _, sm := range rm.ScopeMetrics {
		for i := range sm.Metrics {
			if sm.Metrics[i].Name == name {
				return &sm.Metrics[i]
			}
		}
	}
	return nil
}

// A record stamped 0 (a producer's default, not a time) counts from its
// fetch: it does not make the partition's lag 56 years.
func TestTimeLagOfARecordStampedZero(t *testing.T) {
	tr := newTracker()
	a := tr.Assign(map[int]int64{0: -1})[0]
	before := time.Now().Truncate(time.Millisecond)
	tr.trackAll(a, []Fetched{{Msg: Message{Offset: 1, Time: time.UnixMilli(0)}}})
	if at := tr.Oldest()[0]; at.Before(before) || at.After(time.Now()) {
		t.Errorf("oldest unsettled %v for a record stamped 0: want its fetch, after %v", at, before)
	}
}
