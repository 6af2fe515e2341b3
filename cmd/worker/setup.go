package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/release"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
)

// setupCmd is worker setup: the table and family with the GC rule the
// tenants file's strategy needs, the workers' record and the erasure
// ledger.
type setupCmd struct {
	tableOptions
	setup sink.SetupOptions
	// newLedger allows creating an empty erasure ledger beside an event
	// table that holds events (the ledger was lost).
	newLedger bool
	// granularity is --timestamp-granularity: "" takes the table as it
	// is, and creates one of milliseconds.
	granularity string
	wait        waitfor.Config
}

func (o *setupCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker setup", "worker setup: create the table and column family with the GC rule the strategy needs, the family where the workers record the --ttl-from and tenants file version they run, and the erasure ledger.\n"+
		"Exit status: 0 done (or nothing to do), 1 an error (a refusal among them), 2 bad flags or file, 5 Bigtable did not answer within --service-timeout (run it again).", out)
	o.register(f)
	o.wait.RegisterFlags(f, setupWait)
	f.Section("Bigtable")
	f.String(&o.granularity, "timestamp-granularity", envflag.Env, "", "the timestamp granularity of the table: millis or micros, set when setup creates it and never after (default: a new table takes millis, an existing one stays as it is; given, a table of the other is refused). cellttl writes milliseconds, valid under both")
	// Flags only: an environment variable shared by accident (a stray
	// FORCE=true) must not be able to change or wipe a table.
	f.Section("Setup")
	f.Bool(&o.setup.UpdateGCPolicy, "update-gc-policy", "", false, "replace the family's GC rule when it differs, and the record family's when it collects by age (a flag only: no environment variable)")
	f.Bool(&o.setup.Force, "force", "", false, "allow the one-second strategy's 1s max-age on a family that already holds cells, which deletes them (a flag only: no environment variable)")
	f.Bool(&o.newLedger, "new-erasure-ledger", "", false, "create an empty erasure ledger although the event table holds events: every erasure recorded in the lost ledger is forgotten, and worker forget must be run again for those users (a flag only: no environment variable)")
	return f
}

// run sets up what is missing, never replacing a ledger silently.
func (o *setupCmd) run(ctx context.Context, stdout, _ io.Writer) error {
	opts := o.setup
	if o.granularity != "" {
		if _, err := sink.ParseGranularity(o.granularity); err != nil {
			return usageError(fmt.Errorf("--timestamp-granularity %w", err))
		}
	}
	s, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg, target := s.cfg, o.table.Target()
	ledger := sink.Target{Table: o.table.ErasureTable(), Family: erasure.Family}
	// Before anything changes: a ledger is never silently replaced.
	replacing, err := replacesLedger(ctx, s, ledger, target, o.newLedger)
	if err != nil {
		return err
	}
	tables, err := o.table.TableAdmin(ctx)
	if err != nil {
		return err
	}
	defer tables.Close()
	opts.Granularity, opts.Tables = sink.Granularity(o.granularity), tables
	// Refused before anything changes: a table of another granularity.
	if opts.Granularity != "" {
		switch g, err := tables.Granularity(ctx, target.Table); {
		case status.Code(err) == codes.NotFound: // created below
		case err != nil:
			return err
		case g != opts.Granularity:
			return fmt.Errorf("--timestamp-granularity %s: table %s exists with granularity %s, which Bigtable sets when it creates a table and never after (cellttl writes milliseconds, valid under both: leave the flag out to keep the table); nothing was changed", opts.Granularity, target.Table, g)
		}
	}
	want := cfg.Policy.GCMaxAge()
	res, err := sink.Setup(ctx, s.ac, s.dc, target, want, opts)
	if err != nil {
		return fmt.Errorf("setup for %s: %w", describePolicy(cfg.Policy), err)
	}
	if err := setupGranularity(ctx, tables, target.Table, opts.Granularity, res.CreatedTable, stdout); err != nil {
		return err
	}
	rule := sink.DescribeGC(bigtable.MaxAgePolicy(want))
	switch {
	case res.CreatedFamily:
		fmt.Fprintf(stdout, "created family %s (table created: %t) with GC rule %q for %s\n", target, res.CreatedTable, rule, describePolicy(cfg.Policy))
	case res.UpdatedRule:
		fmt.Fprintf(stdout, "changed GC rule of %s from %q to %q for %s\n", target, res.OldRule, rule, describePolicy(cfg.Policy))
	default:
		fmt.Fprintf(stdout, "family %s already has GC rule %q for %s; nothing to do\n", target, rule, describePolicy(cfg.Policy))
	}
	if err := setupRecord(ctx, s.ac, s.dc, target.Table, o.setup.UpdateGCPolicy, stdout); err != nil {
		return err
	}
	return setupLedger(ctx, s, ledger, target, replacing, stdout)
}

// setupGranularity states the table's timestamp granularity, and refuses
// one other than asked: Bigtable sets it at creation alone.
func setupGranularity(ctx context.Context, tables *sink.TableAdmin, table string, asked sink.Granularity, created bool, stdout io.Writer) error {
	g, err := tables.Granularity(ctx, table)
	if err != nil {
		return err
	}
	if asked != "" && g != asked { // created meanwhile by another setup
		return fmt.Errorf("--timestamp-granularity %s: table %s has granularity %s", asked, table, g)
	}
	how := "has"
	if created {
		how = "created with"
	}
	fmt.Fprintf(stdout, "table %s %s timestamp granularity %s: %s\n", table, how, g, g.Means())
	return nil
}

// replacesLedger reports whether setup is about to create an empty ledger
// beside an event table that holds events: the ledger was lost (deleted,
// or --erasure-table mistyped), and an empty one would let the workers
// write every erased user's events again. It refuses unless newLedger.
func replacesLedger(ctx context.Context, s *session, ledger, events sink.Target, newLedger bool) (bool, error) {
	fam, err := sink.ReadFamily(ctx, s.ac, ledger)
	if err != nil || fam.Exists {
		return false, err
	}
	var tables []string
	err = waitfor.Do(ctx, waitfor.Bigtable, "admin: list the tables", func() (err error) { tables, err = s.ac.Tables(ctx); return err })
	if err != nil || !slices.Contains(tables, events.Table) {
		return false, err
	}
	// Events in any family: a table whose --family changed still holds
	// the erased users' rows of the old one.
	holds, err := sink.HoldsEvents(ctx, s.dc, events.Table)
	switch {
	case err != nil || !holds:
		return false, err
	case !newLedger:
		return false, fmt.Errorf("refusing to create the erasure ledger %s: it does not exist, and %s holds events. An empty ledger would forget every erasure recorded in the lost one, "+
			"and the workers would write those users' events again (from a backlog, a replay or a redrive). Restore the ledger table, or check --erasure-table; "+
			"if it is lost for good, pass --new-erasure-ledger, then run `worker forget` again for every user erased before", ledger.Table, events)
	}
	return true, nil
}

// setupLedger creates the erasure ledger's table and family. Its rule never
// changes with the tenants file (each record carries its own expiry as its
// timestamp), so a family found with another rule is reported for a person
// to look at, never replaced. replacing: the event table holds events, and
// the output warns that the erasures recorded before are lost.
func setupLedger(ctx context.Context, s *session, target, events sink.Target, replacing bool, stdout io.Writer) error {
	res, err := sink.Setup(ctx, s.ac, s.dc, target, erasure.GCMaxAge, sink.SetupOptions{})
	if err != nil {
		return fmt.Errorf("setup of the erasure ledger: %w", err)
	}
	rule := sink.DescribeGC(bigtable.MaxAgePolicy(erasure.GCMaxAge))
	if res.CreatedFamily {
		fmt.Fprintf(stdout, "created erasure ledger %s (table created: %t) with GC rule %q: each record expires at its own timestamp\n", target, res.CreatedTable, rule)
		if replacing {
			fmt.Fprintf(stdout, "WARNING: the new erasure ledger is empty, and %s holds events: every erasure recorded before is lost. Until `worker forget` is run again for each user erased before "+
				"(the erasure requests, the msg=forget lines of the audit log), the workers write those users' events again from a backlog, a replay or a redrive, and `worker audit` does not see their rows\n", events)
		}
	} else {
		fmt.Fprintf(stdout, "erasure ledger %s already has GC rule %q; nothing to do\n", target, rule)
	}
	// The expiry index, by which a worker starting reads the records in
	// force alone: a ledger of an earlier release has none. Only setup
	// and forget write the ledger; the workers cannot.
	n, already, err := erasure.NewStore(s.dc, target.Table).Index(ctx, time.Now())
	if err != nil {
		return fmt.Errorf("setup of the erasure ledger: %w (run setup again: the records indexed so far are indexed again, and until it finishes each worker start reads every record)", err)
	}
	switch {
	case !already && !res.CreatedFamily:
		fmt.Fprintf(stdout, "indexed erasure ledger %s by expiry: %d records in force, written by an earlier release; a worker starting now reads the records in force alone\n", target, n)
	case already && n > 0:
		fmt.Fprintf(stdout, "indexed erasure ledger %s by expiry: %d records in force that an earlier release's forget wrote since the last setup (a worker started since did not read them)\n", target, n)
	}
	return nil
}

// setupRecord adds the record's family to the event table (worker setup),
// then records the oldest release that may write the table: refused when
// a newer release recorded a newer one, before setup writes anything
// else of its own (the ledger's index).
func setupRecord(ctx context.Context, ac *bigtable.AdminClient, dc *bigtable.Client, table string, update bool, stdout io.Writer) error {
	done, err := tablemeta.Setup(ctx, ac, table, update)
	if err != nil {
		return fmt.Errorf("setup of the workers' record: %w", err)
	}
	switch done {
	case tablemeta.Created:
		fmt.Fprintf(stdout, "created family %s, where the workers record the --ttl-from and tenants file version they run (GC rule: the newest cell of each column)\n", tablemeta.Target(table))
	case tablemeta.Restored:
		fmt.Fprintf(stdout, "set the GC rule of family %s (the workers' record) back to the newest cell of each column: it collected cells by age\n", tablemeta.Target(table))
	default:
		fmt.Fprintf(stdout, "family %s (the workers' record) already exists; nothing to do\n", tablemeta.Target(table))
	}
	store := tablemeta.NewStore(dc, table)
	rec, err := store.Read(ctx)
	if err != nil {
		return fmt.Errorf("setup of the workers' record: %w", err)
	}
	if err := rec.CheckWriter(table, release.Version); err != nil {
		return fmt.Errorf("refusing to set up: %w", err)
	}
	if err := store.RecordOldestWriter(ctx, release.OldestWriter); err != nil {
		return fmt.Errorf("setup of the workers' record: %w", err)
	}
	if c, _ := release.Compare(rec.OldestWriter, release.OldestWriter); rec.OldestWriter == "" || c < 0 {
		fmt.Fprintf(stdout, "recorded in %s: releases older than %s may no longer write it (this is %s)\n", tablemeta.Target(table), release.OldestWriter, release.Version)
	}
	return nil
}
