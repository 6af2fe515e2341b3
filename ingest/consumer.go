// Package ingest reads click events from Kafka and settles their offsets: a
// consumer-group member whose fetcher reads every assigned partition within
// one byte budget (reading the responses with package kwire), a tracker of
// what is done, and a committer that commits only that. It knows nothing of
// Bigtable, nor of dead letters (package deadletter).
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/ingest/sticky"
	"github.com/cellttl/cellttl/internal/kafkaconn"
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
	// ReadUncommitted reads the records of aborted transactions too, and
	// past transactions still open; by default (false) the consumer reads
	// committed data only (--isolation-level read_committed).
	ReadUncommitted bool
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
	// Security is the settings they carry, for what kafka-go cannot ask:
	// the topic's id (kafkaconn.TopicID).
	Security kafkaconn.Security

	// wrap stands between the fetcher and the Transport in tests; emptyEvery is emptyCheckInterval.
	wrap       func(kafka.RoundTripper) kafka.RoundTripper
	emptyEvery time.Duration
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
	conns     *kafkaconn.Conns
	client    *kafka.Client
	budget    *budget
	tracker   *tracker
	committer *committer
	ids       *kafkaconn.TopicIDReader // the topic's, for the fetcher's lookups and the committer
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
	// onGenerationEnding, when set (a test's), is called as a generation
	// that ends begins to wait for its events to settle.
	onGenerationEnding atomic.Pointer[func()]

	mu  sync.Mutex
	gen *kafka.Generation // nil between generations
	// balancer tells the group, at each join, what this member owns.
	balancer *sticky.Balancer
	parts    []*partition // of the current generation, for Status
	lastErr  error
	final    map[int]int64 // the committed offsets Close left, once closed
}

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

// withDefaults is cfg with the settings left at zero given the defaults
// of the flags: DefaultConfig, and the byte bounds above.
func (cfg ConsumerConfig) withDefaults() ConsumerConfig {
	def := DefaultConfig()
	orDefault(&cfg.CommitInterval, def.CommitInterval)
	orDefault(&cfg.SessionTimeout, def.SessionTimeout)
	orDefault(&cfg.StallTimeout, def.StallTimeout)
	orDefault(&cfg.MaxInflightBytes, DefaultMaxInflightBytes)
	orDefault(&cfg.MaxEventBytes, DefaultMaxEventBytes)
	orDefault(&cfg.FetchMaxBytes, DefaultFetchMaxBytes)
	orDefault(&cfg.emptyEvery, emptyCheckInterval)
	return cfg
}

// orDefault sets *v to def unless it is positive.
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// NewConsumer starts joining the group. Settings left at zero take the
// defaults of the flags: DefaultConfig, and the byte bounds above (the
// worker always gives those, split by pipeline.Config).
func NewConsumer(cfg ConsumerConfig, mp metric.MeterProvider, log *slog.Logger) (*Consumer, error) {
	cfg = cfg.withDefaults()
	transport := cfg.Transport
	if transport == nil {
		transport = &kafka.Transport{}
	}
	// Metadata of the input topic alone, not of the whole cluster.
	transport.MetadataTopics = []string{cfg.Topic}
	conns := &kafkaconn.Conns{Next: transport.Dial}
	transport.Dial = conns.Dial
	balancer := &sticky.Balancer{}
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
		// Sticky first; range and round-robin (kafka-go's defaults) while
		// members of a version without it are in the group.
		GroupBalancers: []kafka.GroupBalancer{balancer, kafka.RangeGroupBalancer{}, kafka.RoundRobinGroupBalancer{}},
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			log.Warn("kafka consumer group", "err", fmt.Sprintf(msg, args...))
		}),
	})
	if err != nil {
		return nil, fmt.Errorf("consumer group %s: %w", cfg.Group, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	tracker := newTracker()
	var rt kafka.RoundTripper = transport
	if cfg.wrap != nil {
		rt = cfg.wrap(rt)
	}
	c := &Consumer{
		cfg:       cfg,
		group:     group,
		balancer:  balancer,
		transport: transport,
		rt:        rt,
		conns:     conns,
		client:    &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: rt, Timeout: 10 * time.Second},
		budget:    &budget{limit: cfg.MaxInflightBytes},
		tracker:   tracker,
		ids:       kafkaconn.NewTopicIDReader(cfg.Brokers, cfg.Security, cfg.Topic),
		log:       log,
		// Room for every chunk the budget can hold: the budget, not the
		// channel, holds the fetcher back.
		fetched: make(chan []Fetched, max(16, cfg.MaxInflightBytes/(MessageOverhead*chunkSize))),
		chunks:  newChunks(),
		fatal:   make(chan error, 1),
		failed:  make(chan struct{}),
		stop:    stop,
	}
	c.committer = &committer{topic: cfg.Topic, tracker: tracker, interval: cfg.CommitInterval, log: log, incarnation: c.topicID}
	if c.m, err = c.registerMetrics(mp); err != nil {
		stop()
		_ = group.Close()
		return nil, err
	}
	c.wg.Go(func() { c.generations(ctx) })
	c.wg.Go(func() { c.committer.Loop(ctx) })
	return c, nil
}

// Poll returns the next messages fetched, of any owned partitions, each
// with the Ack that settles it, waiting for some until ctx ends: at most a
// chunk of a fetch response. Every message returned must be settled (Done
// or Settle) exactly once, or its partition's commits stop there. Poll has
// one caller at a time. The slice is the caller's until it passes it to
// the next Poll as reuse (nil is fine): the fetcher fills it again, so
// that fetching allocates no slice per response. Poll returns an error
// when ctx ends, or when the worker must stop (a committed offset outside
// the log under --offset-out-of-range fail).
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
	return slices.DeleteFunc(b, func(f Fetched) bool {
		stale := f.Ack.a.Stale()
		if stale {
			c.Done(f.Ack)
		}
		return stale
	})
}

// Failed is closed when the consumer must stop the worker (a committed
// offset outside the log under --offset-out-of-range fail): Poll then
// returns why.
func (c *Consumer) Failed() <-chan struct{} { return c.failed }

// Done settles a message: written, dead-lettered or deliberately skipped.
// Its bytes go back to the budget.
func (c *Consumer) Done(a Ack) { c.Settle([]Ack{a}) }

// Settle settles many messages at once, as Done does each: one lock of the
// tracker and one of the budget for a whole batch.
func (c *Consumer) Settle(acks []Ack) {
	c.budget.Release(c.tracker.DoneAll(acks))
}

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
	c.conns.CloseAll()
	c.ids.Close()
	if err != nil {
		err = fmt.Errorf("leave consumer group: %w", err)
	}
	return errors.Join(commitErr, err)
}
