package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/tenants"
)

// Sources are where Gather reads the facts: the tenants file in force, the
// table and its clients, the brokers, and the workers' settings that decide
// how long a copy lives.
type Sources struct {
	Config *tenants.Config
	Table  sink.TableConfig
	Admin  *bigtable.AdminClient
	Data   *bigtable.Client

	Brokers  []string
	Security kafkaconn.Security
	// Topic is the input topic; DeadLetters names its dead-letter topics.
	Topic       string
	DeadLetters deadletter.Names
	// TTLFrom is the workers' --ttl-from ("" when events give no TTL of
	// their own); UnlistedDeadLetterTTL their --dlq-unlisted-retention
	// (zero: the default TTL); MaxClockSkew their --max-clock-skew.
	TTLFrom               string
	UnlistedDeadLetterTTL time.Duration
	MaxClockSkew          time.Duration
}

// Gather reads the facts of a statement off the live system: the family's
// GC rule, the topics' settings from the broker, the --ttl-from the
// workers recorded on the table and whether producers are held to the
// clock. now is when the statement is made.
func Gather(ctx context.Context, s Sources, now time.Time) (Facts, error) {
	cfg := s.Config
	f := Facts{Policy: cfg.Policy, UnlistedDeadLettered: cfg.Unlisted == tenants.UnlistedDeadLetter,
		UnlistedBound: cmp.Or(s.UnlistedDeadLetterTTL, cfg.Policy.DefaultTTL), Table: s.Table.Target().String(), OwnTTLs: s.TTLFrom != "",
		Ledger: s.Table.ErasureTable()}
	fam, err := sink.ReadFamily(ctx, s.Admin, s.Table.Target())
	switch {
	case err != nil:
		return f, err
	case !fam.Exists:
		return f, fmt.Errorf("family %s does not exist: run worker setup", s.Table.Target())
	}
	f.FamilyRule = sink.DescribeGC(fam.Rule)
	f.FamilyMaxAge, f.FamilyHasMaxAge = sink.MaxAge(fam.Rule)
	if f.Input, f.DeadLetters, err = readTopics(ctx, s); err != nil {
		return f, err
	}
	// The workers record the --ttl-from they write with on the table: a
	// statement run without the flag (or from another shell) must not
	// leave out the short TTLs their events may ask for.
	rec, err := tablemeta.NewStore(s.Data, s.Table.Table).Read(ctx)
	if err != nil {
		return f, err
	}
	if set, ok := ownTTLsWithin(rec, f.Input, now); ok && !f.OwnTTLs {
		f.OwnTTLs, f.OwnTTLsRecorded = true, set.Describe()
	}
	rt, err := kafkaconn.ReadRecordTimes(ctx, s.Brokers, s.Security, s.Topic, s.MaxClockSkew)
	if err != nil && !errors.Is(err, context.Canceled) {
		f.RecordTimes = err.Error()
	} else {
		f.RecordTimesBounded, f.RecordTimes = rt.Bounded, rt.Summary
	}
	return f, ctx.Err()
}

// readTopics reads the keep of the input topic and of its dead-letter
// topics: those the flags name, and any other class the broker still has
// (named by earlier flags: its letters are there).
func readTopics(ctx context.Context, s Sources) (input TopicKeep, deadLetters []TopicKeep, err error) {
	dlqs := s.DeadLetters.All(s.Topic)
	onBroker, err := deadletter.TopicsOn(ctx, s.Brokers, s.Security, s.DeadLetters.Base(s.Topic))
	if err != nil {
		return input, nil, err
	}
	for _, t := range onBroker {
		if !slices.Contains(dlqs, t) {
			dlqs = append(dlqs, t)
		}
	}
	rs, err := deadletter.ReadTopics(ctx, s.Brokers, s.Security, append([]string{s.Topic}, dlqs...))
	if rs == nil {
		return input, nil, fmt.Errorf("read the topics' settings: %w", err)
	}
	for _, r := range rs[1:] {
		deadLetters = append(deadLetters, topicKeep(r))
	}
	return topicKeep(rs[0]), deadLetters, nil
}

// ownTTLsWithin returns the latest --ttl-from setting recorded on the table
// that was in force within the input topic's keep of now: the topic still
// holds events whose rows were written under it, as short-lived as their
// tenant's min_ttl. A keep that could not be read, or forever, reaches
// back over the whole record.
func ownTTLsWithin(rec tablemeta.State, input TopicKeep, now time.Time) (tablemeta.Setting, bool) {
	for i := len(rec.TTLFrom) - 1; i >= 0; i-- {
		set := rec.TTLFrom[i]
		if i+1 < len(rec.TTLFrom) && input.Unknown == "" && input.Keeps > 0 && now.Sub(rec.TTLFrom[i+1].Since) > input.Keeps {
			break // replaced before the topic's oldest record
		}
		if set.TTLFrom != "" {
			return set, true
		}
	}
	return tablemeta.Setting{}, false
}

// topicKeep is a topic's reading for the statement.
func topicKeep(r deadletter.TopicRetention) TopicKeep {
	k := TopicKeep{Topic: r.Topic, Keeps: r.Keeps}
	if errors.Is(r.Problem, deadletter.ErrTopicMissing) {
		k.Missing = true
		return k
	}
	if r.Problem != nil {
		k.Unknown = r.Problem.Error()
		return k
	}
	retentionText := duration.Format(r.Retention)
	if r.Retention < 0 {
		retentionText = "-1 (forever)"
	}
	check := duration.Format(r.RetentionCheck)
	if r.RetentionCheckAssumed {
		check += " (Kafka's default, assumed: the broker's could not be read)"
	}
	k.Settings = fmt.Sprintf("cleanup.policy=%s, retention.ms %s + segment.ms %s + the broker's retention check %s; %s", r.Policy, retentionText,
		duration.Format(r.Segment), check, r.Stamping.Describe())
	if r.Ahead != "" {
		k.Settings += "; " + r.Ahead
	}
	if r.Keeps <= 0 {
		k.Keeps = Forever
	}
	return k
}
