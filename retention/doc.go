// Package retention is how long each copy of a tenant's data lives: the
// statement of every store (StatementOf, from Facts that Gather reads off
// the live system), and the jobs that change the retention of data already
// written: re-time a tenant's cells to the current tenants file (Retime),
// delete a user's rows (DeleteUserRows, which the erasure protocol of
// package retention/forget runs), and check every cell against the rule
// (Audit).
//
// It relies on two properties of cellttl's layout: the row key holds each
// event's base time to the millisecond (rowkey), and the rule is a pure
// function (expiry.Policy.Cell), so the correct timestamp of every cell
// under any policy is known exactly, without the event.
//
// A row's mutations are applied atomically by Bigtable, so a re-timed row
// never holds both its old and its new cells, nor neither.
package retention

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/cellttl/cellttl/internal/duration"
)

func fmtTTL(d time.Duration) string { return duration.Format(d) }

// tracerOf is the tracer of tp, which records a span per pass, per step
// and per batch applied; nil records nothing.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	return tp.Tracer("github.com/cellttl/cellttl/retention")
}

// endSpan records a step's counts and error, and ends its span.
func endSpan(span trace.Span, rep Report, err error) {
	span.SetAttributes(attribute.Int64("cellttl.rows.scanned", rep.Scanned), attribute.Int64("cellttl.rows.rewritten", rep.Rewritten),
		attribute.Int64("cellttl.rows.deleted", rep.Deleted), attribute.Int64("cellttl.rows.unchanged", rep.Unchanged))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
