package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure/forget"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/tenants"
)

// retentionOptions are the flags of worker retention: its own, and the
// worker's that decide how long a copy lives.
type retentionOptions struct {
	runOptions
	tenantList, format, checkpoints string
}

func (ro *retentionOptions) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker retention", "worker retention: the retention statement, store by store, from the live system: how long each tenant's copies can live in the table, the dead-letter topics, the input topic and the erasure ledger (the ids of erased users), and what decides it.\n"+
		"It takes the worker's settings that decide how long a copy lives, from the same flags and environment. Exit status: 0 no store breaks a TTL, 1 some do (or an error), 2 bad flags.", out)
	o := &ro.runOptions
	f.Section("Statement")
	f.String(&ro.tenantList, "tenant", "", "", "comma-separated tenants, * for the unlisted (default: every tenant and the unlisted)")
	f.String(&ro.format, "format", "", "text", "output: text or json")
	f.String(&ro.checkpoints, "checkpoints", "", "", "comma-separated retime and migrate checkpoint files to look at (a checkpoint written before they held positions holds row keys)")
	o.tableOptions.register(f)
	o.kafka.RegisterConnectionFlags(f)
	o.dlq.RegisterTopicFlags(f)
	o.pipe.RegisterClockFlags(f)
	o.pipe.RegisterTTLFlag(f)
	o.pipe.RegisterDeadLetterFlags(f)
	return f
}

// runRetention is worker retention: for each tenant, every store the
// system knows and the longest a copy can live there, computed from the
// live system (the tenants file, the family's GC rule, the topics'
// settings read from the broker). It takes the worker's own flags, so it
// runs with the worker's environment. Exit status 1 when a store breaks a
// tenant's TTL.
func runRetention(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ro := retentionOptions{runOptions: defaultRunOptions()}
	if err := parse(ro.flags(stderr), args); err != nil {
		return err
	}
	o, tenantList, format, checkpoints := &ro.runOptions, ro.tenantList, ro.format, ro.checkpoints
	if err := checkFormat(format); err != nil {
		return err
	}
	if err := errors.Join(o.kafka.Validate(), o.dlq.Validate(o.kafka.Topic)); err != nil {
		return usageError(err)
	}
	s, _, done, err := o.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	facts, err := gatherFacts(ctx, o, s.cfg, s)
	if err != nil {
		return err
	}
	for _, path := range splitList(checkpoints) {
		holds, err := retention.CheckpointHoldsIDs(path)
		cp := retention.CheckpointFact{Path: path, HoldsIDs: holds}
		if err != nil {
			cp.Unreadable = err.Error()
		}
		facts.Checkpoints = append(facts.Checkpoints, cp)
	}
	st := retention.StatementOf(facts, splitList(tenantList))
	if format == "json" {
		if err := json.NewEncoder(stdout).Encode(struct {
			Version string `json:"config_version"`
			Clean   bool   `json:"clean"`
			*retention.Statement
		}{s.cfg.Version, st.Clean(), st}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "retention statement: table %s, input topic %s, tenants file version %s\n\n", o.table.Target(), o.kafka.Topic, s.cfg.Version)
		tw := tabwriter.NewWriter(stdout, 2, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tTTL\tSTORE\tLONGEST\tDECIDED BY")
		for _, t := range st.Tenants {
			for _, sl := range t.Stores {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Tenant, t.TTL, sl.Store, sl.Longest, sl.DecidedBy)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\n%d breaches\n", st.Breaches)
		for _, t := range st.Tenants {
			for _, sl := range t.Stores {
				if sl.Breach != "" {
					fmt.Fprintf(stdout, "BREACH %s: %s\n", t.Tenant, sl.Breach)
				}
			}
		}
	}
	if !st.Clean() {
		return &exitError{code: 1, err: fmt.Errorf("%d stores break a tenant's TTL", st.Breaches), quiet: format == "json"}
	}
	return nil
}

// gatherFacts reads what the statement is computed from.
func gatherFacts(ctx context.Context, o *runOptions, cfg *tenants.Config, s *session) (retention.Facts, error) {
	f := retention.Facts{Policy: cfg.Policy, UnlistedDeadLettered: cfg.Unlisted == tenants.UnlistedDeadLetter,
		UnlistedBound: o.pipe.UnlistedDeadLetterTTL, Table: o.table.Target().String(), OwnTTLs: o.pipe.Fields.TTL != "",
		Ledger: o.table.ErasureTable(), LedgerRecordLife: ledgerRecordLife}
	if f.UnlistedBound == 0 {
		f.UnlistedBound = cfg.Policy.DefaultTTL
	}
	fam, err := sink.ReadFamily(ctx, s.ac, o.table.Target())
	switch {
	case err != nil:
		return f, err
	case !fam.Exists:
		return f, fmt.Errorf("family %s does not exist: run worker setup", o.table.Target())
	}
	f.FamilyRule = sink.DescribeGC(fam.Rule)
	f.FamilyMaxAge, f.FamilyHasMaxAge = sink.MaxAge(fam.Rule)
	// The dead-letter topics the flags name, and any other class the broker
	// still has (named by earlier flags: its letters are there).
	dlqs := o.dlq.Topics(o.kafka.Topic).Names()
	onBroker, err := deadletter.TopicsOn(ctx, o.kafka.Brokers, o.kafka.Security, o.dlq.Base(o.kafka.Topic))
	if err != nil {
		return f, err
	}
	for _, t := range onBroker {
		if !slices.Contains(dlqs, t) {
			dlqs = append(dlqs, t)
		}
	}
	topics := append([]string{o.kafka.Topic}, dlqs...)
	rs, err := deadletter.ReadTopics(ctx, o.kafka.Brokers, o.kafka.Security, topics)
	if rs == nil {
		return f, fmt.Errorf("read the topics' settings: %w", err)
	}
	for i, r := range rs {
		k := topicKeep(r)
		if i == 0 {
			f.Input = k
		} else {
			f.DeadLetters = append(f.DeadLetters, k)
		}
	}
	// The workers record the --ttl-from they write with on the table: a
	// statement run without the flag (or from another shell) must not
	// leave out the short TTLs their events may ask for.
	rec, err := tablemeta.NewStore(s.dc, o.table.Table).Read(ctx)
	if err != nil {
		return f, err
	}
	if set, ok := ownTTLsWithin(rec, f.Input, time.Now()); ok && !f.OwnTTLs {
		f.OwnTTLs, f.OwnTTLsRecorded = true, set.Describe()
	}
	rt, err := kafkaconn.ReadRecordTimes(ctx, o.kafka.Brokers, o.kafka.Security, o.kafka.Topic, o.pipe.Decoder.MaxClockSkew)
	if err != nil && !errors.Is(err, context.Canceled) {
		f.RecordTimes = err.Error()
	} else {
		f.RecordTimesBounded, f.RecordTimes = rt.Bounded, rt.Summary
	}
	return f, ctx.Err()
}

// ownTTLsWithin returns the latest --ttl-from setting recorded on the table
// that was in force within the input topic's keep of now: the topic still
// holds events whose rows were written under it, as short-lived as their
// tenant's min_ttl. A keep that could not be read, or forever, reaches
// back over the whole record.
func ownTTLsWithin(rec tablemeta.Record, input retention.TopicKeep, now time.Time) (tablemeta.Setting, bool) {
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

// ledgerRecordLife is forget's rule for how long a ledger record lives,
// without backups: the statement does not know them.
func ledgerRecordLife(f retention.Facts, longestTTL time.Duration) time.Duration {
	return forget.RecordLife(f, 0, longestTTL)
}

// topicKeep is a topic's reading for the statement.
func topicKeep(r deadletter.TopicRetention) retention.TopicKeep {
	k := retention.TopicKeep{Topic: r.Topic, Keeps: r.Keeps}
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
	k.Settings = fmt.Sprintf("cleanup.policy=%s, retention.ms %s + segment.ms %s + the broker's retention check %s", r.Policy, retentionText,
		duration.Format(r.Segment), check)
	if r.Keeps <= 0 {
		k.Keeps = retention.Forever
	}
	return k
}
