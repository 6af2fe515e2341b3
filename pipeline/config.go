package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/sink"
)

// Config tunes the pipeline.
type Config struct {
	// A batch is flushed when it has FlushRows rows, FlushBytes bytes of
	// values, or its first row is FlushInterval old, whichever comes first.
	FlushRows     int
	FlushBytes    int
	FlushInterval time.Duration
	// Writers is the number of batches written concurrently.
	Writers int
	// DrainTimeout bounds shutdown once ctx ends.
	DrainTimeout time.Duration
	// Decoder checks events; Resolve sets its Mapping from Fields.
	Decoder event.Decoder
	// Fields says where each event field comes from.
	Fields event.Fields
	// MaxInflightBytes bounds the event data the worker holds: the messages
	// fetched and not yet settled, and the copies the Bigtable client
	// encodes of the batches it writes. FetchBudget splits it.
	MaxInflightBytes int64
	// UnlistedDeadLetterTTL bounds how long a dead letter without a listed
	// tenant keeps its payload; 0 is tenants.yaml's default_ttl.
	UnlistedDeadLetterTTL time.Duration
	// Erasures returns the erasure ledger in force (nil: no ledger); it
	// is called once per message and must not block.
	Erasures func() *erasure.Ledger
	// ErasuresHeld, when set, says why the ledger in force may be missing
	// an erasure (it is stale): dead letters wait while it does, as rows
	// do, since a letter is a copy of its user's data.
	ErasuresHeld func() error
	// StrictRetention (--strict-retention) dead-letters an event whose
	// record's or own time lies past the clock + Decoder.MaxClockSkew
	// (reason time_ahead) rather than writing it.
	StrictRetention bool
	// Schemas, when values are read through a schema registry
	// (Decoder.Values), is asked before each record is decided: a record
	// whose schema is not known yet waits for it, with the records of its
	// partition behind it, while the other partitions go on (see parking).
	Schemas SchemaSource
}

// SchemaSource says whether a value's schema is at hand, and waits for it.
type SchemaSource interface {
	// Ready reports whether value can be decoded without waiting.
	Ready(value []byte) bool
	// Await waits until it can, or ctx ends (its error then).
	Await(ctx context.Context, value []byte) error
}

// DefaultConfig returns the defaults the worker's flags document.
func DefaultConfig() Config {
	return Config{
		FlushRows:        1000,
		FlushBytes:       8 << 20,
		FlushInterval:    100 * time.Millisecond,
		Writers:          4,
		DrainTimeout:     30 * time.Second,
		Decoder:          event.Decoder{MaxBytes: ingest.DefaultMaxEventBytes, MaxClockSkew: 5 * time.Minute},
		Fields:           event.DefaultFields(),
		MaxInflightBytes: ingest.DefaultMaxInflightBytes,
	}
}

// RegisterFlags declares the flags that fill c, with c's values as their
// defaults.
func (c *Config) RegisterFlags(f *envflag.FlagSet) {
	c.RegisterMappingFlags(f)
	RegisterClockFlag(f, &c.Decoder.MaxClockSkew)
	RegisterUnlistedDeadLetterFlag(f, &c.UnlistedDeadLetterTTL)
	f.Section("Batching")
	f.Advanced()
	f.Int(&c.FlushRows, "flush-rows", "FLUSH_ROWS", c.FlushRows, "flush a batch at this many rows")
	f.BytesInt(&c.FlushBytes, "flush-bytes", "FLUSH_BYTES", c.FlushBytes, "flush a batch at this many bytes of event values")
	f.Duration(&c.FlushInterval, "flush-interval", "FLUSH_INTERVAL", c.FlushInterval, "flush a batch when its first row is this old")
	f.Int(&c.Writers, "writers", "WRITERS", c.Writers, "batches written to Bigtable concurrently")
	f.Bytes(&c.MaxInflightBytes, "max-inflight-bytes", "MAX_INFLIGHT_BYTES", c.MaxInflightBytes, "bytes of events fetched and not yet settled, over all partitions; fetching pauses beyond")
	f.Duration(&c.DrainTimeout, "drain-timeout", "DRAIN_TIMEOUT", c.DrainTimeout, "on SIGTERM, time allowed to flush, commit and leave the group")
}

// RegisterClockFlag declares --max-clock-skew, how far ahead of its
// record an event's time may lie (Decoder.MaxClockSkew): for the worker,
// and the commands that must know how far ahead a copy can reach (forget,
// offboard, retention). *d is its default.
func RegisterClockFlag(f *envflag.FlagSet, d *time.Duration) {
	f.Section("Input mapping")
	f.Duration(d, "max-clock-skew", "MAX_CLOCK_SKEW", *d, "an occurred_at further after the Kafka record timestamp is replaced by the record timestamp")
}

// RegisterUnlistedDeadLetterFlag declares the bound on the dead letters of
// unlisted tenants (UnlistedDeadLetterTTL): for the worker and the
// retention statement. *d is its default.
func RegisterUnlistedDeadLetterFlag(f *envflag.FlagSet, d *time.Duration) {
	f.Section("Dead letters")
	f.Duration(d, "dlq-unlisted-retention", "DLQ_UNLISTED_RETENTION", *d, "how long a dead letter of an event without a listed tenant may keep its payload, from the record's time (0: default_ttl)")
}

// RegisterMappingFlags declares the flags that say how a record becomes an
// event: for the commands that decide as the worker does (redrive).
func (c *Config) RegisterMappingFlags(f *envflag.FlagSet) {
	f.Section("Input mapping")
	f.String(&c.Fields.Tenant, "tenant-from", "TENANT_FROM", c.Fields.Tenant, "where the tenant id comes from: json:PATH (a dotted path), header:NAME or key")
	f.String(&c.Fields.EventID, "event-id-from", "EVENT_ID_FROM", c.Fields.EventID, "where the event id comes from: json:PATH, header:NAME or key")
	f.String(&c.Fields.User, "user-from", "USER_FROM", c.Fields.User, "where the optional user id comes from: json:PATH, header:NAME or key")
	f.String(&c.Fields.Time, "event-time-from", "EVENT_TIME_FROM", c.Fields.Time, "where the optional event time comes from: json:PATH or header:NAME; the record timestamp when absent")
	f.String(&c.Fields.TimeFormat, "event-time-format", "EVENT_TIME_FORMAT", c.Fields.TimeFormat, "how the event time is written: rfc3339, unix-ms, unix-s or auto")
	RegisterTTLFlag(f, &c.Fields.TTL)
	f.BytesInt(&c.Decoder.MaxBytes, "max-event-bytes", "MAX_EVENT_BYTES", c.Decoder.MaxBytes, "larger events go to the dead-letter topic")
}

// RegisterTTLFlag declares --ttl-from (Fields.TTL): for the commands that
// decide as the worker does, and the retention statement (an event may
// then ask for as little as its tenant's min_ttl). *from is its default.
func RegisterTTLFlag(f *envflag.FlagSet, from *string) {
	f.Section("Input mapping")
	f.String(from, "ttl-from", "TTL_FROM", *from, "where an event may give its own TTL (json:PATH or header:NAME; a duration such as 90m or 2d, or whole seconds), clamped to its tenant's min_ttl and max_ttl; unset: every event keeps its tenant's TTL")
}

// CheckClockSkew checks --max-clock-skew, for the commands that register
// it alone (RegisterClockFlag).
func CheckClockSkew(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("--max-clock-skew %s: must not be negative", d)
	}
	return nil
}

// CheckUnlistedDeadLetterTTL checks --dlq-unlisted-retention, for the
// commands that register it alone (RegisterUnlistedDeadLetterFlag).
func CheckUnlistedDeadLetterTTL(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("--dlq-unlisted-retention %s: must not be negative", d)
	}
	return nil
}

// CheckTTLFrom checks --ttl-from, for the commands that register it alone
// (RegisterTTLFlag).
func CheckTTLFrom(from string) error {
	f := event.DefaultFields()
	f.TTL = from
	_, err := f.Compile(fieldFlags)
	return err
}

// fieldFlags name the members of Fields by the flags that fill them, in
// the errors of Fields and of events.
var fieldFlags = event.Labels{Tenant: "--tenant-from", EventID: "--event-id-from", User: "--user-from", Time: "--event-time-from",
	TTL: "--ttl-from", TimeFormat: "--event-time-format"}

// Resolve compiles Fields into the decoder's mapping, then validates.
func (c *Config) Resolve() error {
	m, err := c.Fields.Compile(fieldFlags)
	if err != nil {
		return errors.Join(err, c.Validate())
	}
	c.Decoder.Mapping = m
	return c.Validate()
}

// EncodingBytes bounds the bytes the Bigtable client holds while it writes:
// each writer's batch, encoded once more into its request. A batch is cut
// at FlushBytes, so it holds at most one event beyond.
func (c Config) EncodingBytes() int64 {
	return int64(c.Writers) * int64(c.FlushBytes+c.Decoder.MaxBytes)
}

// FetchBudget is the part of MaxInflightBytes that fetched messages may
// hold. The rest is for the copies the Bigtable client encodes of the
// batches it is writing (up to half): fetched data too, so counted in the
// same bound. Fetched messages are never more than the budget, and the
// encoded copies never more than the messages they copy, so together they
// stay within MaxInflightBytes.
func (c Config) FetchBudget() int64 {
	return c.MaxInflightBytes - min(c.EncodingBytes(), c.MaxInflightBytes/2)
}

// Validate checks the settings, naming the flag at fault.
func (c Config) Validate() error {
	var errs []error
	// Each row writes its event, written_at and, with --ttl-from, ttl.
	cells := 2
	if c.Fields.TTL != "" {
		cells = 3
	}
	if c.FlushRows < 1 || c.FlushRows > sink.MaxMutationsPerRequest/cells {
		errs = append(errs, fmt.Errorf("--flush-rows %d: want 1..%d (each row writes up to %d cells, a request at most %d)", c.FlushRows, sink.MaxMutationsPerRequest/cells, cells, sink.MaxMutationsPerRequest))
	}
	if c.FlushBytes < 1 {
		errs = append(errs, fmt.Errorf("--flush-bytes %d: must be positive", c.FlushBytes))
	}
	if c.FlushInterval <= 0 {
		errs = append(errs, fmt.Errorf("--flush-interval %s: must be positive", c.FlushInterval))
	}
	if c.Writers < 1 {
		errs = append(errs, fmt.Errorf("--writers %d: must be at least 1", c.Writers))
	}
	if c.Decoder.MaxBytes < 1 {
		errs = append(errs, fmt.Errorf("--max-event-bytes %d: must be positive", c.Decoder.MaxBytes))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--drain-timeout %s: must be positive", c.DrainTimeout))
	}
	errs = append(errs, CheckUnlistedDeadLetterTTL(c.UnlistedDeadLetterTTL), CheckClockSkew(c.Decoder.MaxClockSkew))
	if c.MaxInflightBytes < int64(c.Decoder.MaxBytes)+ingest.MessageOverhead {
		errs = append(errs, fmt.Errorf("--max-inflight-bytes %d: must hold at least one event of --max-event-bytes %d", c.MaxInflightBytes, c.Decoder.MaxBytes))
	}
	return errors.Join(errs...)
}
