package retention

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/rowkey"
)

// UserRows say whose rows to delete.
type UserRows struct {
	Tenant, User string
	// Before, when set, erases only the events whose time is before it.
	Before time.Time
	DryRun bool
	// Tracers records the spans of the erasure and of its batches (nil:
	// none).
	Tracers trace.TracerProvider
	// Pseudonyms name the user in errors (nil: no user named).
	Pseudonyms *Pseudonyms
}

// UserRowsReport says what DeleteUserRows erased (or, dry, would erase).
type UserRowsReport struct {
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
	// Range is the key range erased, for the audit trail.
	Start string `json:"start"`
	End   string `json:"end"`
}

// DeleteUserRows deletes a user's rows now, expired or not: the user's rows are one
// key range (tenant, hash bucket, user), and with Before, the part of it
// before a time. Rows are deleted in batches; a crash part-way leaves the
// rest, and running again finishes.
func DeleteUserRows(ctx context.Context, tbl Table, o UserRows) (_ UserRowsReport, err error) {
	ctx, span := tracerOf(o.Tracers).Start(ctx, "cellttl.forget", trace.WithAttributes(attribute.String("cellttl.tenant", o.Tenant), attribute.Bool("cellttl.dry_run", o.DryRun)))
	defer func() { endSpan(span, Report{}, err) }()
	if err := rowkey.ValidateID("tenant", o.Tenant); err != nil {
		return UserRowsReport{}, err
	}
	if problem := rowkey.IDProblem(o.User); problem != "" {
		// Not quoted: the error reaches logs, which outlive every TTL.
		return UserRowsReport{}, fmt.Errorf("%s: the user id %s", o.Pseudonyms.Ref(o.Tenant, o.User), problem)
	}
	start := rowkey.UserPrefix(o.Tenant, o.User)
	end := rowkey.PrefixEnd(start)
	if !o.Before.IsZero() {
		end = rowkey.UserTimeKey(o.Tenant, o.User, max(0, o.Before.UnixMilli()))
	}
	rep, err := deleteRange(ctx, tbl, start, end, o.DryRun, tracerOf(o.Tracers))
	if err != nil {
		return rep, fmt.Errorf("delete the rows of %s: %w", o.Pseudonyms.Ref(o.Tenant, o.User), err)
	}
	return rep, nil
}

// DeleteTenantRows deletes every row of tenant still there, expired or
// not, by reading its key range (tenant#): the second pass of an
// offboarding, after the range was dropped, deletes what a batch in
// flight wrote meanwhile. Dry, it counts.
func DeleteTenantRows(ctx context.Context, tbl Table, tenant string, dryRun bool, tracers trace.TracerProvider) (_ UserRowsReport, err error) {
	ctx, span := tracerOf(tracers).Start(ctx, "cellttl.offboard", trace.WithAttributes(attribute.String("cellttl.tenant", tenant), attribute.Bool("cellttl.dry_run", dryRun)))
	defer func() { endSpan(span, Report{}, err) }()
	if err := rowkey.ValidateID("tenant", tenant); err != nil {
		return UserRowsReport{}, err
	}
	start := rowkey.TenantPrefix(tenant)
	rep, err := deleteRange(ctx, tbl, start, rowkey.PrefixEnd(start), dryRun, tracerOf(tracers))
	if err != nil {
		return rep, fmt.Errorf("delete the rows of tenant %s: %w", tenant, err)
	}
	return rep, nil
}

// deleteRange deletes the rows of [start, end) in batches, counting them
// and their bytes; dry, it only counts.
func deleteRange(ctx context.Context, tbl Table, start, end string, dryRun bool, tracer trace.Tracer) (UserRowsReport, error) {
	rep := UserRowsReport{Start: start, End: end}
	var keys []string
	var muts []*bigtable.Mutation
	var applyErr error
	flush := func() {
		if len(keys) > 0 && !dryRun {
			applyErr = applyBulk(ctx, tracer, tbl, keys, muts)
		}
		keys, muts = keys[:0], muts[:0]
	}
	err := tbl.ReadRows(ctx, bigtable.NewRange(start, end), func(r bigtable.Row) bool {
		rep.Rows++
		for _, items := range r {
			for _, it := range items {
				rep.Bytes += int64(len(it.Value))
			}
		}
		m := bigtable.NewMutation()
		m.DeleteRow()
		keys, muts = append(keys, r.Key()), append(muts, m)
		if len(keys) == batchRows {
			flush()
		}
		return applyErr == nil
	})
	if err == nil {
		flush()
		err = applyErr
	}
	return rep, err
}
