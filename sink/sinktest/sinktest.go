// Package sinktest writes rows as the worker writes them, for the tests of
// the packages that read, re-time or erase them: the cells come from the
// production path (expiry.Policy for the timestamp, sink.Writer for the
// mutation), so a test of a reader cannot pass on rows the worker would
// never write.
package sinktest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/sink"
)

// Event is the row the worker writes for an event of tenant whose base
// time is base, under key, with its written_at cell.
func Event(p *expiry.Policy, tenant, key string, base time.Time, value []byte) sink.Row {
	return sink.Row{Key: key, Timestamp: p.Cell(tenant, base).Timestamp, Value: value, WrittenAt: true}
}

// Write writes rows to tgt through sink.Writer and fails t on any error:
// the request's, or one row's.
func Write(t testing.TB, dc *bigtable.Client, tgt sink.Target, rows []sink.Row) {
	t.Helper()
	w, err := sink.NewWriter(dc, tgt, sink.DefaultWriterConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(context.Background(), rows)
	if err != nil {
		t.Fatalf("writing %d rows to %s: %v", len(rows), tgt, err)
	}
	for i, e := range res {
		if e != nil {
			t.Fatalf("writing row %s to %s: %v", rows[i].Key, tgt, e)
		}
	}
}
