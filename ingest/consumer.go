// Package ingest reads click events from Kafka and settles their offsets: a
// consumer-group member whose fetcher reads every assigned partition within
// one byte budget, a tracker of what is done, a committer that commits only
// that, and a dead-letter producer. It knows nothing of Bigtable.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/ingest/kwire"
	"github.com/cellttl/cellttl/internal/retry"
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	Brokers []string
	Topic   string
	Group   string
	// CommitInterval is how often done offsets are committed.
	CommitInterval time.Duration
	// MaxInflightBytes bounds the bytes of messages fetched and not yet
	// settled, whatever the number of partitions: fetching waits at the
	// bound (backpressure).
	MaxInflightBytes int64
	// MaxEventBytes is the largest value the worker accepts: a partition's
	// share of a fetch holds at least one such message.
	MaxEventBytes int
	// FetchMaxBytes bounds one fetch request, which covers every owned
	// partition a broker leads (DefaultFetchMaxBytes).
	FetchMaxBytes int64
	// OffsetReset is what to do when a committed offset lies outside the log.
	OffsetReset OffsetReset
	// SessionTimeout is how long the group waits for a silent member (one
	// that crashed) before handing its partitions to the others; it also
	// bounds a rebalance.
	SessionTimeout time.Duration
	// StallTimeout is how long an owned partition may make no progress
	// (its position does not move, and it is not at the log's end) before
	// Problem names it: whatever the reason, a partition assigned and not
	// moving is an incident.
	StallTimeout time.Duration
	// Dialer (group membership and commits) and Transport (fetches) carry
	// TLS and SASL settings; nil for plaintext.
	Dialer    *kafka.Dialer
	Transport *kafka.Transport

	// wrap, in tests, stands between the fetcher and the Transport.
	wrap func(kafka.RoundTripper) kafka.RoundTripper
}

// Consumer is a member of a consumer group. Each generation of the group
// assigns it partitions; a fetcher reads them within the byte budget, a
// tracker records what is done, and a committer commits it through that
// generation, only for partitions it owns: a partition revoked in a
// rebalance is never committed by this member again.
type Consumer struct {
	cfg       ConsumerConfig
	group     *kafka.ConsumerGroup
	transport *kafka.Transport
	rt        kafka.RoundTripper // the transport, or a test's wrapper of it
	conns     *connSet
	client    *kafka.Client
	budget    *Budget
	tracker   *Tracker
	committer *committer
	log       *slog.Logger
	m         *consumerMetrics
	fetched   chan []Fetched // chunks of fetch responses
	chunks    *chunks
	fatal     chan error    // a fetcher's reason to stop the worker
	failed    chan struct{} // closed with the first fatal error
	failOnce  sync.Once
	wg        sync.WaitGroup
	stop      context.CancelFunc
	consumed  atomic.Int64 // messages returned by Poll, for the metrics

	// Fetch's own: it has one caller.
	batch []Fetched
	next  int

	mu       sync.Mutex
	gen      *kafka.Generation // nil between generations
	parts    []*partition      // of the current generation, for Status
	lastErr  error
	joinedAt time.Time
	final    map[int]int64 // the committed offsets Close left, once closed
}

// generationRetry paces generations that end as soon as they start.
var generationRetry = retry.Policy{Initial: time.Second, Max: 10 * time.Second}

// DefaultStallTimeout is how long a partition may make no progress before
// readiness names it, unless --partition-stall-timeout says otherwise:
// longer than any wait the worker makes on its own (a full byte budget
// behind a Bigtable that takes seconds, a leader election).
const DefaultStallTimeout = 2 * time.Minute

// The byte bounds' defaults: the worker's flags document the first two
// (pipeline.DefaultConfig takes them from here), the third has no flag.
const (
	DefaultMaxInflightBytes = 64 << 20
	DefaultMaxEventBytes    = 1 << 20
	// DefaultFetchMaxBytes bounds one fetch request: a response and its
	// decoding are held while it is read, beside the budget.
	DefaultFetchMaxBytes = 4 << 20
)

// NewConsumer starts joining the group. Settings left at zero take the
// defaults of the flags: DefaultConfig, and the byte bounds above (the
// worker always gives those, split by pipeline.Config).
func NewConsumer(cfg ConsumerConfig, mp metric.MeterProvider, log *slog.Logger) (*Consumer, error) {
	def := DefaultConfig()
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = def.CommitInterval
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = def.SessionTimeout
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = def.StallTimeout
	}
	if cfg.MaxInflightBytes <= 0 {
		cfg.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = DefaultMaxEventBytes
	}
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = DefaultFetchMaxBytes
	}
	transport := cfg.Transport
	if transport == nil {
		transport = &kafka.Transport{}
	}
	// Metadata of the input topic alone, not of the whole cluster.
	transport.MetadataTopics = []string{cfg.Topic}
	conns := &connSet{dial: transport.Dial}
	transport.Dial = conns.Dial
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                    cfg.Group,
		Brokers:               cfg.Brokers,
		Dialer:                cfg.Dialer,
		Topics:                []string{cfg.Topic},
		HeartbeatInterval:     cfg.SessionTimeout / 10,
		SessionTimeout:        cfg.SessionTimeout,
		RebalanceTimeout:      cfg.SessionTimeout,
		JoinGroupBackoff:      time.Second,
		WatchPartitionChanges: true,
		StartOffset:           kafka.FirstOffset,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			log.Warn("kafka consumer group", "err", fmt.Sprintf(msg, args...))
		}),
	})
	if err != nil {
		return nil, fmt.Errorf("consumer group %s: %w", cfg.Group, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	tracker := NewTracker()
	var rt kafka.RoundTripper = transport
	if cfg.wrap != nil {
		rt = cfg.wrap(rt)
	}
	c := &Consumer{
		cfg:       cfg,
		group:     group,
		transport: transport,
		rt:        rt,
		conns:     conns,
		client:    &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: rt, Timeout: 10 * time.Second},
		budget:    NewBudget(cfg.MaxInflightBytes),
		tracker:   tracker,
		committer: &committer{topic: cfg.Topic, tracker: tracker, interval: cfg.CommitInterval, log: log},
		log:       log,
		// Room for every chunk the budget can hold: the budget, not the
		// channel, holds the fetcher back.
		fetched: make(chan []Fetched, max(16, cfg.MaxInflightBytes/(MessageOverhead*chunkSize))),
		chunks:  newChunks(),
		fatal:   make(chan error, 1),
		failed:  make(chan struct{}),
		stop:    stop,
	}
	if c.m, err = c.registerMetrics(meter(mp)); err != nil {
		stop()
		_ = group.Close()
		return nil, err
	}
	c.wg.Go(func() { c.generations(ctx) })
	c.wg.Go(func() { c.committer.Loop(ctx) })
	return c, nil
}

// generations follows the group from generation to generation.
func (c *Consumer) generations(ctx context.Context) {
	var started time.Time
	pauses := generationRetry.Curve()
	for {
		// Generations that end as soon as they start (the input topic is
		// missing: kafka-go's partition watcher ends each at once) would
		// spin: pause before taking the next, from 1s to 10s. kafka-go
		// holds the next generation meanwhile, heartbeating.
		if !started.IsZero() && time.Since(started) < time.Second {
			select {
			case <-time.After(pauses.Next()):
			case <-ctx.Done():
				return
			}
		} else {
			pauses.Reset()
		}
		gen, err := c.group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			c.setErr(err)
			c.log.Warn("joining consumer group", "group", c.cfg.Group, "err", err)
			continue
		}
		started = time.Now()
		assigned := gen.Assignments[c.cfg.Topic]
		if len(assigned) == 0 {
			c.noPartitions(ctx)
		}
		offsets := make(map[int]int64, len(assigned))
		for _, a := range assigned {
			offsets[a.ID] = a.Offset
		}
		// Commits of each partition start over from where the group stands,
		// never from what this member knew before.
		epochs := c.committer.begin(gen, offsets)
		parts := make([]*partition, 0, len(assigned))
		for _, a := range assigned {
			parts = append(parts, newPartition(a.ID, epochs[a.ID], a.Offset))
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i].id < parts[j].id })
		ids := make([]int, len(parts))
		for i, p := range parts {
			ids[i] = p.id
		}
		c.mu.Lock()
		c.gen, c.parts, c.joinedAt = gen, parts, time.Now()
		if len(parts) > 0 {
			c.lastErr = nil
		}
		c.mu.Unlock()
		c.log.Info("joined consumer group", "group", c.cfg.Group, "generation", gen.ID, "member", gen.MemberID, "partitions", ids)
		if len(parts) == 0 {
			gen.Start(c.watchEmptyAssignment)
		}
		// The fetcher runs until the group ends the generation; errors of a
		// partition never end it (a returning function would).
		gen.Start(func(gctx context.Context) {
			partMax := max(1<<20, c.cfg.MaxEventBytes+64<<10)
			f := &fetcher{
				transport: c.rt, client: c.client, topic: c.cfg.Topic,
				budget: c.budget, tracker: c.tracker, restart: c.committer.restart, reset: c.cfg.OffsetReset,
				requestMax: c.cfg.FetchMaxBytes, partMax: int64(partMax),
				out: c.fetched, chunks: c.chunks, log: c.log, m: c.m, parts: parts,
				// A batch may decompress to as much as the budget holds:
				// beyond, it costs more time than any legitimate batch.
				records: kwire.NewReader(c.cfg.MaxInflightBytes, partMax),
			}
			if err := f.run(gctx); err != nil {
				c.setErr(err)
				select {
				case c.fatal <- err:
				default:
				}
				c.failOnce.Do(func() { close(c.failed) })
				<-gctx.Done()
			}
			// Forget the generation, so that nothing is committed through
			// it or for its partitions.
			c.committer.end(gen)
			c.mu.Lock()
			if c.gen == gen {
				c.gen, c.parts = nil, nil
			}
			c.mu.Unlock()
		})
	}
}

// noPartitions says why a generation assigned nothing, when the reason is
// the input topic missing (more members than partitions is no problem).
func (c *Consumer) noPartitions(ctx context.Context) {
	md, err := c.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{c.cfg.Topic}})
	if err != nil || len(md.Topics) != 1 || !errors.Is(md.Topics[0].Error, kafka.UnknownTopicOrPartition) {
		return
	}
	missing := fmt.Errorf("input topic %s does not exist: create it, or check --topic", c.cfg.Topic)
	c.mu.Lock()
	said := c.lastErr != nil && c.lastErr.Error() == missing.Error()
	c.mu.Unlock()
	if !said {
		c.log.Error("waiting for the input topic", "topic", c.cfg.Topic, "err", missing)
	}
	c.setErr(missing)
}

// emptyCheckInterval is how often a member with no partitions checks that
// it should have none.
var emptyCheckInterval = 5 * time.Second

// watchEmptyAssignment ends a generation that gave this member nothing
// although the input topic has at least as many partitions as the group has
// members: an assignment the leader computed before the topic existed (a
// broker that creates topics on demand creates it in the middle of the
// join). kafka-go's partition watcher cannot see it, since the topic
// already has its partitions when the watcher starts. Returning ends the
// generation, and the next assignment sees the topic.
func (c *Consumer) watchEmptyAssignment(ctx context.Context) {
	t := time.NewTicker(emptyCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		partitions, members, err := c.groupShape(ctx)
		if err != nil || partitions == 0 || members == 0 || members > partitions {
			continue // nothing to tell, or more members than partitions: none is right
		}
		c.log.Warn("no partitions assigned although the input topic has enough for every member; rejoining",
			"topic", c.cfg.Topic, "partitions", partitions, "members", members)
		return
	}
}

// groupShape counts the input topic's partitions and the group's members.
func (c *Consumer) groupShape(ctx context.Context) (partitions, members int, err error) {
	md, err := c.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{c.cfg.Topic}})
	if err != nil {
		return 0, 0, err
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		return 0, 0, nil
	}
	dg, err := c.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{c.cfg.Group}})
	if err != nil {
		return 0, 0, err
	}
	if len(dg.Groups) != 1 || dg.Groups[0].Error != nil {
		return 0, 0, nil
	}
	return len(md.Topics[0].Partitions), len(dg.Groups[0].Members), nil
}

func (c *Consumer) setErr(err error) {
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
}

// Poll returns the next messages fetched, of any owned partitions, each
// with the Ack that settles it, waiting for some until ctx ends: at most a
// chunk of a fetch response. Every message returned must be settled (Done
// or Settle) exactly once, or its partition's commits stop there. Poll has
// one caller at a time. The slice is the caller's until it passes it to
// the next Poll as reuse (nil is fine): the fetcher fills it again, so
// that fetching allocates no slice per response. Poll returns an error when ctx ends, or when the
// worker must stop (a committed offset outside the log under
// --offset-out-of-range fail).
func (c *Consumer) Poll(ctx context.Context, reuse []Fetched) ([]Fetched, error) {
	c.chunks.put(reuse)
	for {
		select {
		case b := <-c.fetched:
			if b = c.fresh(b); len(b) > 0 {
				c.consumed.Add(int64(len(b)))
				return b, nil
			}
			c.chunks.put(b)
		case err := <-c.fatal:
			c.fatal <- err // for any later call
			return nil, err
		case <-ctx.Done():
			return nil, fmt.Errorf("fetch from %s: %w", c.cfg.Topic, ctx.Err())
		}
	}
}

// fresh drops, settling them, the messages fetched before a rebalance or
// an offset reset: the partition's new owner, or its new epoch, reads them
// again.
func (c *Consumer) fresh(b []Fetched) []Fetched {
	n := 0
	for i := range b {
		if b[i].Ack.a.Stale() {
			c.Done(b[i].Ack)
			continue
		}
		b[n] = b[i]
		n++
	}
	clear(b[n:])
	return b[:n]
}

// Failed is closed when the consumer must stop the worker (a committed
// offset outside the log under --offset-out-of-range fail): Poll then
// returns why.
func (c *Consumer) Failed() <-chan struct{} { return c.failed }

// Fetch returns the next message, as Poll does one at a time: for callers
// that want messages one by one.
func (c *Consumer) Fetch(ctx context.Context) (Message, Ack, error) {
	if c.next == len(c.batch) {
		b, err := c.Poll(ctx, c.batch)
		if err != nil {
			c.batch, c.next = nil, 0
			return Message{}, Ack{}, err
		}
		c.batch, c.next = b, 0
	}
	f := c.batch[c.next]
	c.next++
	if f.Ack.a.Stale() {
		// Went stale since it was polled (a rebalance between two calls):
		// as Poll does, settle it and go on.
		c.Done(f.Ack)
		return c.Fetch(ctx)
	}
	return f.Msg, f.Ack, nil
}

// Done settles a message: written, dead-lettered or deliberately skipped.
// Its bytes go back to the budget.
func (c *Consumer) Done(a Ack) {
	c.tracker.Done(a)
	c.budget.Release(a.size)
}

// Settle settles many messages at once, as Done does each: one lock of the
// tracker and one of the budget for a whole batch.
func (c *Consumer) Settle(acks []Ack) {
	c.budget.Release(c.tracker.DoneAll(acks))
}

// Commit commits, through the current generation, every owned partition's
// settled prefix that moved since the last commit. The consumer also does
// so every CommitInterval, and once more in Close.
func (c *Consumer) Commit(ctx context.Context) error { return c.committer.Commit(ctx) }

// InflightBytes is the bytes of fetched messages not yet settled.
func (c *Consumer) InflightBytes() int64 { return c.budget.Held() }

// finalCommitTimeout bounds Close's commit: a coordinator that does not
// answer must not hold the worker's exit.
const finalCommitTimeout = 5 * time.Second

// Close commits what is settled, then leaves the group and stops fetching:
// nothing settled by now is redelivered, and nothing is committed after.
func (c *Consumer) Close() error {
	cctx, cancel := context.WithTimeout(context.Background(), finalCommitTimeout)
	commitErr := c.committer.Commit(cctx)
	cancel()
	if commitErr != nil {
		commitErr = fmt.Errorf("final commit: %w", commitErr)
	}
	final := c.tracker.Floors()
	c.mu.Lock()
	c.final = final
	c.mu.Unlock()
	c.stop()
	err := c.group.Close()
	c.wg.Wait()
	_ = c.m.registration.Unregister()
	// The transport's connections and their goroutines go with it, also a
	// connection whose fetch the broker still holds.
	c.transport.CloseIdleConnections()
	c.conns.closeAll()
	if err != nil {
		err = fmt.Errorf("leave consumer group: %w", err)
	}
	return errors.Join(commitErr, err)
}

// PartitionStatus is what the consumer knows of one owned partition.
type PartitionStatus struct {
	Partition int `json:"partition"`
	// Lag is the messages between the next to fetch and the log's end.
	Lag       int64 `json:"lag"`
	Committed int64 `json:"committed"` // -1 when neither the group nor this member committed yet
	// CommittedLag is the messages between the committed offset (the
	// log's start when none is) and the log's end: what a restart would
	// read again or still has to read. -1 while the log's end is unknown.
	CommittedLag int64  `json:"committed_lag"`
	Error        string `json:"error,omitempty"`
	// Stalled says, when the partition has made no progress for longer
	// than the stall timeout, for how long and why.
	Stalled string `json:"stalled,omitempty"`
}

// Status is the consumer's view of its membership.
type Status struct {
	Joined     bool              `json:"joined"`
	Generation int32             `json:"generation"`
	Member     string            `json:"member,omitempty"`
	Partitions []PartitionStatus `json:"partitions"`
	LastError  string            `json:"last_error,omitempty"`
}

// Status returns the current membership and per-partition lag.
func (c *Consumer) Status() Status {
	floors := c.tracker.Floors()
	held := c.budget.Held()
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{Joined: c.gen != nil, Partitions: []PartitionStatus{}}
	if c.gen != nil {
		s.Generation, s.Member = c.gen.ID, c.gen.MemberID
	}
	if c.lastErr != nil {
		s.LastError = c.lastErr.Error()
	}
	for _, p := range c.parts {
		ps := PartitionStatus{Partition: p.id, Lag: p.lag.Load(), Committed: -1, CommittedLag: -1}
		if f, ok := floors[p.id]; ok {
			ps.Committed = f
		}
		if hw := p.hw.Load(); hw >= 0 {
			from := ps.Committed
			if from < 0 {
				from = max(p.logStart.Load(), 0)
			}
			ps.CommittedLag = max(0, hw-from)
		}
		if e := p.lastErr.Load(); e != nil {
			ps.Error = *e
		}
		if still := now.Sub(time.Unix(0, p.movedAt.Load())); still > c.cfg.StallTimeout {
			why := ps.Error
			if why == "" {
				why = fmt.Sprintf("nothing new fetched while %d bytes of the byte budget are held by events not yet settled (Bigtable or the dead-letter topic is behind)", held)
			}
			ps.Stalled = fmt.Sprintf("no progress for %s: %s", still.Round(time.Second), why)
		}
		s.Partitions = append(s.Partitions, ps)
	}
	return s
}

// Problem names the owned partitions that have made no progress for longer
// than the stall timeout, nil when none has.
func (c *Consumer) Problem() error {
	var errs []error
	for _, p := range c.Status().Partitions {
		if p.Stalled != "" {
			errs = append(errs, fmt.Errorf("partition %d of %s: %s", p.Partition, c.cfg.Topic, p.Stalled))
		}
	}
	return errors.Join(errs...)
}

// Committed returns the committed offset of each owned partition as this
// consumer knows it; after Close, as the final commit left them.
func (c *Consumer) Committed() map[int]int64 {
	c.mu.Lock()
	final := c.final
	c.mu.Unlock()
	if final != nil {
		return final
	}
	return c.tracker.Floors()
}

// connSet dials the fetch transport's connections and remembers them, so
// that Close can end them: a Kafka request cannot be cancelled, and a long
// poll in flight would keep its connection for up to maxFetchWait.
type connSet struct {
	dial func(context.Context, string, string) (net.Conn, error)

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (s *connSet) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := s.dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	}
	c, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return &trackedConn{Conn: c, set: s}, nil
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
	clear(s.conns)
}

// trackedConn leaves the set when it is closed.
type trackedConn struct {
	net.Conn
	set *connSet
}

func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c.Conn)
	c.set.mu.Unlock()
	return c.Conn.Close()
}
