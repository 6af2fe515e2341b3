package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cellttl/cellttl/testkit/testenv"
)

func owned(c *Consumer) []int {
	var out []int
	for _, p := range c.Status().Partitions {
		out = append(out, p.Partition)
	}
	return out
}

// Members of a group share the partitions, a member that leaves hands its
// partitions over, and commits go only through owned partitions.
func TestConsumerGroupSharesAndCommits(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the classic group protocol and OffsetCommit, which Kafka 4's new group coordinator serves")
	t.Parallel()
	brokers := testenv.Kafka(t)
	topic, group := testenv.Name("topic"), testenv.Name("group")
	testenv.CreateTopic(t, brokers, topic, 4)
	cfg := ConsumerConfig{Brokers: brokers, Topic: topic, Group: group, SessionTimeout: 6 * time.Second}
	log := slog.New(slog.DiscardHandler)

	c1, err := NewConsumer(cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return len(owned(c1)) == 4, fmt.Sprintf("first member owns %v", owned(c1))
	})
	c2, err := NewConsumer(cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		a, b := owned(c1), owned(c2)
		return len(a) == 2 && len(b) == 2, fmt.Sprintf("members own %v and %v", a, b)
	})
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return len(owned(c1)) == 4, fmt.Sprintf("after the other left, the first owns %v", owned(c1))
	})

	values := make([][]byte, 20)
	for i := range values {
		values[i] = []byte(fmt.Sprint(i))
	}
	testenv.Produce(t, brokers, topic, values...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var held Ack
	for i := range 20 {
		m, ack, err := fetch(ctx, c1)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			held = ack // one message left in flight: its partition must not commit past it
			t.Logf("holding partition %d offset %d", m.Partition, m.Offset)
			continue
		}
		c1.Done(ack)
	}
	if err := c1.committer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed, end := testenv.Offsets(t, brokers, group, topic, 4)
	heldPart := -1
	for p := range end {
		if committed[p] != end[p] {
			if heldPart != -1 {
				t.Errorf("partitions %d and %d not committed to the end: %v vs %v", heldPart, p, committed, end)
			}
			heldPart = p
		}
	}
	if heldPart == -1 {
		t.Errorf("every partition committed to the end with a message in flight: %v", committed)
	}
	c1.Done(held)
	if err := c1.committer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed, end = testenv.Offsets(t, brokers, group, topic, 4)
	for p := range end {
		if committed[p] != end[p] {
			t.Errorf("partition %d: committed %d, end %d", p, committed[p], end[p])
		}
	}
}

// A generation whose assignment gave this member nothing, while the topic
// has a partition for every member (the leader assigned before the topic
// existed, on a broker that creates topics on demand), is left for the
// next one: the member does not sit without partitions for good. The
// first SyncGroup answer is emptied to force that assignment.
func TestEmptyAssignmentIsNotKept(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	// The leader's first SyncGroup assigns nothing: the broker then runs
	// the group as usual, with that assignment.
	var first sync.Once
	cluster.ControlKey(int16(kmsg.SyncGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		first.Do(func() {
			none := kmsg.NewConsumerMemberAssignment()
			sync := req.(*kmsg.SyncGroupRequest)
			for i := range sync.GroupAssignment {
				sync.GroupAssignment[i].MemberAssignment = none.AppendTo(nil)
			}
		})
		return nil, nil, false
	})
	cluster.KeepControl()
	// The check's interval is this consumer's: a package variable set
	// here raced with the other tests' consumers, which run in parallel.
	c, err := NewConsumer(ConsumerConfig{Brokers: cluster.ListenAddrs(), Topic: "in", Group: testenv.Name("group"), SessionTimeout: 6 * time.Second,
		emptyEvery: 200 * time.Millisecond}, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		s := c.Status()
		return len(s.Partitions) == 3, fmt.Sprintf("%+v", s)
	})
}

// Rebalances that follow each other (a rolling deploy) are each over in
// about a heartbeat: the pause that keeps generations ending at once with
// nothing assigned (a missing topic) from spinning is not taken after a
// generation with partitions, however short. It was measured from the
// start of the generation just begun, so it never started over and grew to
// 10s: rejoins took 5 to 12s where about 1s is due.
func TestRebalancesFollowWithoutPause(t *testing.T) {
	testenv.BrokerVersionMatters(t, "how the group coordinator ends a generation and starts the next")
	t.Parallel()
	brokers := testenv.Kafka(t)
	topic, group := testenv.Name("topic"), testenv.Name("group")
	testenv.CreateTopic(t, brokers, topic, 4)
	cfg := ConsumerConfig{Brokers: brokers, Topic: topic, Group: group, SessionTimeout: 6 * time.Second}
	log := slog.New(slog.DiscardHandler)
	c1, err := NewConsumer(cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return len(owned(c1)) == 4, fmt.Sprintf("first member owns %v", owned(c1))
	})
	var slowest time.Duration
	for round := range 3 {
		start := time.Now()
		c2, err := NewConsumer(cfg, nil, log)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			a, b := owned(c1), owned(c2)
			return len(a) == 2 && len(b) == 2, fmt.Sprintf("round %d: members own %v and %v", round, a, b)
		})
		joined := time.Since(start)
		start = time.Now()
		if err := c2.Close(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			return len(owned(c1)) == 4, fmt.Sprintf("round %d: after the other left, the first owns %v", round, owned(c1))
		})
		left := time.Since(start)
		t.Logf("round %d: shared after %s, taken back after %s", round, joined.Round(time.Millisecond), left.Round(time.Millisecond))
		slowest = max(slowest, joined, left)
	}
	// A heartbeat is 600ms here; a join, a sync and the fetch of offsets
	// take well under a second more on a loaded machine.
	if slowest > 4*time.Second {
		t.Errorf("the slowest rebalance took %s, want about a heartbeat", slowest)
	}
}

// When a generation ends, its settled offsets are committed before the
// partitions move: with a commit interval far longer than the test, the
// second member's arrival alone commits what the first had settled, so
// the new owners start there rather than from the last periodic commit.
func TestGenerationEndCommitsSettledOffsets(t *testing.T) {
	t.Parallel()
	g := firstMemberFetched(t, 20)
	g.c1.Settle(g.acks)
	g.secondJoins(t)
	g.committedToTheEnd(t, "the ending generation did not commit what it had settled")
}

// The events in flight as a generation ends (fetched, handed out, not yet
// written) settle before it commits, when they do so within
// settleOnEndTimeout: the next owners start after them rather than write
// them again. The first member holds 20 events' acks until its generation
// is ending, then settles them 200 ms later; with a commit interval far
// longer than the test, only the commit at the generation's end can have
// committed them.
func TestGenerationEndWaitsForEventsInFlight(t *testing.T) {
	ending := make(chan struct{})
	var once sync.Once
	g := firstMemberFetched(t, 20)
	hook := func() { once.Do(func() { close(ending) }) }
	g.c1.onGenerationEnding.Store(&hook)
	go func() {
		select {
		case <-ending:
			time.Sleep(200 * time.Millisecond) // the writes finishing
			g.c1.Settle(g.acks)
		case <-t.Context().Done():
		}
	}()
	g.secondJoins(t)
	g.committedToTheEnd(t, "the ending generation did not wait for its events in flight")
}

// A generation that ends listens to the tracker as it waits for its events
// in flight: it goes on as the last of them settles, not at its next look
// (it polled every 5 ms), and at the deadline when they do not all settle.
// Epochs ending while it waits count as settling. The clock is synctest's:
// the times are exact.
func TestGenerationEndReturnsAsTheLastEventSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTracker()
		e := tr.Assign(map[int]int64{0: -1, 1: -1})
		acks := []Ack{tr.Track(e[0], 0, 0), tr.Track(e[1], 0, 0), tr.Track(e[0], 1, 0)}
		logs := &countingHandler{msg: unsettledOnEnd}
		c := &Consumer{tracker: tr, log: slog.New(logs)}
		start := time.Now()
		took := make(chan time.Duration, 1)
		go func() {
			c.settleOnEnd(t.Context())
			took <- time.Since(start)
		}()
		for _, at := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond} {
			time.Sleep(at - time.Since(start))
			tr.Done(acks[0])
			acks = acks[1:]
			synctest.Wait()
			select {
			case d := <-took:
				t.Fatalf("the wait returned after %s, with %d events in flight", d, len(acks))
			default:
			}
		}
		last := 333 * time.Millisecond
		time.Sleep(last - time.Since(start))
		tr.Done(acks[0])
		if d := <-took; d != last {
			t.Errorf("the wait returned %s after it began, want %s: as the last event settled", d, last)
		}

		// An event never settled: the deadline. Its epoch revoked meanwhile
		// (the generation ended): as it is revoked.
		tr.Track(tr.Assign(map[int]int64{0: -1})[0], 0, 0)
		start = time.Now()
		c.settleOnEnd(t.Context())
		if d := time.Since(start); d != settleOnEndTimeout {
			t.Errorf("with an event never settled, the wait returned after %s, want %s", d, settleOnEndTimeout)
		}
		if n := logs.n.Load(); n != 1 {
			t.Errorf("%d log lines for one generation that ended unsettled, want 1 (none for the one that settled)", n)
		}
		go func() {
			time.Sleep(10 * time.Millisecond)
			tr.Revoke()
		}()
		start = time.Now()
		c.settleOnEnd(t.Context())
		if d := time.Since(start); d != 10*time.Millisecond {
			t.Errorf("with the epochs revoked, the wait returned after %s, want 10ms", d)
		}
	})
}

// endingGeneration is a group of one member that owns a topic's 4
// partitions and has fetched n events (acks, not settled), with a commit
// interval far longer than the test.
type endingGeneration struct {
	brokers      []string
	cfg          ConsumerConfig
	c1           *Consumer
	acks         []Ack
	topic, group string
}

func firstMemberFetched(t *testing.T, n int) *endingGeneration {
	t.Helper()
	g := &endingGeneration{brokers: testenv.Kafka(t), topic: testenv.Name("topic"), group: testenv.Name("group")}
	testenv.CreateTopic(t, g.brokers, g.topic, 4)
	g.cfg = ConsumerConfig{Brokers: g.brokers, Topic: g.topic, Group: g.group, SessionTimeout: 6 * time.Second, CommitInterval: time.Hour}
	c1, err := NewConsumer(g.cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c1.Close() })
	g.c1 = c1
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return len(owned(c1)) == 4, fmt.Sprintf("first member owns %v", owned(c1))
	})
	values := make([][]byte, n)
	for i := range values {
		values[i] = []byte(fmt.Sprint(i))
	}
	testenv.Produce(t, g.brokers, g.topic, values...)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range n {
		_, ack, err := fetch(ctx, c1)
		if err != nil {
			t.Fatal(err)
		}
		g.acks = append(g.acks, ack)
	}
	return g
}

// secondJoins starts a second member and waits until the two share the
// partitions: the first member's generation has ended.
func (g *endingGeneration) secondJoins(t *testing.T) {
	t.Helper()
	c2, err := NewConsumer(g.cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		a, b := owned(g.c1), owned(c2)
		return len(a) == 2 && len(b) == 2, fmt.Sprintf("members own %v and %v", a, b)
	})
}

// committedToTheEnd fails unless the group has committed every partition
// to its end.
func (g *endingGeneration) committedToTheEnd(t *testing.T, why string) {
	t.Helper()
	committed, end := testenv.Offsets(t, g.brokers, g.group, g.topic, 4)
	for p := range end {
		if committed[p] != end[p] {
			t.Errorf("partition %d: committed %d, end %d: %s", p, committed[p], end[p], why)
		}
	}
}

// Against the real broker: a pod replaced (one member leaves, a new one
// joins) moves only its own partitions; the members that stay keep
// theirs, through both rebalances.
func TestReplacedMemberMovesOnlyItsPartitions(t *testing.T) {
	testenv.BrokerVersionMatters(t, "how the group coordinator takes a member back")
	t.Parallel()
	brokers := testenv.Kafka(t)
	topic, group := testenv.Name("topic"), testenv.Name("group")
	testenv.CreateTopic(t, brokers, topic, 6)
	cfg := ConsumerConfig{Brokers: brokers, Topic: topic, Group: group, SessionTimeout: 6 * time.Second}
	log := slog.New(slog.DiscardHandler)
	var cs []*Consumer
	for range 3 {
		c, err := NewConsumer(cfg, nil, log)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			total := 0
			for _, c := range cs {
				total += len(owned(c))
			}
			return total == 6, fmt.Sprintf("%d members own %d partitions", len(cs), total)
		})
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return len(owned(cs[0])) == 2 && len(owned(cs[1])) == 2 && len(owned(cs[2])) == 2, "shares not even yet"
	})
	before := fmt.Sprint(owned(cs[0]), owned(cs[1]))
	if err := cs[2].Close(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return len(owned(cs[0]))+len(owned(cs[1])) == 6, "the two left do not own all yet"
	})
	c4, err := NewConsumer(cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		return len(owned(c4)) == 2 && len(owned(cs[0])) == 2 && len(owned(cs[1])) == 2, fmt.Sprintf("own %v %v %v", owned(cs[0]), owned(cs[1]), owned(c4))
	})
	if after := fmt.Sprint(owned(cs[0]), owned(cs[1])); after != before {
		t.Errorf("the members that stayed own %s, had %s: the replacement moved their partitions", after, before)
	}
}
