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
	"github.com/cellttl/cellttl/retention"
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
	facts, err := gatherFacts(ctx, o, s)
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

// gatherFacts reads what the statement is computed from, with the
// command's settings.
func gatherFacts(ctx context.Context, o *runOptions, s *session) (retention.Facts, error) {
	return retention.Gather(ctx, retention.Sources{Config: s.cfg, Table: o.table, Admin: s.ac, Data: s.dc,
		Brokers: o.kafka.Brokers, Security: o.kafka.Security, Topic: o.kafka.Topic, DeadLetters: o.dlq,
		TTLFrom: o.pipe.Fields.TTL, UnlistedDeadLetterTTL: o.pipe.UnlistedDeadLetterTTL, MaxClockSkew: o.pipe.Decoder.MaxClockSkew}, time.Now())
}
