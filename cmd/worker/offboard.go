package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/retention/forget"
	"github.com/cellttl/cellttl/rowkey"
)

// offboardCmd is worker offboard: a tenant leaves. It records the
// offboarding in the ledger every worker obeys, drops the tenant's rows at
// once, deletes what the drop raced with, and prints a receipt of what is
// gone and what it cannot reach (retention/forget.Offboard).
type offboardCmd struct {
	tableOptions
	topics      topicOptions
	bound       erasureBound
	tenant      string
	requestedBy string
	dryRun      bool
	rejoin      bool
	secondPass  time.Duration
	backups     time.Duration
	format      string
	replication string
	wait        waitfor.Config
}

func newOffboardCmd() *offboardCmd {
	return &offboardCmd{tableOptions: defaultTableOptions(), topics: defaultTopicOptions(), bound: defaultErasureBound()}
}

func (oc *offboardCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker offboard", "worker offboard: a tenant leaves. It records the tenant's offboarding in the erasure ledger (every worker, redrive, retime and migrate then "+
		"writes and dead-letters no event of the tenant, of any time, through any replay), drops the tenant's rows by key range without a scan, waits for the workers' bound, "+
		"deletes what was written meanwhile, and prints a receipt: what is gone, and how long each copy it cannot reach lasts. It needs the setup identity (DropRowRange).\n"+
		"Exit status: 0 done, 1 an error, 2 bad flags, 5 Bigtable or Kafka did not answer within --service-timeout (run it again: it goes on where it stopped).", out)
	f.Section("Offboarding")
	f.String(&oc.tenant, "tenant", "", "", "the tenant that leaves (required)")
	f.String(&oc.requestedBy, "requested-by", "", "", "who asked, for the audit log and the ledger (required; a ticket or a name)")
	f.Bool(&oc.dryRun, "dry-run", "", false, "count the tenant's rows (a scan of its key range); record and drop nothing")
	f.Bool(&oc.rejoin, "rejoin", "", false, "bring an offboarded tenant back under its id: its events of before it left, and every event appended before now, stay erased; "+
		"the workers write its later events again within their bound, and take the tenants file listing it again (which they refuse until then). A flag only: no environment variable")
	f.Duration(&oc.secondPass, "second-pass-after", "", 0, fmt.Sprintf("wait between the drop and the second pass (default: the workers' bound, %d × --erasure-refresh + --write-timeout); "+
		"with --rejoin, between recording the rejoin and ending the offboarding in the table (default: the longer of the bound and the workers' reread timeout, with 5s to spare)", erasure.StaleAfter))
	f.Duration(&oc.backups, "backup-retention", "BACKUP_RETENTION", 0, "the longest a backup of the table is kept, when backups are taken: listed on the receipt")
	f.String(&oc.format, "format", "", "text", "output: text or json")
	f.String(&oc.replication, "replication", "", replicationWait, "how offboarding accounts for a replicated instance: wait (for consistency around the drop and the second pass) or single-cluster, as for worker forget")
	oc.tableOptions.register(f)
	oc.topics.register(f)
	oc.bound.register(f)
	oc.wait.RegisterFlags(f, jobWait)
	return f
}

// run checks the request, reads how long the topics keep copies, and runs
// the offboarding; the receipt goes to stdout.
func (oc *offboardCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	var errs []error
	if oc.tenant == "" {
		errs = append(errs, errors.New("--tenant is required"))
	} else if err := rowkey.ValidateID("--tenant", oc.tenant); err != nil {
		errs = append(errs, err)
	}
	if oc.requestedBy == "" {
		errs = append(errs, errors.New("--requested-by is required: the audit log names who asked"))
	}
	if oc.rejoin && oc.dryRun {
		errs = append(errs, errors.New("--rejoin takes no --dry-run: it records one row and deletes nothing"))
	}
	errs = append(errs, checkFormat(oc.format), checkReplication(oc.replication), oc.topics.validate())
	if err := errors.Join(errs...); err != nil {
		return usageError(err)
	}
	s, log, done, err := oc.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	facts, err := retention.Gather(ctx, oc.topics.sources(s, oc.table), wallClock())
	if err != nil {
		return fmt.Errorf("read how long the topics keep copies of the tenant's events: %w", err)
	}
	repl, err := replicationOf(ctx, oc.replication, &oc.tableOptions, s, log)
	if err != nil {
		return err
	}
	ledger := erasure.NewStore(s.dc, oc.table.ErasureTable())
	ledger.SetClock(wallClock)
	if oc.rejoin {
		return oc.runRejoin(ctx, s, ledger, facts, repl, stdout, log)
	}
	table := oc.table.Table
	rc, err := forget.Offboard(ctx, btwait.Open(s.dc, table), ledger, forget.OffboardRequest{
		Tenant: oc.tenant, RequestedBy: oc.requestedBy, Operator: operator(), Now: wallClock().UTC().Truncate(time.Millisecond), DryRun: oc.dryRun,
		Drop:            func(ctx context.Context, prefix string) error { return s.ac.DropRowRange(ctx, table, prefix) },
		SecondPassAfter: oc.secondPass, Refresh: oc.bound.refresh, WriteTimeout: oc.bound.writer.AttemptTimeout,
		Table: oc.table.Target().String(), Facts: facts, Backups: oc.backups, BackupsDecidedBy: "--backup-retention",
		Tracers: s.tracers, Replication: repl,
	}, log)
	if rc.Tenant == "" {
		return err // nothing begun
	}
	return printed(stdout, oc.format, rc, err)
}

// runRejoin brings an offboarded tenant back (forget.Rejoin).
func (oc *offboardCmd) runRejoin(ctx context.Context, s *session, ledger *erasure.Store, facts retention.Facts, repl forget.Replication, stdout io.Writer, log *slog.Logger) error {
	input := oc.topics.conn.Input()
	rc, err := forget.Rejoin(ctx, ledger, forget.RejoinRequest{
		Tenant: oc.tenant, RequestedBy: oc.requestedBy, Operator: operator(), Now: wallClock().UTC().Truncate(time.Millisecond),
		MaxClockSkew: oc.topics.maxClockSkew, EndOffsets: input.EndOffsets, TopicID: input.ID,
		Refresh: oc.bound.refresh, WriteTimeout: oc.bound.writer.AttemptTimeout, EndAfter: oc.secondPass,
		Facts: facts, Backups: oc.backups, LongestTTL: s.cfg.Policy.LongestTTL(oc.tenant), Replication: repl,
	}, log)
	if errors.Is(err, forget.ErrNotOffboarded) {
		return usageError(err)
	}
	if rc.Record == nil {
		return err
	}
	return printed(stdout, oc.format, rc, err)
}

// printed writes a receipt as format says, and returns err, or the
// write's error when there was none.
func printed(w io.Writer, format string, rc interface{ WriteText(io.Writer) }, err error) error {
	if format != "json" {
		rc.WriteText(w)
		return err
	}
	if perr := json.NewEncoder(w).Encode(rc); perr != nil && err == nil {
		err = perr
	}
	return err
}
