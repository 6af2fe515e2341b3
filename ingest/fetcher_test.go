package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/testkit/testenv"
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

// firstMessageWithin is how long fetchFor waits for the first message.
const firstMessageWithin = 30 * time.Second

// fetchFor fetches until nothing more comes for quietFor after the first
// message, settling nothing.
func fetchFor(t *testing.T, c *Consumer, quietFor time.Duration) []Fetched {
	t.Helper()
	var out []Fetched
	for {
		// The first message may take the group's join and, on a loaded
		// machine, a broker slower than the quiet period: every caller
		// expects messages, and a fresh-clone run once saw none in 1 s.
		wait := quietFor
		if len(out) == 0 {
			wait = firstMessageWithin
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		m, a, err := fetch(ctx, c)
		cancel()
		if err != nil {
			return out
		}
		out = append(out, Fetched{Msg: m, Ack: a})
	}
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
	t.Parallel()
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
		m, a, err := fetch(ctx, c)
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

// A missing input topic on a broker that does not create topics: every
// generation ends as soon as it starts (kafka-go's partition watcher finds
// no topic), and the group must not spin on that; the status says why, and
// consumption starts once the topic exists. The test's broker creates
// topics on demand, so this one runs on an in-process kfake broker started
// without that (kafka-go's group code is the real one either way).
func TestMissingInputTopic(t *testing.T) {
	t.Parallel()
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
	m, a, err := fetch(ctx, c)
	if err != nil || string(m.Value) != "hello" {
		t.Fatalf("once the topic exists: %q, %v", m.Value, err)
	}
	c.Done(a)
	if s := c.Status(); s.LastError != "" {
		t.Errorf("status still says %q", s.LastError)
	}
}

// Polled a chunk at a time and settled a poll at a time, every message
// comes once, in offset order, and the commit point reaches the end with
// the budget empty.
func TestPollAndSettle(t *testing.T) {
	testenv.BrokerVersionMatters(t, "Fetch and OffsetCommit answers")
	t.Parallel()
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
	if c.budget.Held() != 0 {
		t.Errorf("in-flight bytes %d with everything settled", c.budget.Held())
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
	testenv.BrokerVersionMatters(t, "how the broker holds a Fetch for its MinBytes and MaxWait")
	t.Parallel()
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

// Regression (the fetch path held to its budget): whether a batch was refused for its size was read
// from a process-wide counter, so another partition's refusal during an
// idle partition's long poll marked the idle one stuck, and readiness could
// name the wrong partition. Now a batch's fate is its own partition's: the
// bomb's partition goes past it, and the idle partition, led by the other
// broker, is never reported, with a stall timeout of a few long polls.
func TestIdlePartitionIsNeverConvicted(t *testing.T) {
	t.Parallel()
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

// Regression (the fetch path held to its budget): the fetch-size estimate learned from whole
// responses, and the broker sends the first batch whole however little is
// asked: batches far larger than the request (highly compressed ones)
// pushed the estimate up at every response, until MaxBytes truncated to 0
// and every round trip brought one batch, until the next rebalance. The
// estimate now learns from batches read whole and is bounded.
func TestFetchSizeEstimateStaysBounded(t *testing.T) {
	testenv.BrokerVersionMatters(t, "how the broker counts a Fetch's MaxBytes against compressed batches")
	t.Parallel()
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

// refuseAll answers every request with an error, at once.
type refuseAll struct{}

func (refuseAll) RoundTrip(context.Context, net.Addr, protocol.Message) (protocol.Message, error) {
	return nil, errors.New("refused")
}

// Regression (a fresh-clone run convicted an idle partition): when the
// budget has room for one request and two brokers are ready, the ready
// brokers were tried in a map's order, so one could win round after round
// while the other's idle partition, never fetched, was reported stalled.
// Now they take turns.
func TestBrokersTakeTurnsAtAShortBudget(t *testing.T) {
	t.Parallel()
	f := &fetcher{transport: refuseAll{}, client: &kafka.Client{Addr: kafka.TCP("127.0.0.1:1")}, topic: "t",
		budget: &budget{limit: 1 << 20}, requestMax: 1 << 20, partMax: 1 << 20, sentAt: map[int]time.Time{}}
	byBroker := map[int][]*partition{0: {newPartition(0, &epoch{}, 0)}, 1: {newPartition(1, &epoch{}, 0)}}
	results := make(chan fetchResult)
	var wg sync.WaitGroup
	defer wg.Wait()
	var turns []int
	for range 40 {
		busy := map[int]bool{}
		f.send(context.Background(), &wg, byBroker, busy, results)
		if len(busy) != 1 {
			t.Fatalf("%d requests sent where the budget has room for one", len(busy))
		}
		r := <-results
		f.budget.Fill(r.reserved, 0)
		for _, p := range r.parts {
			p.inFlight = false
		}
		turns = append(turns, r.broker)
	}
	for i := 1; i < len(turns); i++ {
		if turns[i] == turns[i-1] {
			t.Fatalf("broker %d sent twice in a row while the other waited: turns %v", turns[i], turns)
		}
	}
}
