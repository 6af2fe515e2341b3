package ingest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// With nothing settled, fetching stops at the byte budget, whatever the
// number of partitions; settling lets the rest through.
func TestFetchingStopsAtTheByteBudget(t *testing.T) {
	testenv.BrokerVersionMatters(t, "how the broker fills a Fetch response to its byte limits")
	t.Parallel()
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
		t.Errorf("fetched %d messages (%d bytes) with nothing settled, budget %d bytes", len(held), c.budget.Held(), budget)
	}
	if got, want := c.budget.Held(), int64(len(held))*(size+MessageOverhead); got != want {
		t.Errorf("in-flight bytes %d, want %d for the %d messages held", got, want, len(held))
	}
	t.Logf("held %d messages, %d bytes, budget %d", len(held), c.budget.Held(), budget)
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
	if c.budget.Held() != 0 {
		t.Errorf("in-flight bytes %d with everything settled", c.budget.Held())
	}
}

// While fetching waits on the budget, the lag still follows the log.
func TestLagGrowsWhileFetchingWaits(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the log's end as ListOffsets answers it")
	t.Parallel()
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

// Regression (the fetch path held to its budget): a compressed batch that decompresses past what a
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
	produceBomb(t, brokers, topic)
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
		_ = c.committer.Commit(context.Background())
		return c.Committed()[0] == 72, fmt.Sprintf("committed %v, want partition 0 at 72", c.Committed())
	})
}

// produceBomb creates topic with 2 partitions and produces, zstd: to
// partition 0, 3 small records (offsets 0-2), one batch of 64 records of
// 256 KiB of zeros (3-66, 16 MiB decompressed) and 5 small ones (67-71);
// to partition 1, 50 small records.
func produceBomb(t *testing.T, brokers []string, topic string) {
	t.Helper()
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
}

// Regression (review): a header was charged its bytes on the wire, two for
// an empty one, while it costs a kafka.Header and a string: a record of
// many empty headers held twenty times what the budget counted.
func TestHeadersAreChargedWhatTheyCost(t *testing.T) {
	t.Parallel()
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
	if held := c.budget.Held(); held < 5000*headerOverhead {
		t.Errorf("a message of 5000 headers charged %d bytes, want at least %d", held, 5000*headerOverhead)
	}
	c.Done(got[0].Ack)
}

// Regression (review): with the byte budget full, no fetch goes out, and a
// partition already at the log's end was reported stalled beside the one
// that is: the lag probe that reads the log's end now counts as its
// progress.
func TestIdlePartitionIsNotStalledByAFullBudget(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the log's end as ListOffsets answers it, with no fetch going out")
	t.Parallel()
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
