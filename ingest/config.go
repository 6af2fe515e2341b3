package ingest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
)

// Config is the Kafka side of the worker as its flags give it: where to
// consume, where dead letters go, and how to connect.
type Config struct {
	Brokers    Brokers
	Topic      string
	Group      string
	DeadLetter string // the dead-letter topic; <Topic>.dlq when empty
	// DeadLetterRetention, DeadLetterClasses and AcceptUnbounded fill
	// DeadLetterTopics.
	DeadLetterRetention time.Duration
	DeadLetterClasses   Durations
	AcceptUnbounded     bool
	// DeadLetterCheck is how often the dead-letter topics' settings are
	// read again.
	DeadLetterCheck time.Duration
	CommitInterval  time.Duration
	SessionTimeout  time.Duration
	OffsetReset     OffsetReset
	StallTimeout    time.Duration
	Security        Security
}

// DefaultConfig returns the defaults the worker's flags document.
func DefaultConfig() Config {
	return Config{Topic: "clicks", Group: "cellttl", CommitInterval: time.Second, SessionTimeout: 30 * time.Second, OffsetReset: ResetEarliest,
		StallTimeout: DefaultStallTimeout, DeadLetterRetention: 24 * time.Hour, DeadLetterCheck: 30 * time.Second}
}

// RegisterFlags declares the flags that fill c, with c's values as their
// defaults.
func (c *Config) RegisterFlags(f *envflag.FlagSet) {
	f.Value(&c.Brokers, "brokers", "KAFKA_BROKERS", "comma-separated Kafka bootstrap brokers (required)")
	f.String(&c.Topic, "topic", "KAFKA_TOPIC", c.Topic, "topic of click events")
	f.String(&c.Group, "group", "KAFKA_GROUP", c.Group, "consumer group; workers in one group share the topic's partitions")
	f.String(&c.DeadLetter, "dlq-topic", "KAFKA_DLQ_TOPIC", c.DeadLetter, "dead-letter topic (default <topic>.dlq)")
	f.Duration(&c.DeadLetterRetention, "dlq-retention", "DLQ_RETENTION", c.DeadLetterRetention, "retention.ms the dead-letter topic is created with; a letter keeps its payload only where it is gone before its event expires")
	f.Value(&c.DeadLetterClasses, "dlq-classes", "DLQ_CLASSES", "retention classes, e.g. 1h,1d,7d: topics <dlq-topic>.<class> created with that retention, so that letters of short TTLs keep their payload too")
	f.Bool(&c.AcceptUnbounded, "dlq-accept-unbounded", "", false, "use a dead-letter topic that keeps records forever (retention.ms -1) for letters without payload, instead of refusing it (a compacted topic is refused all the same: it refuses letters without a key)")
	f.Duration(&c.DeadLetterCheck, "dlq-check-interval", "DLQ_CHECK_INTERVAL", c.DeadLetterCheck, "how often the dead-letter topics' retention settings, and the input topic's timestamp settings, are read again (a topic changed to keep records forever is refused within this)")
	f.Duration(&c.CommitInterval, "commit-interval", "COMMIT_INTERVAL", c.CommitInterval, "how often settled offsets are committed")
	f.Duration(&c.SessionTimeout, "session-timeout", "KAFKA_SESSION_TIMEOUT", c.SessionTimeout, "how long the group waits for a silent member before reassigning its partitions (the broker allows 6s..5m by default)")
	f.Value(&c.OffsetReset, "offset-out-of-range", "OFFSET_OUT_OF_RANGE", "when a committed offset lies outside the log (topic recreated, retention passed it): earliest, latest or fail")
	f.Duration(&c.StallTimeout, "partition-stall-timeout", "PARTITION_STALL_TIMEOUT", c.StallTimeout, "how long an owned partition may make no progress (not at the log's end, position not moving) before /readyz names it")
	c.Security.RegisterFlags(f)
}

// DeadLetterTopics are the dead-letter topics the flags give.
func (c Config) DeadLetterTopics() DeadLetterTopics {
	return DeadLetterTopics{Base: c.DeadLetterTopic(), Retention: c.DeadLetterRetention, Classes: c.DeadLetterClasses, AcceptUnbounded: c.AcceptUnbounded}
}

// DeadLetterTopic is the dead-letter topic, the default filled in.
func (c Config) DeadLetterTopic() string {
	if c.DeadLetter == "" {
		return c.Topic + ".dlq"
	}
	return c.DeadLetter
}

// Validate checks the settings, naming the flag at fault.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no Kafka brokers given (--brokers or KAFKA_BROKERS)"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("--topic must not be empty"))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("--group must not be empty"))
	}
	if c.DeadLetterTopic() == c.Topic {
		errs = append(errs, fmt.Errorf("--dlq-topic %q is the input topic", c.DeadLetterTopic()))
	}
	if c.DeadLetterRetention < time.Second {
		errs = append(errs, fmt.Errorf("--dlq-retention %s: must be at least 1s", c.DeadLetterRetention))
	}
	for _, d := range c.DeadLetterClasses {
		if d < time.Second {
			errs = append(errs, fmt.Errorf("--dlq-classes %s: each class must be at least 1s", duration.Format(d)))
		}
	}
	if c.DeadLetterCheck <= 0 {
		errs = append(errs, fmt.Errorf("--dlq-check-interval %s: must be positive", c.DeadLetterCheck))
	}
	if c.CommitInterval <= 0 {
		errs = append(errs, fmt.Errorf("--commit-interval %s: must be positive", c.CommitInterval))
	}
	if c.StallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--partition-stall-timeout %s: must be positive", c.StallTimeout))
	}
	errs = append(errs, c.Security.Validate())
	return errors.Join(errs...)
}

// Brokers is a broker list, given as comma-separated addresses.
type Brokers []string

func (b *Brokers) String() string { return strings.Join(*b, ",") }

// Set parses a comma-separated list; blanks between commas are ignored.
func (b *Brokers) Set(s string) error {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	*b = out
	return nil
}

// Durations is a comma-separated list of durations as tenants.yaml writes
// them ("1h,1d,7d").
type Durations []time.Duration

func (d *Durations) String() string {
	s := make([]string, len(*d))
	for i, v := range *d {
		s[i] = duration.Format(v)
	}
	return strings.Join(s, ",")
}

// Set parses the list; blanks between commas are ignored.
func (d *Durations) Set(s string) error {
	var out Durations
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := duration.Parse(f)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	*d = out
	return nil
}
