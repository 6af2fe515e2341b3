package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/protocol/listoffsets"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/internal/testenv"
)

var quiet = slog.New(slog.DiscardHandler)

func newTestConsumer(t *testing.T, cfg ConsumerConfig) *Consumer {
	t.Helper()
	return newMeteredConsumer(t, cfg, nil)
}

// newMeteredConsumer is newTestConsumer counting into mp.
func newMeteredConsumer(t *testing.T, cfg ConsumerConfig, mp metric.MeterProvider) *Consumer {
	t.Helper()
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 6 * time.Second
	}
	c, err := NewConsumer(cfg, mp, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// counted is the value of the package's counter name as reader collects
// it. The counter must be a single series without attributes: it counts for
// the whole consumer (partitions and causes are in the log lines), and a
// series per partition or cause would be a change of what dashboards read.
func counted(t *testing.T, reader *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != scope {
			continue
		}
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !sum.IsMonotonic || sum.Temporality != metricdata.CumulativeTemporality {
				t.Fatalf("%s is %T %+v, want a cumulative monotonic int64 sum", name, m.Data, m.Data)
			}
			if len(sum.DataPoints) != 1 || sum.DataPoints[0].Attributes.Len() != 0 {
				t.Fatalf("%s has data points %+v, want one without attributes", name, sum.DataPoints)
			}
			return sum.DataPoints[0].Value
		}
	}
	t.Fatalf("no %s in scope %s: %+v", name, scope, rm.ScopeMetrics)
	return 0
}

func values(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		v := fmt.Sprintf("%06d", i)
		out[i] = []byte(v + strings.Repeat("x", size-len(v)))
	}
	return out
}

// fetchFor fetches until nothing more comes for quietFor, settling nothing.
func fetchFor(t *testing.T, c *Consumer, quietFor time.Duration) []Fetched {
	t.Helper()
	var out []Fetched
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quietFor)
		m, a, err := c.Fetch(ctx)
		cancel()
		if err != nil {
			return out
		}
		out = append(out, Fetched{Msg: m, Ack: a})
	}
}

// With nothing settled, fetching stops at the byte budget, whatever the
// number of partitions; settling lets the rest through.
func TestFetchingStopsAtTheByteBudget(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Name("budget")
	testenv.CreateTopic(t, brokers, topic, 6)
	const n, size = 3000, 1000
	testenv.Produce(t, brokers, topic, values(n, size)...)
	const budget = 300 * (size + MessageOverhead) // about 300 messages
	c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group"), MaxInflightBytes: budget})
	held := fetchFor(t, c, time.Second)
	// A fetch may return one record batch beyond its reservation; the
	// producer's batches hold 100 messages.
	if len(held) < 100 || int64(len(held))*(size+MessageOverhead) > budget+6*100*(size+MessageOverhead) {
		t.Errorf("fetched %d messages (%d bytes) with nothing settled, budget %d bytes", len(held), c.InflightBytes(), budget)
	}
	if got, want := c.InflightBytes(), int64(len(held))*(size+MessageOverhead); got != want {
		t.Errorf("in-flight bytes %d, want %d for the %d messages held", got, want, len(held))
	}
	t.Logf("held %d messages, %d bytes, budget %d", len(held), c.InflightBytes(), budget)
	total := len(held)
	for total < n {
		for _, f := range held {
			c.Done(f.Ack)
		}
		held = fetchFor(t, c, time.Second)
		if len(held) == 0 {
			t.Fatalf("fetched %d of %d after settling", total, n)
		}
		total += len(held)
	}
	for _, f := range held {
		c.Done(f.Ack)
	}
	if c.InflightBytes() != 0 {
		t.Errorf("in-flight bytes %d with everything settled", c.InflightBytes())
	}
}

// While fetching waits on the budget, the lag still follows the log.
func TestLagGrowsWhileFetchingWaits(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Name("lag")
	testenv.CreateTopic(t, brokers, topic, 1)
	c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group"), MaxInflightBytes: 50 * (1000 + MessageOverhead)})
	testenv.Produce(t, brokers, topic, values(100, 1000)...)
	held := fetchFor(t, c, 2*time.Second)
	testenv.Produce(t, brokers, topic, values(400, 1000)...)
	testenv.Eventually(t, 3*lagEvery, func() (bool, string) {
		s := c.Status()
		return len(s.Partitions) == 1 && s.Partitions[0].Lag == int64(500-len(held)), fmt.Sprintf("status %+v, %d held", s, len(held))
	})
}

// failPartition answers the first n fetches of one partition with an error
// the broker gives for a leader change.
type failPartition struct {
	kafka.RoundTripper
	partition int32
	left      atomic.Int32
}

func (f *failPartition) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	res, err := f.RoundTripper.RoundTrip(ctx, addr, req)
	if r, ok := res.(*fetchResponse); ok && err == nil {
		for i := range r.Partitions {
			p := &r.Partitions[i]
			if p.Partition == f.partition && f.left.Add(-1) >= 0 {
				p.ErrorCode = int16(kafka.NotLeaderForPartition)
				p.Records = nil
			}
		}
	}
	return res, err
}

// One partition failing alone is retried alone: the others flow, the
// generation goes on (no rebalance), and the partition catches up.
func TestOnePartitionFailingAloneKeepsTheGeneration(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Name("alone")
	testenv.CreateTopic(t, brokers, topic, 3)
	testenv.Produce(t, brokers, topic, values(300, 100)...)
	fp := &failPartition{partition: 1}
	fp.left.Store(5)
	c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group"),
		wrap: func(rt kafka.RoundTripper) kafka.RoundTripper { fp.RoundTripper = rt; return fp }})
	testenv.Eventually(t, 30*time.Second, func() (bool, string) { return c.Status().Joined, "not joined" })
	gen := c.Status().Generation
	sawError := false
	perPartition := map[int]int{}
	deadline := time.Now().Add(30 * time.Second)
	for perPartition[0]+perPartition[1]+perPartition[2] < 300 && time.Now().Before(deadline) {
		for _, p := range c.Status().Partitions {
			sawError = sawError || p.Partition == 1 && strings.Contains(p.Error, "Not Leader")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m, a, err := c.Fetch(ctx)
		cancel()
		if err == nil {
			perPartition[m.Partition]++
			c.Done(a)
		}
	}
	if perPartition[0]+perPartition[1]+perPartition[2] != 300 {
		t.Errorf("fetched %v, want all 300", perPartition)
	}
	if g := c.Status().Generation; g != gen {
		t.Errorf("generation %d → %d: a partition's errors ended the generation", gen, g)
	}
	if !sawError {
		t.Error("the partition's error never showed in its status")
	}
	if fp.left.Load() > 0 {
		t.Errorf("%d injected errors left: the partition was not retried", fp.left.Load())
	}
}

// commitBeyond commits, for a group with no member, an offset per
// partition: what the group would hold after its topic was recreated.
func commitBeyond(t *testing.T, brokers []string, group, topic string, offsets map[int]int64) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	var commits []kafka.OffsetCommit
	for p, o := range offsets {
		commits = append(commits, kafka.OffsetCommit{Partition: p, Offset: o})
	}
	res, err := c.OffsetCommit(context.Background(), &kafka.OffsetCommitRequest{GroupID: group, GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{topic: commits}})
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	for _, ps := range res.Topics[topic] {
		if ps.Error != nil {
			t.Fatalf("commit partition %d: %v", ps.Partition, ps.Error)
		}
	}
}

// A committed offset outside the log does not stall: earliest reads what
// the log holds, latest skips it, fail stops with the partition and the
// offsets named. The group's commit follows the new log, even downwards.
func TestCommittedOffsetOutsideTheLog(t *testing.T) {
	brokers := testenv.Kafka(t)
	for _, policy := range []OffsetReset{ResetEarliest, ResetLatest, ResetFail} {
		t.Run(policy.String(), func(t *testing.T) {
			topic, group := testenv.Name("oor"), testenv.Name("group")
			testenv.CreateTopic(t, brokers, topic, 1)
			testenv.Produce(t, brokers, topic, values(10, 100)...)
			commitBeyond(t, brokers, group, topic, map[int]int64{0: 500})
			c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: group, OffsetReset: policy, CommitInterval: 100 * time.Millisecond})
			switch policy {
			case ResetFail:
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, _, err := c.Fetch(ctx)
				if err == nil || !strings.Contains(err.Error(), "offset 500 is outside the log, which holds offsets 0 to 9") {
					t.Fatalf("fetch: %v", err)
				}
				return
			case ResetLatest:
				// Assigned at the group's 500, then reset to the end: the
				// reset offset is committed at once, so a restart before
				// the next event does not meet offset 500 again.
				testenv.Eventually(t, 20*time.Second, func() (bool, string) {
					s := c.Status()
					return s.Joined && len(s.Partitions) == 1 && s.Partitions[0].Committed == 10, fmt.Sprintf("%+v", s)
				})
				if committed, _ := testenv.Offsets(t, brokers, group, topic, 1); committed[0] != 10 {
					t.Fatalf("group's offset after the reset: %d, want 10", committed[0])
				}
				testenv.Produce(t, brokers, topic, values(3, 100)...)
			}
			var got []int64
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			want := map[OffsetReset]int{ResetEarliest: 10, ResetLatest: 3}[policy]
			for len(got) < want {
				m, a, err := c.Fetch(ctx)
				if err != nil {
					t.Fatalf("fetched offsets %v: %v", got, err)
				}
				got = append(got, m.Offset)
				c.Done(a)
			}
			if policy == ResetLatest && got[0] != 10 {
				t.Errorf("latest read from offset %d, want 10 (the end when it started)", got[0])
			}
			if policy == ResetEarliest && got[0] != 0 {
				t.Errorf("earliest read from offset %d, want 0", got[0])
			}
			if err := c.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			committed, _ := testenv.Offsets(t, brokers, group, topic, 1)
			if want := got[len(got)-1] + 1; committed[0] != want {
				t.Errorf("committed %d, want %d: the commit follows the new log", committed[0], want)
			}
		})
	}
}

// A missing input topic on a broker that does not create topics: every
// generation ends as soon as it starts (kafka-go's partition watcher finds
// no topic), and the group must not spin on that; the status says why, and
// consumption starts once the topic exists. The test's broker creates
// topics on demand, so this one runs on an in-process kfake broker started
// without that (kafka-go's group code is the real one either way).
func TestMissingInputTopic(t *testing.T) {
	cluster, err := inproc.StartKafka(inproc.KafkaOptions{Brokers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	topic := testenv.Name("later")
	joins := &countingHandler{msg: "joined consumer group"}
	c, err := NewConsumer(ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group"), SessionTimeout: 6 * time.Second}, nil, slog.New(joins))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		s := c.Status()
		return strings.Contains(s.LastError, "input topic "+topic+" does not exist"), fmt.Sprintf("status %+v", s)
	})
	j0 := joins.n.Load()
	time.Sleep(8 * time.Second)
	if j := joins.n.Load() - j0; j > 6 {
		t.Errorf("%d generations joined in 8s with the topic missing: the group spins", j)
	} else {
		t.Logf("%d generations joined in 8s with the topic missing", j)
	}
	testenv.CreateTopic(t, brokers, topic, 1)
	testenv.Produce(t, brokers, topic, []byte("hello"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, a, err := c.Fetch(ctx)
	if err != nil || string(m.Value) != "hello" {
		t.Fatalf("once the topic exists: %q, %v", m.Value, err)
	}
	c.Done(a)
	if s := c.Status(); s.LastError != "" {
		t.Errorf("status still says %q", s.LastError)
	}
}

// countingHandler counts the log records with one message.
type countingHandler struct {
	msg string
	n   atomic.Int64
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// Regression (review): with --offset-out-of-range fail and partitions led
// by two brokers, the fetcher waited for the other broker's request, whose
// result no one would take: the member froze, in the group, with no error.
// It must stop with the error. (Two brokers: in-process kfake.)
func TestResetFailStopsWithPartitionsOnTwoBrokers(t *testing.T) {
	cluster, err := inproc.StartKafka(inproc.KafkaOptions{Brokers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	topic, group := testenv.Name("oor"), testenv.Name("group")
	testenv.CreateTopic(t, brokers, topic, 4)
	testenv.Produce(t, brokers, topic, values(8, 100)...)
	commitBeyond(t, brokers, group, topic, map[int]int64{0: 500, 1: 0, 2: 0, 3: 0})
	c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: group, OffsetReset: ResetFail})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	for {
		_, a, err := c.Fetch(ctx)
		if err != nil {
			if !strings.Contains(err.Error(), "offset 500 is outside the log") {
				t.Fatalf("fetch: %v; status %+v", err, c.Status())
			}
			return
		}
		c.Done(a)
	}
}

// Regression (issue 20): a compressed batch that decompresses past what a
// batch may (16 MiB of zeros in a few kilobytes of zstd, under a 1 MiB
// budget) used to stop its partition "until an operator acts". Now the
// records within the bound are delivered, the rest of the batch is handed
// on as one undecodable message covering its offsets, and the partition
// goes on; the other partition never notices. Memory stays near the
// budget: the batch is never decompressed whole.
func TestCompressedBatchLargerThanTheBudget(t *testing.T) {
	cluster, err := inproc.StartKafka(inproc.KafkaOptions{Brokers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	topic := testenv.Name("bomb")
	testenv.CreateTopic(t, brokers, topic, 2)
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	toPartition := kafka.BalancerFunc(func(m kafka.Message, _ ...int) int {
		if strings.HasPrefix(string(m.Key), "p0") {
			return 0
		}
		return 1
	})
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: toPartition, Compression: kafka.Zstd,
		BatchBytes: 64 << 20, BatchSize: 1000, BatchTimeout: 50 * time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: tr}
	defer w.Close()
	write := func(key string, n, size int) {
		msgs := make([]kafka.Message, n)
		for i := range msgs {
			msgs[i] = kafka.Message{Key: []byte(key), Value: make([]byte, size)}
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
	}
	write("p0-before", 3, 100)    // offsets 0-2
	write("p0-bomb", 64, 256<<10) // offsets 3-66, one batch: 16 MiB decompressed
	write("p0-after", 5, 100)     // offsets 67-71
	write("p1", 50, 100)          // partition 1
	const budget = 1 << 20
	reader := sdkmetric.NewManualReader()
	c := newMeteredConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group"), MaxInflightBytes: budget},
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	allocated := ms.TotalAlloc
	got := map[string]int{}
	covered := map[int64]int{} // offsets of partition 0, by how many messages cover them
	var undecodable *Undecodable
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for got["p0-after"] < 5 || got["p1"] < 50 {
		b, err := c.Poll(ctx, nil)
		if err != nil {
			t.Fatalf("fetched %v: %v; problem %v", got, err, c.Problem())
		}
		for _, f := range b {
			last := f.Msg.Offset
			if f.Undecodable != nil {
				undecodable, last = f.Undecodable, f.Undecodable.Last
				got["undecodable"]++
			} else {
				got[string(f.Msg.Key)]++
			}
			for o := f.Msg.Offset; f.Msg.Partition == 0 && o <= last; o++ {
				covered[o]++
			}
			c.Done(f.Ack)
		}
	}
	for o := int64(0); o <= 71; o++ {
		if covered[o] != 1 {
			t.Errorf("offset %d of partition 0 covered by %d messages, want 1", o, covered[o])
		}
	}
	if undecodable == nil || got["undecodable"] != 1 {
		t.Fatalf("got %v: want the batch's rest handed on as one undecodable message", got)
	}
	if undecodable.Last != 66 || undecodable.Codec != "zstd" || !strings.Contains(undecodable.Reason, "it decompresses to more than 1048576 bytes, the most one batch may") || undecodable.Size == 0 {
		t.Errorf("undecodable %+v", undecodable)
	}
	t.Logf("%v; %s", got, undecodable.Reason)
	// The batch is counted once, as undecodable and not as a failure to
	// read: the partition went on past it, nothing was retried.
	if n := counted(t, reader, "cellttl.kafka.undecodable_batches"); n != 1 {
		t.Errorf("cellttl.kafka.undecodable_batches %d, want 1", n)
	}
	if n := counted(t, reader, "cellttl.kafka.fetch_errors"); n != 0 {
		t.Errorf("cellttl.kafka.fetch_errors %d, want 0", n)
	}
	runtime.ReadMemStats(&ms)
	if a := ms.TotalAlloc - allocated; a > 48<<20 {
		t.Errorf("%d MiB allocated for a 16 MiB batch under a 1 MiB budget", a>>20)
	}
	if err := c.Problem(); err != nil {
		t.Errorf("problem: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		_ = c.Commit(context.Background())
		return c.Committed()[0] == 72, fmt.Sprintf("committed %v, want partition 0 at 72", c.Committed())
	})
}

// Polled a chunk at a time and settled a poll at a time, every message
// comes once, in offset order, and the commit point reaches the end with
// the budget empty.
func TestPollAndSettle(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Name("poll")
	testenv.CreateTopic(t, brokers, topic, 1)
	const n = 1500
	testenv.Produce(t, brokers, topic, values(n, 20)...)
	c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []Fetched
	next := int64(0)
	for next < n {
		var err error
		if got, err = c.Poll(ctx, got); err != nil {
			t.Fatalf("after offset %d: %v", next, err)
		}
		// A full chunk, or a slice of its own size: a part-full chunk
		// would hold memory the budget does not count.
		if len(got) != cap(got) {
			t.Fatalf("a poll returned %d messages in a slice of %d", len(got), cap(got))
		}
		acks := make([]Ack, len(got))
		for i, f := range got {
			if f.Msg.Offset != next {
				t.Fatalf("offset %d, want %d", f.Msg.Offset, next)
			}
			next++
			acks[i] = f.Ack
		}
		c.Settle(acks)
	}
	if c.InflightBytes() != 0 {
		t.Errorf("in-flight bytes %d with everything settled", c.InflightBytes())
	}
	if f := c.tracker.Committable(); len(f) != 1 {
		t.Fatalf("committable %v", f)
	} else {
		for _, o := range f {
			if o != n {
				t.Errorf("commit point %d, want %d", o, n)
			}
		}
	}
}

// fetchLog records each Fetch request's MinBytes and MaxWaitTime, and
// whether its response carried records.
type fetchLog struct {
	kafka.RoundTripper
	mu   sync.Mutex
	seen []fetchSeen
}

type fetchSeen struct {
	minBytes, maxWait int32
	records           bool
}

func (f *fetchLog) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	res, err := f.RoundTripper.RoundTrip(ctx, addr, req)
	if q, ok := req.(*fetchRequest); ok {
		s := fetchSeen{minBytes: q.MinBytes, maxWait: q.MaxWaitTime}
		if r, ok := res.(*fetchResponse); ok && err == nil {
			for _, p := range r.Partitions {
				s.records = s.records || p.HighWatermark > q.Topics[0].Partitions[0].FetchOffset && len(p.Records) > 0
			}
		}
		f.mu.Lock()
		f.seen = append(f.seen, s)
		f.mu.Unlock()
	}
	return res, err
}

// While messages flow, a fetch gathers (busyFetchBytes, busyFetchWait);
// after a fetch that brought nothing, the next is a long poll answered at
// the first byte.
func TestFetchGathersWhileMessagesFlow(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Name("gather")
	testenv.CreateTopic(t, brokers, topic, 1)
	fl := &fetchLog{}
	c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group"),
		wrap: func(rt kafka.RoundTripper) kafka.RoundTripper { fl.RoundTripper = rt; return fl }})
	testenv.Eventually(t, 30*time.Second, func() (bool, string) { return c.Status().Joined, "not joined" })
	testenv.Produce(t, brokers, topic, values(50, 100)...)
	for _, f := range fetchFor(t, c, 2*time.Second) {
		c.Done(f.Ack)
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	long := fetchSeen{minBytes: 1, maxWait: int32(maxFetchWait / time.Millisecond)}
	gather := fetchSeen{minBytes: busyFetchBytes, maxWait: int32(busyFetchWait / time.Millisecond)}
	sawData, sawGather := false, false
	for i, s := range fl.seen {
		want := long
		if i > 0 && fl.seen[i-1].records {
			want = gather
		}
		if s.minBytes != want.minBytes || s.maxWait != want.maxWait {
			t.Fatalf("fetch %d (after one with records: %t): MinBytes %d MaxWait %dms, want %d and %dms", i, i > 0 && fl.seen[i-1].records, s.minBytes, s.maxWait, want.minBytes, want.maxWait)
		}
		sawData = sawData || s.records
		sawGather = sawGather || want == gather
	}
	if !sawData || !sawGather {
		t.Errorf("%d fetches, records seen %t, a gathering fetch seen %t", len(fl.seen), sawData, sawGather)
	}
}

// Regression (issue 20): whether a batch was refused for its size was read
// from a process-wide counter, so another partition's refusal during an
// idle partition's long poll marked the idle one stuck, and readiness could
// name the wrong partition. Now a batch's fate is its own partition's: the
// bomb's partition goes past it, and the idle partition, led by the other
// broker, is never reported, with a stall timeout of a few long polls.
func TestIdlePartitionIsNeverConvicted(t *testing.T) {
	cluster, err := inproc.StartKafka(inproc.KafkaOptions{Brokers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	topic := testenv.Name("idle")
	testenv.CreateTopic(t, brokers, topic, 2)
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return 1 }),
		Compression: kafka.Zstd, BatchBytes: 64 << 20, BatchSize: 1000, BatchTimeout: 20 * time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: tr}
	defer w.Close()
	logs := &countingHandler{msg: "record batch cannot be decoded; its offsets go to the dead-letter topic as one and the partition goes on"}
	c, err := NewConsumer(ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group"), MaxInflightBytes: 1 << 20,
		// An idle partition makes progress at every long poll (500 ms);
		// under -race on a loaded machine one answer came 1 s after the
		// other (a fresh-clone run), so a second is too tight to tell.
		StallTimeout: 5 * time.Second, SessionTimeout: 6 * time.Second}, nil, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) { return len(c.Status().Partitions) == 2, "no partitions yet" })
	covered := int64(0)
	deadline := time.Now().Add(8 * time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		if round < 5 { // bombs: 16 MiB of zeros each, a few KB of zstd
			msgs := make([]kafka.Message, 64)
			for i := range msgs {
				msgs[i] = kafka.Message{Value: make([]byte, 256<<10)}
			}
			if err := w.WriteMessages(context.Background(), msgs...); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		b, _ := c.Poll(ctx, nil)
		cancel()
		for _, f := range b {
			if f.Msg.Partition != 1 {
				t.Fatalf("a message of the idle partition: %+v", f.Msg)
			}
			covered = f.Msg.Offset + 1
			if f.Undecodable != nil {
				covered = f.Undecodable.Last + 1
			}
			c.Done(f.Ack)
		}
		for _, p := range c.Status().Partitions {
			if p.Partition == 0 && (p.Error != "" || p.Stalled != "") {
				t.Fatalf("the idle partition convicted: %+v", p)
			}
		}
		if err := c.Problem(); err != nil && strings.Contains(err.Error(), "partition 0 ") {
			t.Fatalf("problem names the idle partition: %v", err)
		}
	}
	if covered != 5*64 {
		t.Errorf("partition 1 read up to offset %d, want past all 5 bombs (%d)", covered, 5*64)
	}
	// Regression (review): the log's rate limit was reset by every good
	// response, so each batch logged a line.
	if n := logs.n.Load(); n != 1 {
		t.Errorf("%d log lines for 5 undecodable batches of one partition within 30 s, want 1", n)
	}
}

// maxBytesLog records each Fetch request's MaxBytes.
type maxBytesLog struct {
	kafka.RoundTripper
	mu  sync.Mutex
	max []int32
}

func (l *maxBytesLog) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	if q, ok := req.(*fetchRequest); ok {
		l.mu.Lock()
		l.max = append(l.max, q.MaxBytes)
		l.mu.Unlock()
	}
	return l.RoundTripper.RoundTrip(ctx, addr, req)
}

// Regression (issue 20): the fetch-size estimate learned from whole
// responses, and the broker sends the first batch whole however little is
// asked: batches far larger than the request (highly compressed ones)
// pushed the estimate up at every response, until MaxBytes truncated to 0
// and every round trip brought one batch, until the next rebalance. The
// estimate now learns from batches read whole and is bounded.
func TestFetchSizeEstimateStaysBounded(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Name("estimate")
	testenv.CreateTopic(t, brokers, topic, 1)
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Compression: kafka.Zstd,
		BatchBytes: 64 << 20, BatchSize: 300, BatchTimeout: 20 * time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: tr}
	defer w.Close()
	value := []byte(strings.Repeat(`{"event_id":"e","tenant_id":"acme","page":"/home"}`, 200)) // 10 KB, compresses well
	for range 10 {                                                                             // batches of 3 MB, a few KB of zstd each
		msgs := make([]kafka.Message, 300)
		for i := range msgs {
			msgs[i] = kafka.Message{Value: value}
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
	}
	l := &maxBytesLog{}
	c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group"), MaxInflightBytes: 8 << 20,
		wrap: func(rt kafka.RoundTripper) kafka.RoundTripper { l.RoundTripper = rt; return l }})
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for got < 3000 {
		b, err := c.Poll(ctx, nil)
		if err != nil {
			t.Fatalf("read %d of 3000: %v", got, err)
		}
		for _, f := range b {
			got++
			c.Done(f.Ack)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	low := slices.Min(l.max)
	t.Logf("%d requests, MaxBytes from %d to %d", len(l.max), low, slices.Max(l.max))
	if low < minAsk {
		t.Errorf("a request asked for %d bytes, less than %d: the estimate ran away (%v)", low, minAsk, l.max)
	}
}

// lookupFault makes the offset lookups of the partitions in fail fail,
// and those of the partitions in hang wait for their context's end.
type lookupFault struct {
	kafka.RoundTripper
	mu         sync.Mutex
	fail, hang map[int32]bool
}

func (l *lookupFault) set(fail, hang map[int32]bool) {
	l.mu.Lock()
	l.fail, l.hang = fail, hang
	l.mu.Unlock()
}

func (l *lookupFault) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	if q, ok := req.(*listoffsets.Request); ok {
		l.mu.Lock()
		fail, hang := l.fail, l.hang
		l.mu.Unlock()
		for _, t := range q.Topics {
			for _, p := range t.Partitions {
				if hang[p.Partition] {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				if fail[p.Partition] {
					return nil, fmt.Errorf("injected: offsets of partition %d unavailable", p.Partition)
				}
			}
		}
	}
	return l.RoundTripper.RoundTrip(ctx, addr, req)
}

// Regression (issue 20): a partition whose start offset could not be looked
// up was silent: no log line, no count, /readyz 200, lag 0. And lookups ran
// on the fetch goroutine, one partition at a time, up to 10 s each, holding
// back every other partition. Now a lookup runs beside the fetching, its
// failure is logged (once per cause and 30 s, not per retry) and counted,
// and a partition that has not moved for the stall timeout is named by
// Problem, with the cause, until it moves again.
func TestOffsetLookupFailuresAreLoud(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic, group := testenv.Name("lookup"), testenv.Name("group")
	testenv.CreateTopic(t, brokers, topic, 2)
	// Partition 0 has a committed offset: it needs no lookup.
	commitBeyond(t, brokers, group, topic, map[int]int64{0: 0})
	lf := &lookupFault{}
	lf.set(map[int32]bool{1: true}, nil)
	logs := &countingHandler{msg: "kafka partition cannot be read; retrying it with backoff"}
	reader := sdkmetric.NewManualReader()
	// A stall timeout of ten long polls: an idle partition is never near it.
	c, err := NewConsumer(ConsumerConfig{Brokers: brokers, Topic: topic, Group: group, SessionTimeout: 6 * time.Second, StallTimeout: 5 * time.Second,
		wrap: func(rt kafka.RoundTripper) kafka.RoundTripper { lf.RoundTripper = rt; return lf }},
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		err := c.Problem()
		return err != nil && strings.Contains(err.Error(), "partition 1 of "+topic) && strings.Contains(err.Error(), "offsets of partition 1 unavailable"),
			fmt.Sprintf("problem %v", err)
	})
	time.Sleep(3 * time.Second) // retries, with backoff to 5 s
	if n := logs.n.Load(); n != 1 {
		t.Errorf("%d log lines for one lasting cause, want 1 (rate-limited)", n)
	}
	// Every retry is counted, though one is logged: the stall timeout and
	// the sleep hold at least 8 s of failures, and a backoff from 100 ms
	// growing by half fails at least 5 times in them, even jittered long.
	if n := counted(t, reader, "cellttl.kafka.fetch_errors"); n < 5 {
		t.Errorf("cellttl.kafka.fetch_errors %d after 8 s of failing lookups, want every retry counted", n)
	}
	for _, p := range c.Status().Partitions {
		if p.Partition == 0 && p.Stalled != "" {
			t.Errorf("partition 0, at the log's end, reported stalled: %s", p.Stalled)
		}
	}

	// A lookup that hangs holds back no other partition.
	lf.set(nil, map[int32]bool{1: true})
	start := time.Now()
	got := map[int]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for got[0] == 0 {
		testenv.ProduceTo(t, brokers, topic, 0, []byte("p0"))
		b, err := c.Poll(ctx, nil)
		if err != nil {
			t.Fatalf("no message of partition 0 while partition 1's lookup hangs: %v", err)
		}
		for _, f := range b {
			got[f.Msg.Partition]++
			c.Done(f.Ack)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("partition 0's message took %s while partition 1's lookup hung", took)
	}

	lf.set(nil, nil)
	testenv.ProduceTo(t, brokers, topic, 1, []byte("p1"))
	for got[1] == 0 {
		b, err := c.Poll(ctx, nil)
		if err != nil {
			t.Fatalf("partition 1 once its lookups work: %v; status %+v", err, c.Status())
		}
		for _, f := range b {
			got[f.Msg.Partition]++
			c.Done(f.Ack)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		err := c.Problem()
		return err == nil, fmt.Sprintf("problem %v once partition 1 moves", err)
	})
}

// Regression (review): a header was charged its bytes on the wire, two for
// an empty one, while it costs a kafka.Header and a string: a record of
// many empty headers held twenty times what the budget counted.
func TestHeadersAreChargedWhatTheyCost(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Name("headers")
	testenv.CreateTopic(t, brokers, topic, 1)
	hs := make([]kafka.Header, 5000)
	for i := range hs {
		hs[i] = kafka.Header{Key: "h"}
	}
	testenv.ProduceMessages(t, brokers, topic, kafka.Message{Value: []byte("v"), Headers: hs})
	c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group")})
	got := fetchFor(t, c, 2*time.Second)
	if len(got) != 1 || len(got[0].Msg.Headers) != 5000 {
		t.Fatalf("fetched %d messages", len(got))
	}
	if held := c.InflightBytes(); held < 5000*headerOverhead {
		t.Errorf("a message of 5000 headers charged %d bytes, want at least %d", held, 5000*headerOverhead)
	}
	c.Done(got[0].Ack)
}

// Regression (review): a partition waiting for its offsets to be looked
// up woke the fetch loop at once, again and again, while another lookup
// was under way (up to the client's 10 s timeout): a spin. The lookup's
// end wakes the loop; nothing else needs to.
func TestReadyDoesNotSpinOnLookups(t *testing.T) {
	f := &fetcher{parts: []*partition{newPartition(0, nil, -1)}} // its lookup not yet started, no backoff
	f.parts[0].want = wantBounds
	if _, wake := f.ready(context.Background(), map[int]bool{}); time.Until(wake) < time.Minute {
		t.Errorf("the loop wakes in %s for a partition only a lookup can move", time.Until(wake))
	}
}

// Regression (review): with the byte budget full, no fetch goes out, and a
// partition already at the log's end was reported stalled beside the one
// that is: the lag probe that reads the log's end now counts as its
// progress.
func TestIdlePartitionIsNotStalledByAFullBudget(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Name("fullbudget")
	testenv.CreateTopic(t, brokers, topic, 2)
	// Four records of 200 KiB, a budget of 300 KiB: at most two are
	// fetched (the first of a response always is), the others wait.
	for range 4 {
		testenv.ProduceTo(t, brokers, topic, 0, make([]byte, 200<<10))
	}
	c := newTestConsumer(t, ConsumerConfig{Brokers: brokers, Topic: topic, Group: testenv.Name("group"), MaxInflightBytes: 300 << 10, StallTimeout: 10 * time.Second})
	held := fetchFor(t, c, 2*time.Second) // nothing settled: the budget stays full
	if len(held) == 0 {
		t.Fatal("nothing fetched")
	}
	// The lag probe reads the idle partition's end every 5 s: twice within
	// the stall timeout.
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		err := c.Problem()
		return err != nil && strings.Contains(err.Error(), "partition 0 of"), fmt.Sprintf("problem %v, want partition 0 stalled", err)
	})
	time.Sleep(3 * time.Second)
	if err := c.Problem(); err != nil && strings.Contains(err.Error(), "partition 1 of") {
		t.Errorf("the idle partition reported stalled: %v", err)
	}
	for _, f := range held {
		c.Done(f.Ack)
	}
}
