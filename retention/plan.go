package retention

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/rowkey"
)

// wholeTable stands for every row of the table where a tenant is expected.
const wholeTable = "\x00(every tenant)"

// plan decides a row's fate, counts it, and returns its mutation (nil when
// it stays as it is).
func plan(row *row, tenant string, policy, writtenUnder *expiry.Policy, ledger *erasure.Ledger, now time.Time, rep *Report) *bigtable.Mutation {
	if !row.layout || (tenant != wholeTable && row.parts.Tenant != tenant) || len(row.cells) == 0 {
		rep.Foreign++
		return nil
	}
	if ledger.Erased(row.parts.Tenant, row.parts.User, row.parts.Millis, erasure.Position{}) {
		rep.Deleted++
		rep.Erased++
		rep.Bytes += row.bytes
		m := bigtable.NewMutation()
		m.DeleteRow()
		return m
	}
	cell, ttl, ok := row.cell(policy)
	if !ok {
		// A ttl cell that cannot be read: where the row belongs is
		// unknown, so it is left as it is.
		rep.Foreign++
		return nil
	}
	ts := bigtable.Timestamp(cell.Timestamp)
	// Expired, as the row stands or under the file: deleted now rather
	// than left to GC, and never brought back by a later timestamp.
	follows := row.follows(ts)
	current := cell.Expiry
	if !follows {
		current = writtenUnder.ExpiryOf(int64(row.newest()))
	}
	if expiry.Expired(cell.Expiry, now) || expiry.Expired(current, now) {
		rep.Deleted++
		rep.Bytes += row.bytes
		m := bigtable.NewMutation()
		m.DeleteRow()
		return m
	}
	if follows {
		rep.Unchanged++
		return nil
	}
	rep.Bytes += row.bytes
	rep.Rewritten++
	rep.expiry(cell.Expiry)
	return retimeMutation(row, ts, ttl)
}

// retimeMutation sets each column of row at ts with its newest value (the
// ttl column with ttl, the TTL the row now lives, when the row has one),
// and deletes every other version: one mutation, applied atomically.
func retimeMutation(row *row, ts bigtable.Timestamp, ttl []byte) *bigtable.Mutation {
	m := bigtable.NewMutation()
	for col, versions := range row.cells {
		family := versions[0].Column[:len(versions[0].Column)-len(col)-1]
		newest := versions[0]
		for _, v := range versions[1:] {
			if v.Timestamp > newest.Timestamp {
				newest = v
			}
		}
		for _, v := range versions {
			if v.Timestamp != ts {
				// Timestamps are whole milliseconds: the range holds v alone.
				m.DeleteTimestampRange(family, col, v.Timestamp, v.Timestamp+1000)
			}
		}
		value := newest.Value
		if col == rowkey.ColumnTTL && ttl != nil {
			value = ttl
		}
		m.Set(family, col, ts, value)
	}
	return m
}

// attemptTimeout bounds one bulk write of a retention job, the client's
// own retries included: the default --write-timeout of the workers, which
// worker forget's wait between its passes counts on.
const attemptTimeout = 30 * time.Second

// applyBulk applies the mutations; a row that fails fails the batch.
func applyBulk(ctx context.Context, tracer trace.Tracer, tbl *bigtable.Table, keys []string, muts []*bigtable.Mutation) error {
	ctx, span := tracer.Start(ctx, "cellttl.retention.apply", trace.WithAttributes(attribute.Int("cellttl.batch.rows", len(keys))))
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	errs, err := tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return fmt.Errorf("apply %d row mutations: %w", len(keys), err)
	}
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("%s: %w", rowkey.Describe(keys[i]), e)
		}
	}
	return nil
}

func progress(pass int, tenant string, rep Report, start time.Time, done float64) Progress {
	el := time.Since(start)
	p := Progress{Pass: pass, Tenant: tenant, Report: rep, ETA: -1}
	if el > 0 {
		p.Rate = float64(rep.Scanned) / el.Seconds()
	}
	if done > 0 && done <= 1 {
		p.ETA = time.Duration(float64(el) * (1 - done) / done).Truncate(time.Second)
	}
	return p
}

// pacer holds a scan to a number of rows per second.
type pacer struct {
	perSecond int
	start     time.Time
}

// wait sleeps until row n is due; false when ctx ends.
func (p *pacer) wait(ctx context.Context, n int64) bool {
	if p.perSecond <= 0 {
		return ctx.Err() == nil
	}
	due := p.start.Add(time.Duration(float64(n) / float64(p.perSecond) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
