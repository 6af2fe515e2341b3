//go:build !nodemo

package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/reader"
	"github.com/cellttl/cellttl/rowkey"
)

// summaries prints the per-tenant summary every o.every until ctx ends, or
// until, once produced is closed, no cell is left (without --watch): it
// then calls done.
func (env *demoEnv) summaries(ctx context.Context, stdout io.Writer, o *demoCmd, stats *pipeline.Stats, produced <-chan struct{}, done func()) {
	t := time.NewTicker(o.every)
	defer t.Stop()
	target := env.ro.table.Target()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tbl := env.dc.Open(target.Table)
		stored := printSummary(ctx, stdout, tbl, target.Family, env.cfg.Policy, stats, time.Since(env.started))
		select {
		case <-produced:
		default:
			continue // still producing
		}
		if stored == 0 && !o.watch && stats.Totals().Written > 0 {
			fmt.Fprintf(stdout, "t+%s: every tenant's cells are gone, each collected by the emulator's own GC after its TTL: the demo is done (--watch keeps it running)\n",
				time.Since(env.started).Truncate(time.Second))
			done()
			return
		}
	}
}

// printSummary prints, per tenant, what the worker did and what the table
// holds now: stored counts every row GC has not yet removed, live only the
// rows a correct reader returns (reader.Filter), and the first live row
// with its expiry.
func printSummary(ctx context.Context, w io.Writer, tbl *bigtable.Table, family string, p *expiry.Policy, stats *pipeline.Stats, elapsed time.Duration) (stored int) {
	now := time.Now()
	r := reader.New(tbl, family, p)
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "t+%s\ttenant\tttl\twritten\tskipped\tdead-lettered\tstored\tlive\tsample row (expiry)\n", elapsed.Truncate(time.Second))
	for _, id := range demoTenantIDs {
		row := id
		if _, listed := p.Tenants[id]; !listed {
			row = pipeline.UnlistedTenants // walk-in, the one unlisted tenant
		}
		ts := stats.Tenant(row)
		n := countRows(ctx, tbl, id, nil)
		if n < 0 {
			stored++ // a count that failed is not "none"
		} else {
			stored += n
		}
		live := countRows(ctx, tbl, id, reader.Filter(p, family, now))
		sample := "-"
		_ = r.Read(ctx, reader.Query{Tenant: id, Limit: 1}, func(ev reader.Event) bool {
			sample = fmt.Sprintf("%s (expires in %s)", shorten(ev.Key), ev.Expiry.Sub(now).Truncate(100*time.Millisecond))
			return false
		})
		fmt.Fprintf(tw, "\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", id, duration.Format(p.TTL(id)), ts.Written.Load(), ts.Expired.Load(), ts.DeadLettered.Load(), n, live, sample)
	}
	if o := stats.Tenant(pipeline.OtherTenants); o.Consumed.Load() > 0 {
		fmt.Fprintf(tw, "\t(no valid tenant)\t\t%d\t%d\t%d\t\t\t\n", o.Written.Load(), o.Expired.Load(), o.DeadLettered.Load())
	}
	tw.Flush()
	fmt.Fprintln(w)
	return stored
}

func shorten(key string) string {
	if parts, err := rowkey.Parse(key); err == nil {
		return strings.Join([]string{parts.Tenant, "…", parts.User, fmt.Sprint(parts.Millis), parts.EventID}, "#")
	}
	return key
}

// countRows counts a tenant's rows that pass f (every stored row when f is
// nil).
func countRows(ctx context.Context, tbl *bigtable.Table, tenant string, f bigtable.Filter) int {
	filter := bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())
	if f != nil {
		filter = bigtable.ChainFilters(f, filter)
	}
	n := 0
	err := tbl.ReadRows(ctx, bigtable.PrefixRange(rowkey.TenantPrefix(tenant)), func(bigtable.Row) bool { n++; return true }, bigtable.RowFilter(filter))
	if err != nil {
		return -1
	}
	return n
}
