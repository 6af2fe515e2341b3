package retention

import (
	"context"
	"regexp"
	"strconv"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/rowkey"
)

// Table is the table a job reads and writes: a *bigtable.Table, or one
// whose calls are waits of a command that bounds them
// (internal/waitfor/btwait), as the commands open it.
type Table interface {
	ReadRows(ctx context.Context, arg bigtable.RowSet, f func(bigtable.Row) bool, opts ...bigtable.ReadOption) error
	Apply(ctx context.Context, row string, m *bigtable.Mutation, opts ...bigtable.ApplyOption) error
	ApplyBulk(ctx context.Context, rowKeys []string, muts []*bigtable.Mutation, opts ...bigtable.ApplyOption) ([]error, error)
}

// row is one row as read with every version of every cell of the family.
type row struct {
	key    string
	parts  rowkey.Parts
	layout bool // the key follows cellttl's layout
	// cells by column qualifier, each column's versions newest first.
	cells map[string][]bigtable.ReadItem
	bytes int64
}

// readRow gathers a row read with familyFilter.
func readRow(r bigtable.Row, family string) row {
	out := row{key: r.Key(), cells: map[string][]bigtable.ReadItem{}}
	parts, err := rowkey.Parse(r.Key())
	out.parts, out.layout = parts, err == nil
	for _, it := range r[family] {
		col := it.Column[len(family)+1:]
		out.cells[col] = append(out.cells[col], it)
		out.bytes += int64(len(it.Value))
	}
	return out
}

// newest is the latest timestamp of any cell of the row.
func (r *row) newest() bigtable.Timestamp {
	var ts bigtable.Timestamp
	for _, vs := range r.cells {
		for _, v := range vs {
			ts = max(ts, v.Timestamp)
		}
	}
	return ts
}

// follows reports whether every cell of the row has exactly one version,
// at ts.
func (r *row) follows(ts bigtable.Timestamp) bool {
	for _, vs := range r.cells {
		if len(vs) != 1 || vs[0].Timestamp != ts {
			return false
		}
	}
	return len(r.cells) > 0
}

// base is the event time the row key holds: the TTL's start.
func (r *row) base() time.Time { return time.UnixMilli(r.parts.Millis) }

// cell is where the row's cells belong under p: at its tenant's TTL, or,
// when its event gave its own (a ttl cell), at the TTL it asked for
// clamped to its tenant's bounds under p. ttl is then the ttl cell's value
// under p (nil for a row without one). ok is false when the row's ttl cell
// cannot be read: nobody knows where such a row belongs.
func (r *row) cell(p *expiry.Policy) (cell expiry.Cell, ttl []byte, ok bool) {
	vs := r.cells[rowkey.ColumnTTL]
	if len(vs) == 0 {
		return p.Cell(r.parts.Tenant, r.base()), nil, true
	}
	newest := vs[0]
	for _, v := range vs[1:] {
		if v.Timestamp > newest.Timestamp {
			newest = v
		}
	}
	_, requested, err := rowkey.ParseTTL(newest.Value)
	if err != nil {
		return expiry.Cell{}, nil, false
	}
	effective, _ := p.EventTTL(r.parts.Tenant, requested)
	return p.CellTTL(effective, r.base()), rowkey.AppendTTL(nil, effective, requested), true
}

// familyFilter reads every version of every cell of the family.
func familyFilter(family string) bigtable.ReadOption {
	return bigtable.RowFilter(bigtable.FamilyFilter("^" + regexp.QuoteMeta(family) + "$"))
}

// fraction is how far through a tenant's rows key is, from the hash bucket
// that follows the tenant (uniform over 65,536 values): the basis of an ETA.
func fraction(key, tenant string) float64 {
	p := len(rowkey.TenantPrefix(tenant))
	if len(key) < p+4 {
		return 0
	}
	b, err := strconv.ParseUint(key[p:p+4], 16, 32)
	if err != nil {
		return 0
	}
	return float64(b+1) / 65536
}
