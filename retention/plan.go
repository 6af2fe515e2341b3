package retention

import (
	"context"
	"fmt"
	"regexp"
	"sync"
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
// it stays as it is); rewrite says the mutation sets cells (retimeMutation)
// rather than deleting the row, and so must not land on a row deleted
// since it was read (applyRewrites).
func plan(row *row, tenant string, policy, writtenUnder *expiry.Policy, ledger *erasure.Ledger, now time.Time, rep *Report) (m *bigtable.Mutation, rewrite bool) {
	if !row.layout || (tenant != wholeTable && row.parts.Tenant != tenant) || len(row.cells) == 0 {
		rep.Foreign++
		return nil, false
	}
	if ledger.Erased(row.parts.Tenant, row.parts.User, row.parts.Millis, erasure.Position{}) {
		rep.Deleted++
		rep.Erased++
		rep.Bytes += row.bytes
		return deleteRow(), false
	}
	cell, ttl, ok := row.cell(policy)
	if !ok {
		// A ttl cell that cannot be read: where the row belongs is
		// unknown, so it is left as it is.
		rep.Foreign++
		return nil, false
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
		return deleteRow(), false
	}
	if follows {
		rep.Unchanged++
		return nil, false
	}
	rep.Bytes += row.bytes
	rep.Rewritten++
	rep.expiry(cell.Expiry)
	return retimeMutation(row, ts, ttl), true
}

func deleteRow() *bigtable.Mutation {
	m := bigtable.NewMutation()
	m.DeleteRow()
	return m
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

// rewriters is how many conditional rewrites a pass has in flight: each
// is one request (Bigtable applies no conditional mutation in bulk).
const rewriters = 8

// applyRewrites applies rewrites (retimeMutation) each only while its row
// still has a cell of family, and returns how many found it gone. A rewrite
// is a set of cells: applied blindly to a row that worker forget deleted
// between the read and the write, it would write the row back, an erased
// user's event at its new TTL, whether the ledger's record covers it by
// time or only by its mark, which the row does not carry. Bigtable checks
// and mutates one row atomically: forget's delete lands before the check
// (nothing written) or after the write (the row goes).
func applyRewrites(ctx context.Context, tracer trace.Tracer, tbl Table, family string, keys []string, muts []*bigtable.Mutation) (vanished int64, err error) {
	if len(keys) == 0 {
		return 0, nil
	}
	ctx, span := tracer.Start(ctx, "cellttl.retention.rewrite", trace.WithAttributes(attribute.Int("cellttl.batch.rows", len(keys))))
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	exists := bigtable.ChainFilters(bigtable.FamilyFilter("^"+regexp.QuoteMeta(family)+"$"), bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
	matched := make([]bool, len(keys))
	errs := make([]error, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(rewriters, len(keys)) {
		wg.Go(func() {
			for i := range next {
				cond := bigtable.NewCondMutation(exists, muts[i], nil)
				errs[i] = tbl.Apply(ctx, keys[i], cond, bigtable.GetCondMutationResult(&matched[i]))
			}
		})
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, e := range errs {
		if e != nil {
			return vanished, fmt.Errorf("rewrite %s: %w", rowkey.Describe(keys[i]), e)
		}
		if !matched[i] {
			vanished++
		}
	}
	return vanished, nil
}

// applyBulk applies the mutations; a row that fails fails the batch.
func applyBulk(ctx context.Context, tracer trace.Tracer, tbl Table, keys []string, muts []*bigtable.Mutation) error {
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
