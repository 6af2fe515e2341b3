package deadletter

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
)

// Config is where dead letters go, as the worker's flags give it.
type Config struct {
	Names
	// Retention, Names' Classes and AcceptUnbounded fill Topics.
	Retention       time.Duration
	AcceptUnbounded bool
	// CheckInterval is how often the dead-letter topics' settings are
	// read again.
	CheckInterval time.Duration
	// KeyFile holds the letter keys (LoadKeys); "" signs nothing.
	KeyFile string
	// Partitions and ReplicationFactor are what the worker creates a
	// dead-letter topic with, and checks an existing one against; 0 takes
	// the defaults (Topics).
	Partitions, ReplicationFactor int
}

// Names names the dead-letter topics of an input topic: all that the
// commands reading the letters or their topics' settings take of the
// worker's dead-letter flags (they read the settings from the broker, not
// from the flags the worker creates the topics with).
type Names struct {
	Topic   string    // the dead-letter topic; <input topic>.dlq when empty
	Classes Durations // a topic more for each retention class
}

// DefaultConfig returns the defaults the worker's flags document.
func DefaultConfig() Config {
	return Config{Retention: 24 * time.Hour, CheckInterval: 30 * time.Second}
}

// RegisterFlags declares the flags that fill c, with c's values as their
// defaults.
func (c *Config) RegisterFlags(f *envflag.FlagSet) {
	c.Names.RegisterFlags(f)
	c.registerCreationFlags(f)
	RegisterKeyFlag(f, &c.KeyFile)
	f.Section("Dead letters")
	f.Advanced()
	f.Int(&c.Partitions, "dlq-partitions", envflag.Env, c.Partitions, "partitions a dead-letter topic the worker creates gets, and an existing one is checked against (default: as many as the input topic)")
	f.Int(&c.ReplicationFactor, "dlq-replication-factor", envflag.Env, c.ReplicationFactor, "replication factor a dead-letter topic the worker creates gets, and an existing one is checked against (default: 3, or the number of brokers where fewer)")
	f.Duration(&c.CheckInterval, "dlq-check-interval", "DLQ_CHECK_INTERVAL", c.CheckInterval, "how often the dead-letter topics' retention settings, and the input topic's timestamp settings and id, are read again (a topic changed to keep records forever is refused within this; under --strict-retention, an input topic relaxed holds the writes within this)")
}

// RegisterKeyFlag declares the letter key file, path: for the worker,
// which signs letters, and redrive, which verifies them.
func RegisterKeyFlag(f *envflag.FlagSet, path *string) {
	f.Section("Dead letters")
	f.String(path, "dlq-signing-key-file", envflag.Env, *path, "file of the keys that sign dead letters (one base64 key of at least 32 bytes a line; the first signs, every one verifies): worker redrive trusts only letters signed with one of them (empty: letters unsigned)")
}

// Keys loads the letter keys, nil when there is no key file.
func (c Config) Keys() (*Keys, error) { return KeysIn(c.KeyFile) }

// KeysIn loads the letter keys of the key file at path, nil for "".
func KeysIn(path string) (*Keys, error) {
	if path == "" {
		return nil, nil
	}
	return LoadKeys(path)
}

// RegisterFlags declares the names of the dead-letter topics.
func (c *Names) RegisterFlags(f *envflag.FlagSet) {
	f.Section("Dead letters")
	f.String(&c.Topic, "dlq-topic", "KAFKA_DLQ_TOPIC", c.Topic, "dead-letter topic (default <topic>.dlq)")
	f.Value(&c.Classes, "dlq-classes", "DLQ_CLASSES", "retention classes, e.g. 1h,1d,7d: topics <dlq-topic>.<class> created with that retention, so that letters of short TTLs keep their payload too")
}

// registerCreationFlags declares how the worker creates the dead-letter
// topics, and which it accepts.
func (c *Config) registerCreationFlags(f *envflag.FlagSet) {
	f.Section("Dead letters")
	f.Duration(&c.Retention, "dlq-retention", "DLQ_RETENTION", c.Retention, "retention.ms the dead-letter topic is created with; a letter keeps its payload only where it is gone before its event expires")
	f.Bool(&c.AcceptUnbounded, "dlq-accept-unbounded", "", false, "use a dead-letter topic that keeps records forever (retention.ms -1) for letters without payload, instead of refusing it (a compacted topic is refused all the same: it refuses letters without a key)")
}

// Base is the dead-letter topic of input, the default filled in.
func (c Names) Base(input string) string {
	if c.Topic == "" {
		return input + ".dlq"
	}
	return c.Topic
}

// Topics are the dead-letter topics the flags give for input.
func (c Config) Topics(input string) Topics {
	return Topics{Base: c.Base(input), Retention: c.Retention, Classes: c.Classes, AcceptUnbounded: c.AcceptUnbounded,
		Input: input, Partitions: c.Partitions, ReplicationFactor: c.ReplicationFactor}
}

// All are the names of input's dead-letter topics: the base topic, then
// one for each class, shortest first.
func (c Names) All(input string) []string {
	return Topics{Base: c.Base(input), Classes: c.Classes}.Names()
}

// Validate checks the names for input, naming the flag at fault.
func (c Names) Validate(input string) error {
	var errs []error
	if c.Base(input) == input {
		errs = append(errs, fmt.Errorf("--dlq-topic %q is the input topic", c.Base(input)))
	}
	for _, d := range c.Classes {
		if d < time.Second {
			errs = append(errs, fmt.Errorf("--dlq-classes %s: each class must be at least 1s", duration.Format(d)))
		}
	}
	return errors.Join(errs...)
}

// Validate checks the settings for input, naming the flag at fault.
func (c Config) Validate(input string) error {
	errs := []error{c.Names.Validate(input)}
	if c.Retention < time.Second {
		errs = append(errs, fmt.Errorf("--dlq-retention %s: must be at least 1s", c.Retention))
	}
	if c.Partitions < 0 {
		errs = append(errs, fmt.Errorf("--dlq-partitions %d: must not be negative (0: as the input topic)", c.Partitions))
	}
	if c.ReplicationFactor < 0 || c.ReplicationFactor > 32767 {
		errs = append(errs, fmt.Errorf("--dlq-replication-factor %d: must be 0 (3, capped at the brokers) to 32767", c.ReplicationFactor))
	}
	if c.CheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--dlq-check-interval %s: must be positive", c.CheckInterval))
	}
	return errors.Join(errs...)
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
