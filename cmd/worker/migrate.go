package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// migrateCmd is worker migrate: take a table full of data from one tenants
// file to another whose GC rule differs (default_ttl, strategy), in the
// order that keeps every cell's promises.
type migrateCmd struct {
	tableOptions
	against, format        string
	yes, replicated, force bool
	only                   int
	retime                 retention.RetimeOptions
	wait                   waitfor.Config
}

func newMigrateCmd() *migrateCmd {
	return &migrateCmd{tableOptions: defaultTableOptions(), retime: retention.RetimeOptions{Passes: 1}}
}

func (o *migrateCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker migrate", "worker migrate: move a table written under --against to --tenants, whose default_ttl or strategy differs.\n"+
		"Without --yes it prints the plan. Stop the workers first; start them with the new file when it is done.\n"+
		"Exit status: 0 done (or planned), 1 an error, 2 bad flags or files, 3 interrupted (run it again), 5 Bigtable did not answer within --service-timeout (run it again).", out)
	o.register(f)
	f.Section("Migration")
	f.String(&o.against, "against", "", "", "the tenants file the table was written under (required)")
	f.Bool(&o.yes, "yes", "", false, "apply the plan")
	f.Bool(&o.replicated, "replicated", "", false, "the table is replicated: raise the GC max-age by at most 90 days at a time")
	f.Bool(&o.force, "force", "", false, "switch to one-second even though rows outside cellttl's layout would lose their cells")
	f.Int(&o.only, "step", "", 0, "run this step of the plan alone (1, 2...; 0: every step left): how N processes, each with a --shard, share the re-timing steps")
	f.String(&o.format, "format", "", "text", "output: text or json")
	o.retime.RegisterFlags(f)
	o.wait.RegisterFlags(f, jobWait)
	return f
}

// run prints the plan, and with --yes applies it.
func (o *migrateCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	against, format, yes, replicated, force, only, ro := o.against, o.format, o.yes, o.replicated, o.force, o.only, o.retime
	if err := ro.Validate(); err != nil {
		return usageError(err)
	}
	if against == "" {
		return usageError(errors.New("--against, the tenants file the table was written under, is required"))
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	oldCfg, err := tenants.Load(against)
	if err != nil {
		return usageError(fmt.Errorf("--against: %w", err))
	}
	s, log, done, err := o.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	m := &migration{o: &o.tableOptions, s: s, log: log, against: against, oldCfg: oldCfg, ro: ro, only: only, tbl: btwait.Open(s.dc, o.table.Table)}
	run, err := m.steps(ctx, replicated)
	if err != nil {
		return err
	}
	steps := run.Steps
	foreign, err := retention.ForeignRowsAtRisk(ctx, m.tbl, o.table.Family, oldCfg.Policy, s.cfg.Policy, s.tracers)
	if err != nil {
		return err
	}
	if format == "json" && !yes {
		return json.NewEncoder(stdout).Encode(struct {
			Steps   []retention.Step `json:"steps"`
			Foreign int64            `json:"foreign_rows"`
		}{steps, foreign})
	}
	// With --format json the plan and the result go to stdout as one
	// object at the end; the steps' progress goes to the log.
	text := stdout
	if format == "json" {
		text = io.Discard
	}
	m.printPlan(text, run)
	if foreign > 0 {
		fmt.Fprintf(text, "%d rows are not in cellttl's layout: under a 1s max-age GC deletes their cells.\n", foreign)
		if !force {
			return usageError(fmt.Errorf("refusing to switch to one-second while %d rows outside cellttl's layout hold cells; --force to do it anyway", foreign))
		}
	}
	if !yes {
		fmt.Fprintln(stdout, "Nothing changed: run again with --yes to apply.")
		return nil
	}
	rep, err := m.apply(ctx, steps, stderr)
	if err != nil {
		return err
	}
	return m.printDone(stdout, format, steps, rep)
}

// printDone writes what the migration did.
func (m *migration) printDone(w io.Writer, format string, steps []retention.Step, rep retention.Report) error {
	if format == "json" {
		return json.NewEncoder(w).Encode(struct {
			Steps []retention.Step `json:"steps"`
			retention.Report
		}{steps, rep})
	}
	fmt.Fprintf(w, "Done: %d rows re-timed, %d deleted, %d unchanged, %d outside cellttl's layout (left alone). Start the workers with %s.\n",
		rep.Rewritten, rep.Deleted, rep.Unchanged, rep.Foreign, m.o.tenants.Path)
	return nil
}

// migration is one run of worker migrate, past its flags.
type migration struct {
	o       *tableOptions
	s       *session
	log     *slog.Logger
	against string          // --against
	oldCfg  *tenants.Config // the file the table was written under
	ro      retention.RetimeOptions
	only    int // --step
	tbl     *btwait.Table
}

// steps reads the family's GC rule and plans this run
// (retention.PlanRun).
func (m *migration) steps(ctx context.Context, replicated bool) (retention.MigrationRun, error) {
	target := m.o.table.Target()
	fam, err := sink.ReadFamily(ctx, m.s.ac, target)
	if err != nil {
		return retention.MigrationRun{}, err
	}
	current, isMaxAge := sink.MaxAge(fam.Rule)
	run, err := retention.PlanRun(m.oldCfg.Policy, m.s.cfg.Policy, current, isMaxAge && fam.Exists, sink.DescribeGC(fam.Rule), replicated, m.only, m.ro.Shard)
	switch {
	case errors.Is(err, retention.ErrNotMaxAge), errors.Is(err, retention.ErrOffPath):
		return run, fmt.Errorf("family %s: %w", target, err)
	case err != nil:
		return run, usageError(err)
	}
	return run, nil
}

// printPlan writes the edit and every step of the plan, marking those done
// and the one this run takes.
func (m *migration) printPlan(w io.Writer, run retention.MigrationRun) {
	fmt.Fprintf(w, "Migration of %s from %s (version %s) to %s (version %s):\n", m.o.table.Target(), m.against, m.oldCfg.Version, m.o.tenants.Path, m.s.cfg.Version)
	for _, c := range tenants.Compare(m.oldCfg.Policy, m.s.cfg.Policy).Tenants {
		fmt.Fprintf(w, "  %s\n", c)
	}
	fmt.Fprintln(w, "Steps, each resumable (run the command again):")
	fmt.Fprintln(w, "  0. stop the workers (Kafka keeps the events meanwhile)")
	for i, st := range run.Plan {
		mark := ""
		switch {
		case run.ThisRun(i):
			mark = " (this run" + shardNote(m.ro.Shard) + ")"
		case run.Done(i):
			mark = " (done)"
		}
		fmt.Fprintf(w, "  %d. %s%s\n", i+1, st, mark)
	}
	fmt.Fprintf(w, "  %d. start the workers with %s\n", len(run.Plan)+1, m.o.tenants.Path)
}

// apply runs the steps, obeying the erasure ledger, with the re-timing's
// progress on stderr. An interrupted run exits exitInterrupted.
func (m *migration) apply(ctx context.Context, steps []retention.Step, stderr io.Writer) (retention.Report, error) {
	o, s, log, ro := m.o, m.s, m.log, m.ro
	ro.Log, ro.Tracers = log, s.tracers
	ro.Job = retention.Job{Table: o.table.Table, Family: o.table.Family, Config: m.oldCfg.Version + " to " + s.cfg.Version}
	if err := checkRelease(ctx, s, o.table.Table); err != nil {
		return retention.Report{}, fmt.Errorf("refusing to migrate: %w", err)
	}
	// Rows of erased users are deleted, never given a new timestamp.
	erasures, stopErasures, err := followErasures(ctx, s, o.table, defaultErasureRefresh, log)
	if err != nil {
		return retention.Report{}, err
	}
	defer stopErasures()
	ro.Erasures, ro.ErasuresHeld = erasures.Current, erasures.Held
	ro.Progress = func(p retention.Progress) {
		fmt.Fprintf(stderr, "re-timing: scanned %d, rewritten %d, deleted %d, unchanged %d, %.0f rows/s\n",
			p.Report.Scanned, p.Report.Rewritten, p.Report.Deleted, p.Report.Unchanged, p.Rate)
	}
	setGC := func(ctx context.Context, maxAge time.Duration) error {
		return waitfor.Do(ctx, waitfor.Bigtable, "admin: set the GC rule of "+o.table.Target().String(), func() error {
			return s.ac.SetGCPolicy(ctx, o.table.Table, o.table.Family, bigtable.MaxAgePolicy(maxAge))
		})
	}
	rep, err := retention.Migrate(ctx, m.tbl, o.table.Family, m.oldCfg.Policy, s.cfg.Policy, steps, setGC, ro, func(i int, st retention.Step, done bool) {
		if done {
			log.Info("migration step done", "step", i+1, "what", st.String())
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return rep, &exitError{code: exitInterrupted, err: fmt.Errorf("interrupted: %w; run the same command again to go on", err)}
		}
		return rep, err
	}
	return rep, nil
}
