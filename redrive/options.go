package redrive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/pipeline"
)

// Options say which letters to redrive and how.
type Options struct {
	Brokers  []string
	Security kafkaconn.Security
	// Topics are the dead-letter topics to read; none reads every
	// dead-letter topic the brokers have of Base (the base and its
	// classes: those the flags name, and those earlier flags named).
	Topics []string
	Base   string
	// InputTopic is the worker's input topic: a letter is trusted only for
	// a record of it, and a record read again from it only when its hash
	// is the one the letter kept.
	InputTopic string
	// Keys, when set, verify each letter's signature: a letter without a
	// good one is not trusted (outcome Untrusted), whatever it says.
	// Without Keys, an Apply run writes only with TrustUnsigned: the
	// operator vouches that only the workers can produce to the
	// dead-letter topics.
	Keys          *deadletter.Keys
	TrustUnsigned bool
	// Partition, when not negative, reads that partition only; From and To
	// bound the offsets read (To exclusive, 0 for the end as it is when
	// the run starts).
	Partition int
	From, To  int64
	// Reasons keeps only letters of these reason classes (all when empty).
	Reasons []string
	// Apply writes; without it the run only says what it would do.
	Apply bool
	// Checkpoint, when set, is a file recording the next offset of each
	// partition read: a run started again with the same file goes on
	// where it stopped. A checkpoint of another selection is refused
	// (selection).
	Checkpoint string
	// MaxEventBytes bounds a record fetched from the input topic.
	MaxEventBytes int
	Now           func() time.Time
	// Erasures returns the erasure ledger in force (nil: none): a letter
	// of an erased user is never written again. The writer should hold
	// the same ledger as its Gate, so a user erased during the run is not
	// written either.
	Erasures func() *erasure.Ledger
	// StrictRetention applies the worker's --strict-retention rule to each
	// letter: an event whose time lies past the letter's time (when the
	// worker saw it, or now if earlier) + the decoder's MaxClockSkew is not
	// written (outcome TimeAhead).
	StrictRetention bool
	// WriteBound bounds one write, the writer's retries included (none
	// when 0): a redrive is a job that must end, and a write Bigtable
	// keeps refusing as a whole (a permission, a table gone) would
	// otherwise be retried for as long as the worker would retry it. The
	// run then stops with the error; run again, it resumes from its
	// checkpoint.
	WriteBound time.Duration
	// Schemas, when values are read through a schema registry, is awaited
	// before each letter is decided, with the run's context: a registry
	// that does not answer is a wait of the run (internal/waitfor), where
	// the decoder's own wait would last until the registry answers.
	Schemas pipeline.SchemaSource
}

// ErrUnverified refuses an Apply run that cannot verify its letters.
var ErrUnverified = errors.New("--apply without --dlq-signing-key-file: letters cannot be verified. Give the workers' signing keys, " +
	"or pass --trust-unsigned-letters if only the workers can produce to the dead-letter topics")

// Validate refuses what no run may do: write letters it cannot verify
// without the operator vouching for them. Unsigned, a letter is whatever
// anyone who may produce to a dead-letter topic wrote: its source, its
// time, its reason.
func (o Options) Validate() error {
	if o.Keys == nil && o.Apply && !o.TrustUnsigned {
		return ErrUnverified
	}
	return nil
}

// selection names the letters a run reads, under the tenants file version
// it decides them by: a checkpoint belongs to one selection, so that a
// run with other filters does not skip what it never read. The key
// decides which letters are trusted: a run with another key must not skip
// the letters this one refused.
func (o Options) selection(tenantsVersion string) string {
	keyID := "none"
	if o.Keys != nil {
		keyID = o.Keys.ID()
	}
	return fmt.Sprintf("topics=%v partition=%d from=%d to=%d reasons=%v tenants=%s key=%s", o.Topics, o.Partition, o.From, o.To, o.Reasons, tenantsVersion, keyID)
}

// topics fills in o.Topics when none is given: every dead-letter topic of
// o.Base the brokers have.
func (o *Options) topics(ctx context.Context) error {
	if len(o.Topics) > 0 {
		return nil
	}
	var err error
	if o.Topics, err = deadletter.TopicsOn(ctx, o.Brokers, o.Security, o.Base); err != nil {
		return err
	}
	if len(o.Topics) == 0 {
		return fmt.Errorf("no dead-letter topic %s (nor %s.<class>) on the brokers", o.Base, o.Base)
	}
	return nil
}
