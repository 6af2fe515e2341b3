// Package ingest reads click events from Kafka and settles their offsets: a
// consumer-group reader, a tracker that commits only what is done, and a
// dead-letter producer. It knows nothing of Bigtable.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
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

// Consumer fetches messages as a member of a consumer group and commits the
// offsets its Tracker says are done.
type Consumer struct {
	cfg     ConsumerConfig
	reader  *kafka.Reader
	tracker *Tracker
	log     *slog.Logger

	mu        sync.Mutex
	committed map[int]int64 // last offset committed per partition
}

// NewConsumer joins the group (lazily, on the first fetch).
func NewConsumer(cfg ConsumerConfig, log *slog.Logger) *Consumer {
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = time.Second
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 30 * time.Second
	}
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 10 << 20
	}
	rc := kafka.ReaderConfig{
		Brokers:  cfg.Brokers,
		GroupID:  cfg.Group,
		Topic:    cfg.Topic,
		MinBytes: 1,
		MaxBytes: cfg.FetchMaxBytes,
		MaxWait:  250 * time.Millisecond,
		// Commits are synchronous and made by Commit alone, never implied by
		// a fetch: an offset is committed only once its event is settled.
		CommitInterval: 0,
		StartOffset:    kafka.FirstOffset,
		// The reader's queue is part of the memory in flight; a few
		// thousand messages keep fetches flowing without hoarding.
		QueueCapacity:         1000,
		WatchPartitionChanges: true,
		HeartbeatInterval:     cfg.SessionTimeout / 10,
		SessionTimeout:        cfg.SessionTimeout,
		RebalanceTimeout:      cfg.SessionTimeout,
		JoinGroupBackoff:      time.Second,
		Dialer:                cfg.Dialer,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			log.Warn("kafka reader", "err", fmt.Sprintf(msg, args...))
		}),
	}
	return &Consumer{
		cfg:       cfg,
		reader:    kafka.NewReader(rc),
		tracker:   NewTracker(),
		log:       log,
		committed: map[int]int64{},
	}
}

// Fetch returns the next message and the Ack that settles it. Every fetched
// message must be acked exactly once, or its partition's commits stop there.
func (c *Consumer) Fetch(ctx context.Context) (kafka.Message, Ack, error) {
	m, err := c.reader.FetchMessage(ctx)
	if err != nil {
		return m, Ack{}, fmt.Errorf("fetch from %s: %w", c.cfg.Topic, err)
	}
	return m, c.tracker.Track(m.Partition, m.Offset), nil
}

// Done settles a message: written, dead-lettered or deliberately skipped.
func (c *Consumer) Done(a Ack) { c.tracker.Done(a) }

// Commit commits every partition's done prefix that moved since the last
// commit.
func (c *Consumer) Commit(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var msgs []kafka.Message
	for p, next := range c.tracker.Commitable() {
		if next > c.committed[p] {
			// kafka-go commits the offset after the message it is given.
			msgs = append(msgs, kafka.Message{Topic: c.cfg.Topic, Partition: p, Offset: next - 1})
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := c.reader.CommitMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("commit offsets of %d partitions: %w", len(msgs), err)
	}
	for _, m := range msgs {
		c.committed[m.Partition] = m.Offset + 1
	}
	return nil
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

// Close leaves the group. Commit first: nothing is committed after Close.
func (c *Consumer) Close() error {
	if err := c.reader.Close(); err != nil {
		return fmt.Errorf("close kafka reader: %w", err)
	}
	return nil
}

// Lag is the reader's estimate of messages behind the end of the log.
func (c *Consumer) Lag() int64 { return c.reader.Stats().Lag }

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
