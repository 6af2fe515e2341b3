package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/sink"
)

// retimeCmd is worker retime: move the cells of tenants' rows to the
// timestamps the current tenants file gives them.
type retimeCmd struct {
	tableOptions
	tenantList, format string
	retime             retention.RetimeOptions
	wait               waitfor.Config
}

func newRetimeCmd() *retimeCmd {
	return &retimeCmd{tableOptions: defaultTableOptions(), retime: retention.RetimeOptions{Passes: 2, PassDelay: time.Minute}}
}

func (o *retimeCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker retime", "worker retime: apply the tenants file's TTLs to the cells already written for some tenants.\n"+
		"Exit status: 0 done, 2 bad flags or file, 3 interrupted (run again with --resume), 5 Bigtable did not answer within --service-timeout (run again with --resume), 1 other errors.", out)
	o.register(f)
	ro := &o.retime
	ro.RegisterFlags(f)
	f.String(&o.tenantList, "tenant", "", "", "comma-separated tenants to re-time (required)")
	f.Bool(&ro.DryRun, "dry-run", "", false, "print the plan and change nothing")
	f.Int(&ro.Passes, "passes", "", ro.Passes, "passes at most; a pass that changes nothing ends the run (the second catches rows written meanwhile under the old file)")
	f.Duration(&ro.PassDelay, "pass-delay", "", ro.PassDelay, "wait between passes")
	f.String(&o.format, "format", "", "text", "output: text or json")
	o.wait.RegisterFlags(f, jobWait)
	return f
}

// run re-times the tenants' rows under the GC rule the file describes,
// obeying the erasure ledger.
func (o *retimeCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	tenantList, format, ro := o.tenantList, o.format, o.retime
	ro.Tenants = splitList(tenantList)
	if len(ro.Tenants) == 0 {
		return usageError(errors.New("--tenant is required"))
	}
	if err := ro.Validate(); err != nil {
		return usageError(err)
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	s, log, done, err := o.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	for _, t := range ro.Tenants {
		if s.cfg.Offboarded[t] {
			// Unlisted it would take default_ttl, a life it never had.
			return usageError(fmt.Errorf("--tenant %s: the tenants file lists it as offboarded, with no TTL to give its rows: `worker offboard --tenant %s` drops them", t, t))
		}
	}
	// Re-timing is right only under the GC rule the file describes.
	if err := sink.CheckGC(ctx, s.ac, o.table.Target(), s.cfg.Policy.GCMaxAge()); err != nil {
		return fmt.Errorf("refusing to re-time: %w (the tenants file says %s)", err, describePolicy(s.cfg.Policy))
	}
	if err := checkRelease(ctx, s, o.table.Table); err != nil {
		return fmt.Errorf("refusing to re-time: %w", err)
	}
	ro.Log, ro.Tracers = log, s.tracers
	ro.Job = retention.Job{Table: o.table.Table, Family: o.table.Family, Config: s.cfg.Version}
	// Rows of erased users are deleted, never given a new timestamp.
	erasures, stopErasures, err := followErasures(ctx, s, o.table, defaultErasureRefresh, log)
	if err != nil {
		return err
	}
	defer stopErasures()
	ro.Erasures, ro.ErasuresHeld = erasures.Current, erasures.Held
	ro.Progress = func(p retention.Progress) {
		eta := "unknown"
		if p.ETA >= 0 {
			eta = duration.Format(p.ETA)
		}
		fmt.Fprintf(stderr, "pass %d: scanned %d, rewritten %d, deleted %d, unchanged %d, foreign %d, %.0f rows/s, ETA %s\n",
			p.Pass, p.Report.Scanned, p.Report.Rewritten, p.Report.Deleted, p.Report.Unchanged, p.Report.Foreign, p.Rate, eta)
	}
	rep, err := retention.Retime(ctx, btwait.Open(s.dc, o.table.Table), o.table.Family, s.cfg.Policy, ro)
	if err != nil {
		if ctx.Err() != nil {
			how := "run it again to finish (it is idempotent)"
			if ro.Checkpoint != "" {
				how = "run it again with --resume --checkpoint " + ro.Checkpoint + " to go on where it stopped"
			}
			return &exitError{code: exitInterrupted, err: fmt.Errorf("interrupted after %d rows: every row is either re-timed or as it was; %s", rep.Scanned, how)}
		}
		return err
	}
	return printRetimed(stdout, format, ro, s.cfg.Version, rep)
}

// printRetimed writes what a retime did, or would do (--dry-run).
func printRetimed(stdout io.Writer, format string, ro retention.RetimeOptions, version string, rep retention.Report) error {
	if format == "json" {
		return json.NewEncoder(stdout).Encode(struct {
			DryRun  bool     `json:"dry_run"`
			Tenants []string `json:"tenants"`
			Shard   string   `json:"shard"`
			Version string   `json:"config_version"`
			retention.Report
		}{ro.DryRun, ro.Tenants, ro.Shard.String(), version, rep})
	}
	head, rewritten, deleted := "re-timed", "re-timed", "deleted (their expiry under the file had passed)"
	if ro.DryRun {
		head, rewritten, deleted = "plan (dry run) for", "to re-time", "to delete at once (their expiry under the file has passed)"
	}
	fmt.Fprintf(stdout, "%s %s under tenants file version %s: scanned %d rows; %d %s, %d %s, %d unchanged, %d outside cellttl's layout (left alone); %d bytes affected\n",
		head, strings.Join(ro.Tenants, ",")+shardNote(ro.Shard), version, rep.Scanned, rep.Rewritten, rewritten, rep.Deleted, deleted, rep.Unchanged, rep.Foreign, rep.Bytes)
	if rep.Rewritten > 0 {
		fmt.Fprintf(stdout, "new expiries from %s to %s\n", rep.NewExpiryFirst.Format(time.RFC3339), rep.NewExpiryLast.Format(time.RFC3339))
	}
	if rep.Vanished > 0 {
		fmt.Fprintf(stdout, "%d of the rows to re-time were deleted meanwhile (worker forget, say): left deleted\n", rep.Vanished)
	}
	return nil
}
