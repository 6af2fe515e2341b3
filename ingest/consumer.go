// Package ingest reads click events from Kafka and settles their offsets: a
// consumer-group member with one reader per assigned partition, a tracker
// that commits only what is done, and a dead-letter producer. It knows
// nothing of Bigtable.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	Brokers []string
	Topic   string
	Group   string
	// CommitInterval is how often done offsets are committed.
	CommitInterval time.Duration
	// FetchMaxBytes bounds one fetch response per partition; it must exceed
	// the largest message accepted.
	FetchMaxBytes int
	// SessionTimeout is how long the group waits for a silent member (one
	// that crashed) before handing its partitions to the others; it also
	// bounds a rebalance.
	SessionTimeout time.Duration
	// Dialer carries TLS and SASL settings; nil for plaintext.
	Dialer *kafka.Dialer
}

// Consumer is a member of a consumer group. Each generation of the group
// assigns it partitions; it reads each with a reader of its own and merges
// their messages into Fetch. Commits go through the current generation and
// only for partitions it owns: a partition revoked in a rebalance is never
// committed by this member again.
type Consumer struct {
	cfg     ConsumerConfig
	group   *kafka.ConsumerGroup
	tracker *Tracker
	log     *slog.Logger
	msgs    chan fetched
	wg      sync.WaitGroup
	stop    context.CancelFunc
	// consumed counts fetched messages, for the metrics.
	consumed atomic.Int64
	// genID is the generation whose messages Fetch returns; messages
	// still queued from an earlier one are dropped: their partitions may
	// belong to another member now, which reads them again.
	genID   atomic.Int32
	metrics metric.Registration

	mu        sync.Mutex
	gen       *kafka.Generation // nil between generations
	owned     map[int]*partition
	committed map[int]int64 // last offset committed per partition
	lastErr   error
	joinedAt  time.Time
}

// fetched is a message and the generation that fetched it.
type fetched struct {
	m   kafka.Message
	gen int32
}

// partition is the state of one owned partition.
type partition struct {
	lag    atomic.Int64 // messages behind the high watermark at the last fetch
	reader atomic.Pointer[kafka.Reader]
}

// currentLag is the larger of the lag seen at the last fetch and the one
// the reader measures on its own every few seconds: the first alone goes
// stale when fetching stops (a stalled pipeline, a slow broker).
func (p *partition) currentLag() int64 {
	lag := p.lag.Load()
	if r := p.reader.Load(); r != nil {
		lag = max(lag, r.Stats().Lag)
	}
	return lag
}

// NewConsumer starts joining the group.
func NewConsumer(cfg ConsumerConfig, log *slog.Logger) (*Consumer, error) {
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = time.Second
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 30 * time.Second
	}
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 10 << 20
	}
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
	c := &Consumer{
		cfg:       cfg,
		group:     group,
		tracker:   NewTracker(),
		log:       log,
		msgs:      make(chan fetched, 1024),
		stop:      stop,
		owned:     map[int]*partition{},
		committed: map[int]int64{},
	}
	if c.metrics, err = c.registerMetrics(); err != nil {
		stop()
		_ = group.Close()
		return nil, err
	}
	c.wg.Go(func() { c.generations(ctx) })
	return c, nil
}

// generations follows the group from generation to generation.
func (c *Consumer) generations(ctx context.Context) {
	for {
		gen, err := c.group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			c.setErr(err)
			c.log.Warn("joining consumer group", "group", c.cfg.Group, "err", err)
			continue
		}
		assigned := gen.Assignments[c.cfg.Topic]
		ids := make([]int, len(assigned))
		owned := make(map[int]*partition, len(assigned))
		for i, a := range assigned {
			ids[i] = a.ID
			owned[a.ID] = &partition{}
		}
		sort.Ints(ids)
		c.mu.Lock()
		c.gen, c.owned, c.lastErr, c.joinedAt = gen, owned, nil, time.Now()
		c.genID.Store(gen.ID)
		for _, a := range assigned {
			// Commits of the partition start over from where the group
			// stands, never from what this member knew before.
			c.tracker.Reset(a.ID)
			if a.Offset >= 0 {
				c.committed[a.ID] = a.Offset
			} else {
				delete(c.committed, a.ID)
			}
		}
		c.mu.Unlock()
		c.log.Info("joined consumer group", "group", c.cfg.Group, "generation", gen.ID, "member", gen.MemberID, "partitions", ids)
		for _, a := range assigned {
			gen.Start(func(gctx context.Context) { c.readPartition(gctx, gen.ID, a, owned[a.ID]) })
		}
		// The generation ends at the next rebalance; forget it then, so that
		// nothing is committed through it or for its partitions.
		gen.Start(func(gctx context.Context) {
			<-gctx.Done()
			c.mu.Lock()
			if c.gen == gen {
				c.gen, c.owned = nil, map[int]*partition{}
			}
			c.mu.Unlock()
		})
	}
}

// readPartition fetches one partition until its generation ends.
func (c *Consumer) readPartition(ctx context.Context, gen int32, a kafka.PartitionAssignment, st *partition) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   c.cfg.Brokers,
		Topic:     c.cfg.Topic,
		Partition: a.ID,
		MinBytes:  1,
		MaxBytes:  c.cfg.FetchMaxBytes,
		MaxWait:   250 * time.Millisecond,
		// A few hundred messages per partition keep fetches flowing; they
		// count towards memory beyond --max-inflight-bytes.
		QueueCapacity:   256,
		ReadLagInterval: 5 * time.Second,
		Dialer:          c.cfg.Dialer,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			c.log.Warn("kafka partition reader", "partition", a.ID, "err", fmt.Sprintf(msg, args...))
		}),
	})
	defer r.Close()
	st.reader.Store(r)
	if err := r.SetOffset(a.Offset); err != nil {
		c.log.Error("set partition offset", "partition", a.ID, "offset", a.Offset, "err", err)
		return
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("fetch", "partition", a.ID, "err", err)
				c.setErr(err)
			}
			return
		}
		st.lag.Store(max(0, m.HighWaterMark-m.Offset-1))
		select {
		case c.msgs <- fetched{m: m, gen: gen}:
		case <-ctx.Done():
			return
		}
	}
}

func (c *Consumer) setErr(err error) {
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
}

// Fetch returns the next message of any owned partition and the Ack that
// settles it. Every fetched message must be acked exactly once, or its
// partition's commits stop there.
func (c *Consumer) Fetch(ctx context.Context) (kafka.Message, Ack, error) {
	for {
		select {
		case f := <-c.msgs:
			if f.gen != c.genID.Load() {
				continue // fetched before a rebalance: the partition's new owner reads it
			}
			c.consumed.Add(1)
			return f.m, c.tracker.Track(f.m.Partition, f.m.Offset), nil
		case <-ctx.Done():
			return kafka.Message{}, Ack{}, fmt.Errorf("fetch from %s: %w", c.cfg.Topic, ctx.Err())
		}
	}
}

// Done settles a message: written, dead-lettered or deliberately skipped.
func (c *Consumer) Done(a Ack) { c.tracker.Done(a) }

// Commit commits, through the current generation, every owned partition's
// settled prefix that moved since the last commit.
func (c *Consumer) Commit(ctx context.Context) error {
	c.mu.Lock()
	gen := c.gen
	offsets := map[int]int64{}
	for p, next := range c.tracker.Commitable() {
		if _, owned := c.owned[p]; owned && next > c.committed[p] {
			offsets[p] = next
		}
	}
	c.mu.Unlock()
	if gen == nil || len(offsets) == 0 {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- gen.CommitOffsets(map[string]map[int]int64{c.cfg.Topic: offsets}) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("commit offsets of %d partitions: %w", len(offsets), err)
		}
	case <-ctx.Done():
		return fmt.Errorf("commit offsets: %w", ctx.Err())
	}
	c.mu.Lock()
	for p, o := range offsets {
		c.committed[p] = max(c.committed[p], o)
	}
	c.mu.Unlock()
	return nil
}

// CommitLoop commits every CommitInterval until ctx ends. Failures are
// logged and retried at the next tick: nothing is lost by a late commit,
// only redelivered.
func (c *Consumer) CommitLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := c.Commit(cctx); err != nil && ctx.Err() == nil {
				c.log.Warn("commit failed, retrying at next interval", "err", err)
			}
			cancel()
		}
	}
}

// Close leaves the group and stops every reader. Commit first: nothing is
// committed after Close.
func (c *Consumer) Close() error {
	c.stop()
	err := c.group.Close()
	c.wg.Wait()
	_ = c.metrics.Unregister()
	if err != nil {
		return fmt.Errorf("leave consumer group: %w", err)
	}
	return nil
}

// PartitionStatus is what the consumer knows of one owned partition.
type PartitionStatus struct {
	Partition int   `json:"partition"`
	Lag       int64 `json:"lag"`
	Committed int64 `json:"committed"` // -1 when this member committed nothing yet
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
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{Joined: c.gen != nil, Partitions: []PartitionStatus{}}
	if c.gen != nil {
		s.Generation, s.Member = c.gen.ID, c.gen.MemberID
	}
	if c.lastErr != nil {
		s.LastError = c.lastErr.Error()
	}
	for p, st := range c.owned {
		committed, ok := c.committed[p]
		if !ok {
			committed = -1
		}
		s.Partitions = append(s.Partitions, PartitionStatus{Partition: p, Lag: st.currentLag(), Committed: committed})
	}
	sort.Slice(s.Partitions, func(i, j int) bool { return s.Partitions[i].Partition < s.Partitions[j].Partition })
	return s
}

// Committed returns the offsets this consumer committed, per partition.
func (c *Consumer) Committed() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]int64, len(c.committed))
	for p, o := range c.committed {
		out[p] = o
	}
	return out
}

// SplitBrokers parses a comma-separated broker list.
func SplitBrokers(s string) ([]string, error) {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no Kafka brokers given (--brokers or KAFKA_BROKERS)")
	}
	sort.Strings(out)
	return out, nil
}
