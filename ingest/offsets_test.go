package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/protocol/listoffsets"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/cellttl/cellttl/internal/inproc"
	"github.com/cellttl/cellttl/testkit/testenv"
)

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
	testenv.BrokerVersionMatters(t, "the broker's answer to a fetch outside its log")
	t.Parallel()
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
				_, _, err := fetch(ctx, c)
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
				m, a, err := fetch(ctx, c)
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
			if err := c.committer.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			committed, _ := testenv.Offsets(t, brokers, group, topic, 1)
			if want := got[len(got)-1] + 1; committed[0] != want {
				t.Errorf("committed %d, want %d: the commit follows the new log", committed[0], want)
			}
		})
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

func (h *countingHandler) WithGroup(string) slog.Handler { return h }

// Regression (review): with --offset-out-of-range fail and partitions led
// by two brokers, the fetcher waited for the other broker's request, whose
// result no one would take: the member froze, in the group, with no error.
// It must stop with the error. (Two brokers: in-process kfake.)
func TestResetFailStopsWithPartitionsOnTwoBrokers(t *testing.T) {
	t.Parallel()
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
		_, a, err := fetch(ctx, c)
		if err != nil {
			if !strings.Contains(err.Error(), "offset 500 is outside the log") {
				t.Fatalf("fetch: %v; status %+v", err, c.Status())
			}
			return
		}
		c.Done(a)
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

// Regression (offset lookups that fail are loud): a partition whose start offset could not be looked
// up was silent: no log line, no count, /readyz 200, lag 0. And lookups ran
// on the fetch goroutine, one partition at a time, up to 10 s each, holding
// back every other partition. Now a lookup runs beside the fetching, its
// failure is logged (once per cause and 30 s, not per retry) and counted,
// and a partition that has not moved for the stall timeout is named by
// Problem, with the cause, until it moves again.
func TestOffsetLookupFailuresAreLoud(t *testing.T) {
	t.Parallel()
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

// Regression (review): a partition waiting for its offsets to be looked
// up woke the fetch loop at once, again and again, while another lookup
// was under way (up to the client's 10 s timeout): a spin. The lookup's
// end wakes the loop; nothing else needs to.
func TestReadyDoesNotSpinOnLookups(t *testing.T) {
	t.Parallel()
	f := &fetcher{parts: []*partition{newPartition(0, &epoch{}, -1)}} // its lookup not yet started, no backoff
	f.parts[0].want = wantBounds
	if _, wake := f.ready(context.Background(), map[int]bool{}); time.Until(wake) < time.Minute {
		t.Errorf("the loop wakes in %s for a partition only a lookup can move", time.Until(wake))
	}
}

// A generation that cannot read its topic's id at the start fetches no
// position until a lookup reads it: a position of unknown incarnation,
// taken for the id the topic has when it is next read, would read a topic
// deleted and created again from the old position. Once read, the
// position is of that id and is fetched where it was.
func TestNoFetchBeforeTheIncarnationIsKnown(t *testing.T) {
	t.Parallel()
	id, err := "", errors.New("metadata: i/o timeout")
	f := &fetcher{topic: "t", log: quiet, parts: []*partition{newPartition(0, &epoch{}, 5), newPartition(1, &epoch{}, -1)},
		topicID: func(context.Context) (string, error) { return id, err }}
	f.startIncarnation(context.Background())
	if p := f.parts[0]; p.want != wantIncarnation || p.incarnation() != "" {
		t.Fatalf("partition 0 with a commit: want %d, incarnation %q; want it waiting for the id", p.want, p.incarnation())
	}
	if p := f.parts[1]; p.want != wantFirst {
		t.Fatalf("partition 1 without a commit: want %d, want its log start looked up", p.want)
	}
	if ready, _ := f.ready(context.Background(), map[int]bool{}); len(ready) != 0 {
		t.Fatalf("partitions ready to fetch before the id is known: %v", ready)
	}
	id, err = "Y", nil
	l := lookup{parts: f.parts, bounds: map[int]bounds{0: {First: 0, HW: 9, LSO: 9}, 1: {First: 2, HW: 9, LSO: 9}}, errs: map[int]error{}, id: id, idRead: true}
	if err := f.looked(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{5, 2} {
		if p := f.parts[i]; p.want != wantNothing || p.incarnation() != "Y" || p.next != want {
			t.Errorf("partition %d after the lookup: want %d, incarnation %q, next %d; want fetched at %d of Y", i, p.want, p.incarnation(), p.next, want)
		}
	}
}

// A topic deleted and created again between two fetches, holding fewer
// records than the old position, answers the next fetch OffsetOutOfRange,
// not UnknownTopicOrPartition. Its records are all new: the partition
// reads the new incarnation from its start whatever --offset-out-of-range
// says (latest would skip them), and another partition of the old
// incarnation, about to be reset too, waits for the id first.
func TestOutOfRangeInATopicCreatedAgainReadsItFromItsStart(t *testing.T) {
	t.Parallel()
	m, err := (&Consumer{}).registerMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fetcher{topic: "t", log: quiet, reset: ResetLatest, m: m, parts: []*partition{newPartition(0, &epoch{}, 100), newPartition(1, &epoch{}, 80)},
		topicID: func(context.Context) (string, error) { return "Y", nil },
		restart: func(context.Context, *epoch, int64) *epoch { return &epoch{} }}
	for _, p := range f.parts {
		p.setIncarnation("X")
	}
	ctx := context.Background()
	f.partitionError(ctx, f.parts[0], kafka.OffsetOutOfRange)
	f.partitionError(ctx, f.parts[1], kafka.OffsetOutOfRange)
	// Partition 1's lookup began before the recreation was known, and
	// read no id.
	if err := f.looked(ctx, lookup{parts: f.parts[1:], bounds: map[int]bounds{1: {First: 0, HW: 30, LSO: 30}}, errs: map[int]error{}}); err != nil {
		t.Fatal(err)
	}
	if p := f.parts[1]; p.want != wantIncarnation || p.next != 80 {
		t.Fatalf("partition 1 after a lookup without the id: want %d, next %d; want it waiting for the id at 80", p.want, p.next)
	}
	bs := map[int]bounds{0: {First: 0, HW: 40, LSO: 40}, 1: {First: 0, HW: 30, LSO: 30}}
	if err := f.looked(ctx, lookup{parts: f.parts, bounds: bs, errs: map[int]error{}, id: "Y", idRead: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range f.parts {
		if p.want != wantNothing || p.next != 0 || p.incarnation() != "Y" {
			t.Errorf("partition %d: want %d, next %d, incarnation %q; want the new incarnation Y read from 0", p.id, p.want, p.next, p.incarnation())
		}
	}
}

// A worker paused across its topic's deletion and re-creation (a frozen
// host) fetches at its old position when it resumes, and the new log,
// already past it, answers with no error. The committer reads the topic's
// id before every commit: it commits no offset of the old incarnation,
// and questions the epoch; the fetcher then waits for the id, and reads
// the new incarnation from its start. An id that cannot be read commits
// nothing.
func TestACommitOfAnotherIncarnationIsHeldBack(t *testing.T) {
	t.Parallel()
	of := func(id string) *epoch {
		a := &epoch{}
		a.of.Store(&id)
		return a
	}
	old, current, unknown := of("X"), of("Y"), &epoch{}
	id, err := "Y", error(nil)
	tr := newTracker()
	tr.current = map[int]*epoch{0: old, 1: current, 2: unknown}
	c := &committer{topic: "t", log: quiet, tracker: tr, incarnation: func(context.Context) (string, error) { return id, err }}
	ctx := context.Background()

	// At its new log's end, with nothing to commit, the old incarnation's
	// epoch is questioned all the same.
	if err := c.sameIncarnation(ctx, map[*epoch]int64{}); err != nil || !old.questioned.Load() {
		t.Fatalf("nothing to commit: %v, the old incarnation's epoch questioned %v; want it questioned", err, old.questioned.Load())
	}
	old.questioned.Store(false)

	err = errors.New("metadata: i/o timeout")
	epochs := map[*epoch]int64{old: 90, current: 5, unknown: 3}
	if c.sameIncarnation(ctx, epochs) == nil || len(epochs) != 3 {
		t.Fatalf("an id that cannot be read: %d epochs left to commit, and no error", len(epochs))
	}
	err = nil
	if err := c.sameIncarnation(ctx, epochs); err != nil {
		t.Fatal(err)
	}
	if _, ok := epochs[old]; ok || len(epochs) != 2 || !old.questioned.Load() || current.questioned.Load() {
		t.Fatalf("epochs left to commit %v, the old one questioned %v, the current one %v; want the old incarnation's held back and questioned alone",
			epochs, old.questioned.Load(), current.questioned.Load())
	}

	m, err := (&Consumer{}).registerMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fetcher{topic: "t", log: quiet, m: m, parts: []*partition{newPartition(0, old, 90)},
		topicID: c.incarnation,
		restart: func(context.Context, *epoch, int64) *epoch { return &epoch{} }}
	p := f.parts[0]
	p.setIncarnation("X")
	f.questioned()
	if p.want != wantIncarnation {
		t.Fatalf("a questioned partition: want %d; want it waiting for the id", p.want)
	}
	if err := f.looked(ctx, lookup{parts: f.parts, bounds: map[int]bounds{0: {First: 0, HW: 270, LSO: 270}}, errs: map[int]error{}, id: "Y", idRead: true}); err != nil {
		t.Fatal(err)
	}
	if p.want != wantNothing || p.next != 0 || p.a == old || p.a.incarnation() != "Y" || p.a.questioned.Load() {
		t.Errorf("after the lookup: want %d, next %d, a new epoch %v of %q, questioned %v; want a new epoch of Y read from 0",
			p.want, p.next, p.a != old, p.a.incarnation(), p.a.questioned.Load())
	}
}

// An offset out of range in the topic it was of, and in range again by
// the lookup (a new leader behind, catching up), is a failure of the
// partition: logged, counted and tried again with backoff, not a fetch at
// once, forever, with nothing said.
func TestOutOfRangeInTheSameTopicIsTriedAgainWithBackoff(t *testing.T) {
	t.Parallel()
	m, err := (&Consumer{}).registerMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fetcher{topic: "t", log: quiet, m: m, parts: []*partition{newPartition(0, &epoch{}, 100)},
		topicID: func(context.Context) (string, error) { return "X", nil }}
	p := f.parts[0]
	p.setIncarnation("X")
	ctx := context.Background()
	f.partitionError(ctx, p, kafka.OffsetOutOfRange)
	if err := f.looked(ctx, lookup{parts: f.parts, bounds: map[int]bounds{0: {First: 0, HW: 150, LSO: 150}}, errs: map[int]error{}, id: "X", idRead: true}); err != nil {
		t.Fatal(err)
	}
	if p.want != wantNothing || p.next != 100 || !p.retryAt.After(time.Now()) || p.lastErr.Load() == nil {
		t.Errorf("want %d, next %d, backoff until %s, last error %v; want fetched at 100 again after a backoff, the error kept",
			p.want, p.next, p.retryAt.Format(time.RFC3339Nano), p.lastErr.Load())
	}
}

// The topic's id is read on both sides of a lookup's bounds: a topic
// deleted and created again between them gives bounds of one incarnation
// and the id of the other, and the lookup then fails, to be tried again.
func TestALookupAcrossARecreationFails(t *testing.T) {
	t.Parallel()
	ids := []string{"X", "Y"}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	f := &fetcher{topic: "t", log: quiet, parts: []*partition{newPartition(0, &epoch{}, 100)},
		client: &kafka.Client{Addr: kafka.TCP("127.0.0.1:1"), Timeout: 200 * time.Millisecond, Transport: tr},
		topicID: func(context.Context) (string, error) {
			id := ids[0]
			ids = ids[1:]
			return id, nil
		}}
	f.parts[0].want = wantIncarnation
	var wg sync.WaitGroup
	out := make(chan lookup, 1)
	if !f.lookUp(context.Background(), &wg, out) {
		t.Fatal("no lookup started")
	}
	wg.Wait()
	if l := <-out; l.idErr == nil || !strings.Contains(l.idErr.Error(), "changed from X to Y") {
		t.Errorf("a lookup across a recreation: id %q, error %v; want it failed", l.id, l.idErr)
	}
}
