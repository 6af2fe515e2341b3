package forget

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/rowkey"
)

// Offboarding: a tenant leaves. Its rows are one key range (tenant#), so
// Bigtable drops them at once, without a scan, whatever their number; the
// ledger records the offboarding first, a record of no user that every
// worker, redrive, retime and migrate obeys for every event of the tenant
// while it is in force, which is forever: an event of the tenant produced
// later, or a replay of the whole topic in ten years, is erased as one
// appended before. The record costs each worker one entry.

// OffboardRequest says which tenant leaves, and what the protocol needs to
// know of the workers and of the stores it cannot reach.
type OffboardRequest struct {
	Tenant string
	// RequestedBy is who asked (the audit log and the ledger); Operator,
	// who runs the command (the audit log).
	RequestedBy, Operator string
	// Now is when offboarding began, to the millisecond: when the tenant
	// left, as its record says.
	Now time.Time
	// DryRun counts the tenant's rows (a scan); it records and drops
	// nothing.
	DryRun bool
	// Drop drops every row whose key starts with prefix (the table admin
	// API's DropRowRange: the admin identity's right, not the workers').
	Drop func(ctx context.Context, prefix string) error
	// SecondPassAfter is the wait between the drop and the second pass;
	// zero waits the workers' bound, erasure.Bound(Refresh, WriteTimeout).
	SecondPassAfter, Refresh, WriteTimeout time.Duration
	// Table names the events' table for the receipt.
	Table string
	// Facts say how long the topics keep copies. Backups, when positive,
	// is how long a backup of the table is kept, set by BackupsDecidedBy.
	Facts            retention.Facts
	Backups          time.Duration
	BackupsDecidedBy string
	// Tracers records the spans of the deletions (nil: none).
	Tracers trace.TracerProvider
	// Replication says how offboarding accounts for a replicated instance.
	Replication Replication
}

// OffboardReceipt is what offboarding did, for the operator who asked.
type OffboardReceipt struct {
	Tenant      string `json:"tenant"`
	RequestedBy string `json:"requested_by"`
	DryRun      bool   `json:"dry_run"`
	// Record is the ledger record in force: this run's, or the one an
	// earlier run wrote (AlreadyOffboarded), whose RecordedAt says when the
	// tenant left.
	Record            *erasure.Erasure `json:"ledger_record,omitempty"`
	AlreadyOffboarded bool             `json:"already_offboarded"`
	Table             string           `json:"table"`
	Ledger            string           `json:"ledger_table"`
	// Dropped is the key prefix dropped (empty for a dry run); a drop
	// counts nothing. CountedRows is a dry run's count.
	Dropped     string `json:"dropped_prefix,omitempty"`
	CountedRows int64  `json:"counted_rows,omitempty"`
	// SecondPassRows are the rows the second pass found and deleted: what
	// batches in flight wrote after the drop.
	SecondPassRows  int64  `json:"second_pass_rows"`
	SecondPassAfter string `json:"second_pass_after"`
	// Unreachable are the stores offboarding cannot erase from, and the
	// longest a copy of the tenant's events can remain in each from now.
	Unreachable []retention.StoreLife `json:"unreachable_stores"`
	Replication ReplicationReceipt    `json:"replication"`
}

// Offboard offboards r.Tenant: it records the offboarding in ledger (once:
// a run again finds it and goes on), waits for the record to reach every
// cluster, drops the tenant's rows, waits for every worker to be past its
// bound, deletes what the drop raced with, and logs one audit line. The
// receipt says what was done even with an error, once anything was.
func Offboard(ctx context.Context, rows retention.Table, ledger *erasure.Store, r OffboardRequest, log *slog.Logger) (rc OffboardReceipt, err error) {
	if err := rowkey.ValidateID("tenant", r.Tenant); err != nil {
		return OffboardReceipt{}, err
	}
	wait := r.SecondPassAfter
	if wait == 0 {
		wait = erasure.Bound(r.Refresh, r.WriteTimeout)
	}
	rc = OffboardReceipt{Tenant: r.Tenant, RequestedBy: r.RequestedBy, DryRun: r.DryRun, Table: r.Table, Ledger: ledger.Table(), SecondPassAfter: wait.String()}
	rc.Unreachable, _ = unreachable(r.Facts, r.Backups, r.BackupsDecidedBy, 0)
	// The replication waits are forget's: an eraser of no user.
	e := &eraser{r: &Request{Replication: r.Replication}, log: log, store: ledger}
	defer func() { rc.Replication = e.rc.Replication }()
	if !r.DryRun {
		if err := checkClock(ctx, ledger, r.Now, log); err != nil {
			return rc, err
		}
	}
	if err := e.probeReplication(ctx); err != nil {
		return rc, err
	}
	if rc.Record, rc.AlreadyOffboarded, err = record(ctx, ledger, r); err != nil || r.DryRun {
		if err == nil {
			var rep retention.UserRowsReport
			rep, err = retention.DeleteTenantRows(ctx, rows, r.Tenant, true, r.Tracers)
			rc.CountedRows = rep.Rows
		}
		return rc, err
	}
	if err := e.replicated(ctx, ledger.Table(), "the offboarding's record, before the bound counts"); err != nil {
		return rc, fmt.Errorf("%w (the tenant is offboarded in the ledger: run the same command again)", err)
	}
	prefix := rowkey.TenantPrefix(r.Tenant)
	if err := r.Drop(ctx, prefix); err != nil {
		return rc, fmt.Errorf("drop the rows of tenant %s (the tenant is offboarded in the ledger: run the same command again): %w", r.Tenant, err)
	}
	rc.Dropped = prefix
	select {
	case <-ctx.Done():
		return rc, fmt.Errorf("interrupted before the second pass (the tenant is offboarded and its rows dropped: run the same command again): %w", ctx.Err())
	case <-time.After(wait):
	}
	if err := e.replicated(ctx, r.Replication.Table, "the rows written before the bound, before the second pass"); err != nil {
		return rc, err
	}
	rep, err := retention.DeleteTenantRows(ctx, rows, r.Tenant, false, r.Tracers)
	rc.SecondPassRows = rep.Rows
	if err != nil {
		return rc, fmt.Errorf("%w (run the same command again)", err)
	}
	if err := e.replicated(ctx, r.Replication.Table, "the deletions"); err != nil {
		return rc, err
	}
	if e.r.Replication.Wait != nil {
		e.rc.Replication.Waited = true
		e.rc.Replication.Summary = fmt.Sprintf("waited for consistency (%d waits): before reading, the ledger after recording, the table before the second pass and after it", e.rc.Replication.waits)
	}
	log.Info("offboard", "tenant", r.Tenant, "requested_by", r.RequestedBy, "operator", r.Operator, "left_at", rc.Record.RecordedAt,
		"already_offboarded", rc.AlreadyOffboarded, "dropped_prefix", prefix, "second_pass_rows", rep.Rows, "table", r.Table, "ledger", ledger.Table())
	return rc, nil
}

// record records r's offboarding (not for a dry run), or finds it
// recorded by an earlier run: in force, already says so. It is recorded
// after the tenant's last record (a rejoin), whatever this host's clock
// says: the record recorded last is in force.
func record(ctx context.Context, ledger *erasure.Store, r OffboardRequest) (_ *erasure.Erasure, already bool, _ error) {
	recs, err := ledger.TenantRecords(ctx, r.Tenant, r.Now)
	if err != nil {
		return nil, false, err
	}
	at := r.Now
	if n := len(recs); n > 0 {
		if recs[n-1].Whole() {
			return &recs[n-1], true, nil
		}
		at = later(at, recs[n-1].RecordedAt.Add(time.Millisecond))
	}
	if r.DryRun {
		return nil, false, nil
	}
	rec := erasure.Erasure{Tenant: r.Tenant, Offboard: true, UpTo: erasure.Whole, RecordedAt: at, RequestedBy: r.RequestedBy}
	// The record before the drop: a crash between the two leaves the
	// tenant erased to the workers, and running again drops.
	if err := ledger.Put(ctx, rec); err != nil {
		return nil, false, err
	}
	return &rec, false, nil
}

// WriteText writes the receipt for the operator who asked, in words.
func (rc OffboardReceipt) WriteText(w io.Writer) {
	switch {
	case rc.DryRun:
		fmt.Fprintf(w, "would offboard tenant %s (dry run): %d rows in %s\n", rc.Tenant, rc.CountedRows, rc.Table)
	default:
		fmt.Fprintf(w, "offboarded tenant %s, requested by %s\n", rc.Tenant, rc.RequestedBy)
	}
	if r := rc.Record; r != nil {
		how := "recorded now"
		if rc.AlreadyOffboarded {
			how = "recorded by an earlier run, requested by " + r.RequestedBy
		}
		fmt.Fprintf(w, "left at: %s (%s); ledger record in %s never expires: no event of the tenant is written or dead-lettered again, through any replay\n",
			r.RecordedAt.Format(time.RFC3339Nano), how, rc.Ledger)
	}
	if rc.Dropped != "" {
		fmt.Fprintf(w, "gone now: every row of %s whose key starts with %q, dropped at once; second pass after %s deleted %d rows written meanwhile\n",
			rc.Table, rc.Dropped, rc.SecondPassAfter, rc.SecondPassRows)
	}
	if rc.Replication.Summary != "" {
		fmt.Fprintf(w, "replication: %s\n", rc.Replication.Summary)
	}
	fmt.Fprintln(w, "not erased by this command (copies of the tenant's events can remain up to):")
	for _, s := range rc.Unreachable {
		fmt.Fprintf(w, "  %s: %s (%s)\n", s.Store, s.Longest, s.DecidedBy)
	}
	fmt.Fprintln(w, "dead letters of the tenant still in those topics keep their payload until the topic deletes them; a redrive writes none of them")
}
