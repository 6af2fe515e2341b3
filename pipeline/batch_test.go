package pipeline

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/cellttl/cellttl/sink"
)

func TestBatcherReasons(t *testing.T) {
	out := make(chan *batch, 10)
	m := instruments{flushes: noop.Int64Counter{}}
	b := newBatcher(Config{FlushRows: 3, FlushBytes: 10, FlushInterval: time.Second}, out, make(chan *batch, 1), &m, time.Now)
	row := func(size int) sink.Row { return sink.Row{Value: make([]byte, size)} }
	flushed := func(what string) *batch {
		t.Helper()
		select {
		case c := <-out:
			return c
		default:
			t.Fatalf("%s: nothing flushed", what)
			return nil
		}
	}
	if _, ok := b.untilDue(time.Now()); ok {
		t.Error("an empty batch has an age")
	}
	b.add("v1", row(1), item{})
	b.add("v1", row(1), item{})
	if len(out) != 0 {
		t.Fatal("flushed before the third row")
	}
	b.add("v1", row(1), item{})
	if c := flushed("three rows"); len(c.rows) != 3 || len(c.items) != 3 || c.bytes != 3 || c.version != "v1" || c.reason != flushRows {
		t.Errorf("flushed %d rows, %d items, %d bytes, version %q, by %s", len(c.rows), len(c.items), c.bytes, c.version, c.reason)
	}
	b.add("v1", row(10), item{})
	if c := flushed("10 bytes"); c.reason != flushBytes {
		t.Errorf("10 bytes: flushed by %s, want bytes", c.reason)
	}
	b.add("v1", row(1), item{})
	if wait, ok := b.untilDue(b.first.Add(400 * time.Millisecond)); !ok || wait != 600*time.Millisecond {
		t.Errorf("until due: %s %t, want 600ms", wait, ok)
	}
	b.add("v2", row(1), item{})
	if c := flushed("another version"); len(c.rows) != 1 || c.version != "v1" || c.reason != flushVersion {
		t.Errorf("before a row of v2: flushed %d rows of %q by %s, want the row of v1 by config_version", len(c.rows), c.version, c.reason)
	}
	b.flush(flushDrain)
	if c := flushed("drain"); len(c.rows) != 1 || c.version != "v2" || c.reason != flushDrain {
		t.Errorf("drain: flushed %d rows of %q by %s", len(c.rows), c.version, c.reason)
	}
	b.flush(flushDrain)
	if len(out) != 0 {
		t.Error("an empty batch was flushed")
	}
}

// A written batch comes back empty, without its messages, and is reused.
func TestBatchRecycled(t *testing.T) {
	out, free := make(chan *batch, 1), make(chan *batch, 1)
	m := instruments{flushes: noop.Int64Counter{}}
	b := newBatcher(Config{FlushRows: 2, FlushBytes: 1 << 20, FlushInterval: time.Second}, out, free, &m, time.Now)
	b.add("v1", sink.Row{Key: "k1", Value: []byte("x")}, item{})
	b.add("v1", sink.Row{Key: "k2", Value: []byte("y")}, item{})
	c := <-out
	rows := c.rows[:2]
	recycleBatch(c, free)
	if rows[0].Key != "" || rows[1].Value != nil || len(c.rows) != 0 || c.bytes != 0 || c.version != "" {
		t.Errorf("recycled batch keeps %+v, %d rows, %d bytes, version %q", rows, len(c.rows), c.bytes, c.version)
	}
	b.add("v1", sink.Row{Key: "k3"}, item{})
	if b.cur != c {
		t.Error("the next batch is a new one, not the written one")
	}
}
