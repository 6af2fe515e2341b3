package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/tablemeta"
)

// auditCmd is worker audit: every cell against the rule of the current
// tenants file. Exit status 1 when any breaks it, for scheduled jobs.
type auditCmd struct {
	tableOptions
	audit                     retention.AuditOptions
	tenantList, format, shard string
	wait                      waitfor.Config
}

func (o *auditCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker audit", "worker audit: per tenant, live and expired-but-stored rows, cells that break the rule, when the live data leaves.\n"+
		"Exit status: 0 every cell follows the rule and no erased user has a row, 1 otherwise (or an error, the erasure ledger missing among them), 2 bad flags, 5 Bigtable did not answer within --service-timeout.", out)
	o.register(f)
	f.Section("Audit")
	f.String(&o.tenantList, "tenant", "", "", "comma-separated tenants (default: the whole table)")
	f.Int64(&o.audit.Sample, "sample", "", 0, "read at most this many rows per tenant (0: all)")
	f.String(&o.shard, "shard", "", "0/1", "this process's part I/N of each tenant's rows, I from 0 (a Kubernetes Indexed Job's completion index): N processes share the work without overlap")
	f.String(&o.format, "format", "", "text", "output: text or json")
	o.wait.RegisterFlags(f, jobWait)
	return f
}

// run audits the table against the file and the erasure ledger.
func (o *auditCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	ao, tenantList, format := o.audit, o.tenantList, o.format
	var err error
	shard := o.shard
	if ao.Shard, err = retention.ParseShard(shard); err != nil {
		return usageError(err)
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	ao.Tenants = splitList(tenantList)
	s, _, done, err := o.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	// Rows of erased users still present are a finding.
	// Without the ledger the audit cannot tell them: it fails, as a
	// missing ledger is not an empty one.
	records, _, err := erasure.NewStore(s.dc, o.table.ErasureTable()).Load(ctx, time.Now())
	if errors.Is(err, erasure.ErrMissing) {
		return &exitError{code: 1, err: fmt.Errorf("cannot audit the rows of erased users: %w", err)}
	}
	if err != nil {
		return err
	}
	ao.Erasures = erasure.NewLedger(records, time.Now())
	ao.Tracers = s.tracers
	// The settings the rows were written with: a row that lost its ttl
	// cell cannot be told, so the history is said beside the counts.
	rec, err := tablemeta.NewStore(s.dc, o.table.Table).Read(ctx)
	if err != nil {
		return err
	}
	rep, err := retention.Audit(ctx, btwait.Open(s.dc, o.table.Table), o.table.Family, s.cfg.Policy, ao)
	if err != nil {
		return err
	}
	if err := printAudit(stdout, format, s.cfg.Version, rep, rec.TTLFrom); err != nil {
		return err
	}
	if !rep.Clean() {
		return &exitError{code: 1, err: errors.New("some cells break the rule of the tenants file (worker retime repairs them), outlive the TTL their event gave itself (worker retime repairs them), lie outside cellttl's layout, or belong to users the erasure ledger says were erased (worker forget again) or to a tenant that left (worker offboard again)"), quiet: format == "json"}
	}
	return nil
}

// printAudit writes the audit, as text or json, with the --ttl-from
// settings recorded for the table.
func printAudit(stdout io.Writer, format, version string, rep *retention.AuditReport, settings []tablemeta.Setting) error {
	if format == "json" {
		return json.NewEncoder(stdout).Encode(struct {
			Version string `json:"config_version"`
			Clean   bool   `json:"clean"`
			*retention.AuditReport
			TTLFrom []tablemeta.Setting `json:"ttl_from_settings"`
		}{version, rep.Clean(), rep, settings})
	}
	tw := tabwriter.NewWriter(stdout, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tTTL\tLIVE ROWS\tLIVE BYTES\tEXPIRED, NOT COLLECTED\tBREAK THE RULE\tLEAVE WITHIN HOUR\tDAY\tWEEK\tLATER\tOF ERASED USERS\tLONGER THAN OWN TTL")
	for _, t := range rep.Tenants {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d (%d bytes)\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", t.Tenant, t.TTL, t.LiveRows, t.LiveBytes, t.ExpiredRows, t.ExpiredBytes,
			t.RuleBreaking, t.LeavesWithin["hour"], t.LeavesWithin["day"], t.LeavesWithin["week"], t.LeavesWithin["later"], t.ErasedRows, t.LongerThanOwnTTL)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range rep.Tenants {
		if t.OffboardedAt != nil {
			fmt.Fprintf(stdout, "%s left at %s: its offboarding is in force in the erasure ledger, and a row of it is one of an erased user (worker offboard again)\n", t.Tenant, t.OffboardedAt.Format(time.RFC3339Nano))
		}
	}
	if rep.Foreign > 0 {
		fmt.Fprintf(stdout, "%d rows not in cellttl's layout, e.g. %q\n", rep.Foreign, rep.ForeignSamples)
	}
	if len(rep.LongerThanOwnTTLSamples) > 0 {
		fmt.Fprintf(stdout, "rows stored longer than the TTL their event gave itself (a version written without its --ttl-from; worker retime repairs them), e.g. %q\n", rep.LongerThanOwnTTLSamples)
	}
	for _, set := range settings {
		fmt.Fprintf(stdout, "rows written with %s since %s (recorded by %s", set.Describe(), set.Since.Format(time.RFC3339), set.By)
		if set.Change {
			fmt.Fprint(stdout, ", a change")
		}
		fmt.Fprintln(stdout, ")")
	}
	if len(settings) > 1 {
		fmt.Fprintln(stdout, "the setting changed: a row written under the other whose ttl cell has been collected cannot be told by this audit")
	}
	return nil
}
