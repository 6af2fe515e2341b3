package ingest

import (
	"errors"
	"fmt"
	"time"

	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/kafkaconn"
)

// Config is the consuming side of the worker as its flags give it: where
// to consume, and how to connect (the dead-letter topics are
// deadletter.Config's).
type Config struct {
	kafkaconn.Connection
	Group          string
	CommitInterval time.Duration
	SessionTimeout time.Duration
	OffsetReset    OffsetReset
	StallTimeout   time.Duration
	// IsolationLevel is ReadCommitted or ReadUncommitted.
	IsolationLevel string
}

// The isolation levels of --isolation-level, as Kafka's consumers name
// them.
const (
	// ReadCommitted reads what transactions committed, and records written
	// outside transactions: the records of aborted transactions are
	// skipped, and nothing past a transaction still open is read until it
	// ends.
	ReadCommitted = "read_committed"
	// ReadUncommitted reads every record, aborted transactions' too.
	ReadUncommitted = "read_uncommitted"
)

// DefaultConfig returns the defaults the worker's flags document.
func DefaultConfig() Config {
	return Config{Connection: kafkaconn.Connection{Topic: "clicks"}, Group: "cellttl", CommitInterval: time.Second, SessionTimeout: 30 * time.Second, OffsetReset: ResetEarliest,
		StallTimeout: DefaultStallTimeout, IsolationLevel: ReadCommitted}
}

// ConsumerConfig is the configuration of the worker's Consumer: c, with
// the byte bounds the pipeline gives (the fetch budget and the largest
// event) and the dialer and transport of c.Security.
func (c Config) ConsumerConfig(maxInflightBytes int64, maxEventBytes int) (ConsumerConfig, error) {
	dialer, err := c.Security.Dialer()
	if err != nil {
		return ConsumerConfig{}, err
	}
	transport, err := c.Security.Transport()
	if err != nil {
		return ConsumerConfig{}, err
	}
	return ConsumerConfig{
		Brokers:          c.Brokers,
		Topic:            c.Topic,
		Group:            c.Group,
		CommitInterval:   c.CommitInterval,
		SessionTimeout:   c.SessionTimeout,
		StallTimeout:     c.StallTimeout,
		MaxInflightBytes: maxInflightBytes,
		MaxEventBytes:    maxEventBytes,
		OffsetReset:      c.OffsetReset,
		ReadUncommitted:  c.IsolationLevel == ReadUncommitted,
		Dialer:           dialer,
		Transport:        transport,
		Security:         c.Security,
	}, nil
}

// RegisterFlags declares the flags that fill c, with c's values as their
// defaults.
func (c *Config) RegisterFlags(f *envflag.FlagSet) {
	c.Connection.RegisterFlags(f)
	f.Section("Kafka")
	f.String(&c.Group, "group", "KAFKA_GROUP", c.Group, "consumer group; workers in one group share the topic's partitions")
	f.Value(&c.OffsetReset, "offset-out-of-range", "OFFSET_OUT_OF_RANGE", "when a committed offset lies outside the log (topic recreated, retention passed it): earliest, latest or fail")
	f.Choice(&c.IsolationLevel, "isolation-level", envflag.Env, c.IsolationLevel,
		"records of transactions: read_committed (only what transactions committed; aborted ones are skipped, never written nor dead-lettered, and a transaction still open holds back what follows it until it ends) or read_uncommitted (every record, aborted ones too)",
		ReadCommitted, ReadUncommitted)
	f.Advanced()
	f.Duration(&c.CommitInterval, "commit-interval", "COMMIT_INTERVAL", c.CommitInterval, "how often settled offsets are committed")
	f.Duration(&c.SessionTimeout, "session-timeout", "KAFKA_SESSION_TIMEOUT", c.SessionTimeout, "how long the group waits for a silent member before reassigning its partitions (the broker allows 6s..5m by default)")
	f.Duration(&c.StallTimeout, "partition-stall-timeout", "PARTITION_STALL_TIMEOUT", c.StallTimeout, "how long an owned partition may make no progress (not at the log's end, position not moving) before /readyz names it")
}

// Validate checks the settings, naming the flag at fault.
func (c Config) Validate() error {
	errs := []error{c.Connection.Validate()}
	if c.Group == "" {
		errs = append(errs, errors.New("--group must not be empty"))
	}
	if c.CommitInterval <= 0 {
		errs = append(errs, fmt.Errorf("--commit-interval %s: must be positive", c.CommitInterval))
	}
	if c.StallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--partition-stall-timeout %s: must be positive", c.StallTimeout))
	}
	return errors.Join(errs...)
}
