package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/retention"
)

// retentionCmd is worker retention: for each tenant, every store the
// system knows and the longest a copy can live there, computed from the
// live system (the tenants file, the family's GC rule, the topics'
// settings read from the broker). Its flags: its own, and the worker's
// that decide how long a copy lives, so that it runs with the worker's
// environment. Exit status 1 when a store breaks a tenant's TTL.
type retentionCmd struct {
	tableOptions
	topics                          topicOptions
	tenantList, format, checkpoints string
	// The workers' --ttl-from and --dlq-unlisted-retention: what the
	// statement's copies may keep besides the tenants' TTLs.
	ttlFrom         string
	unlistedLetters time.Duration
	wait            waitfor.Config
}

func newRetentionCmd() *retentionCmd {
	return &retentionCmd{tableOptions: defaultTableOptions(), topics: defaultTopicOptions()}
}

func (ro *retentionCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker retention", "worker retention: the retention statement, store by store, from the live system: how long each tenant's copies can live in the table, the dead-letter topics, the input topic and the erasure ledger (the ids of erased users), and what decides it.\n"+
		"It takes the worker's settings that decide how long a copy lives, from the same flags and environment. Exit status: 0 no store breaks a TTL, 1 some do (or an error), 2 bad flags, 5 Bigtable or Kafka did not answer within --service-timeout.", out)
	f.Section("Statement")
	f.String(&ro.tenantList, "tenant", "", "", "comma-separated tenants, * for the unlisted (default: every tenant and the unlisted)")
	f.String(&ro.format, "format", "", "text", "output: text or json")
	f.String(&ro.checkpoints, "checkpoints", "", "", "comma-separated retime and migrate checkpoint files to look at (a checkpoint written before they held positions holds row keys)")
	ro.tableOptions.register(f)
	ro.topics.register(f)
	pipeline.RegisterTTLFlag(f, &ro.ttlFrom)
	pipeline.RegisterUnlistedDeadLetterFlag(f, &ro.unlistedLetters)
	ro.wait.RegisterFlags(f, readWait)
	return f
}

// run reads the facts off the live system and prints the statement.
func (ro *retentionCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	format, checkpoints := ro.format, ro.checkpoints
	if err := checkFormat(format); err != nil {
		return err
	}
	if err := errors.Join(ro.topics.validate(), pipeline.CheckTTLFrom(ro.ttlFrom), pipeline.CheckUnlistedDeadLetterTTL(ro.unlistedLetters)); err != nil {
		return usageError(err)
	}
	s, _, done, err := ro.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	src := ro.topics.sources(s, ro.table)
	src.TTLFrom, src.UnlistedDeadLetterTTL = ro.ttlFrom, ro.unlistedLetters
	facts, err := retention.Gather(ctx, src, time.Now())
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
	st := retention.StatementOf(facts, splitList(ro.tenantList))
	if format == "json" {
		if err := json.NewEncoder(stdout).Encode(struct {
			Version string `json:"config_version"`
			Clean   bool   `json:"clean"`
			*retention.Statement
		}{s.cfg.Version, st.Clean(), st}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "retention statement: table %s, input topic %s, tenants file version %s\n\n", ro.table.Target(), ro.topics.conn.Topic, s.cfg.Version)
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
