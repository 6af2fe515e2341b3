// Package btwait is a Bigtable table whose reads and writes are waits of
// the command that bounds its waits (package waitfor): each names its
// table, and each row a read returns is an answer. Without a watch in the
// context (worker run), a call costs one context lookup more.
package btwait

import (
	"context"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/waitfor"
)

// Table is a *bigtable.Table whose ReadRows, ReadRow, Apply and ApplyBulk
// are waits; its other methods are the table's own.
type Table struct {
	*bigtable.Table
	// What each kind of call says it waits for: made once.
	reads, read, write, writes string
}

// Open opens table on c.
func Open(c *bigtable.Client, table string) *Table {
	return &Table{Table: c.Open(table), reads: "read rows of " + table, read: "read a row of " + table,
		write: "write a row of " + table, writes: "write rows to " + table}
}

// ReadRows is bigtable.Table.ReadRows, each row an answer: while f works
// on it, the read is not waiting.
func (t *Table) ReadRows(ctx context.Context, arg bigtable.RowSet, f func(bigtable.Row) bool, opts ...bigtable.ReadOption) error {
	w := waitfor.Begin(ctx, waitfor.Bigtable, t.reads)
	if w == nil {
		return t.Table.ReadRows(ctx, arg, f, opts...)
	}
	return w.End(t.Table.ReadRows(ctx, arg, func(r bigtable.Row) bool {
		w.Pause()
		ok := f(r)
		w.Resume()
		return ok
	}, opts...))
}

// ReadRow is bigtable.Table.ReadRow.
func (t *Table) ReadRow(ctx context.Context, row string, opts ...bigtable.ReadOption) (bigtable.Row, error) {
	w := waitfor.Begin(ctx, waitfor.Bigtable, t.read)
	r, err := t.Table.ReadRow(ctx, row, opts...)
	return r, w.End(err)
}

// Apply is bigtable.Table.Apply.
func (t *Table) Apply(ctx context.Context, row string, m *bigtable.Mutation, opts ...bigtable.ApplyOption) error {
	w := waitfor.Begin(ctx, waitfor.Bigtable, t.write)
	return w.End(t.Table.Apply(ctx, row, m, opts...))
}

// ApplyBulk is bigtable.Table.ApplyBulk.
func (t *Table) ApplyBulk(ctx context.Context, rowKeys []string, muts []*bigtable.Mutation, opts ...bigtable.ApplyOption) ([]error, error) {
	w := waitfor.Begin(ctx, waitfor.Bigtable, t.writes)
	errs, err := t.Table.ApplyBulk(ctx, rowKeys, muts, opts...)
	return errs, w.End(err)
}
