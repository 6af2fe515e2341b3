package pipeline

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
)

// Why a batch was flushed: the cellttl.batch.flushes counter's reason.
const (
	flushRows     = "rows"           // it reached --flush-rows
	flushBytes    = "bytes"          // it reached --flush-bytes
	flushInterval = "interval"       // its first row was --flush-interval old
	flushVersion  = "config_version" // the next item was computed under another tenants config
	flushDrain    = "drain"          // the input ended: shutdown
)

// batcher builds the batches: it flushes the batch being built at a
// number of rows, of bytes, at an age, and before a row of another tenants
// config version, so that every batch was computed under exactly one. It
// runs on the fetch loop's goroutine.
type batcher struct {
	maxRows, maxBytes int
	interval          time.Duration
	out               chan<- *batch
	free              chan *batch // batches written, to be reused
	m                 *instruments
	cur               *batch
	first             time.Time // when the first row was added
	now               func() time.Time
}

func newBatcher(c Config, out chan<- *batch, free chan *batch, m *instruments, now func() time.Time) *batcher {
	return &batcher{maxRows: c.FlushRows, maxBytes: c.FlushBytes, interval: c.FlushInterval, out: out, free: free, m: m, now: now}
}

// add adds a row and its message, flushing first when the row was computed
// under another config version, and after when the batch is full.
func (b *batcher) add(version string, row sink.Row, it item) {
	if b.cur != nil && len(b.cur.rows) > 0 && version != b.cur.version {
		b.flush(flushVersion)
	}
	if b.cur == nil {
		b.cur = b.reuse()
	}
	c := b.cur
	if len(c.rows) == 0 {
		c.version, b.first = version, b.now()
	}
	c.rows = append(c.rows, row)
	c.items = append(c.items, it)
	c.bytes += len(row.Value)
	switch {
	case len(c.rows) >= b.maxRows:
		b.flush(flushRows)
	case c.bytes >= b.maxBytes:
		b.flush(flushBytes)
	}
}

// reuse returns a written batch, emptied, or a new one.
func (b *batcher) reuse() *batch {
	select {
	case c := <-b.free:
		return c
	default:
		return &batch{rows: make([]sink.Row, 0, b.maxRows), items: make([]item, 0, b.maxRows)}
	}
}

// untilDue is how long until the batch being built is due by age; false
// when none is.
func (b *batcher) untilDue(now time.Time) (time.Duration, bool) {
	if b.cur == nil || len(b.cur.rows) == 0 {
		return 0, false
	}
	return b.interval - now.Sub(b.first), true
}

// flush hands the batch being built to the writers, if it has rows: it
// waits for one to take it (backpressure).
func (b *batcher) flush(reason string) {
	if b.cur == nil || len(b.cur.rows) == 0 {
		return
	}
	b.m.flushes.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", reason)))
	b.cur.reason = reason
	b.out <- b.cur
	b.cur = nil
}

// recycle empties a written batch for reuse, letting go of its messages.
func recycleBatch(c *batch, free chan<- *batch) {
	clear(c.rows)
	clear(c.items)
	clear(c.acks)
	c.rows, c.items, c.acks = c.rows[:0], c.items[:0], c.acks[:0]
	c.version, c.bytes, c.reason = "", 0, ""
	select {
	case free <- c:
	default:
	}
}

// writeLoop writes batches until batches closes. A row rejected for good
// goes to the dead-letter topic; a row whose write was cut by the drain
// deadline stays unsettled, so its offset is not committed.
func (p *Pipeline) writeLoop(ctx context.Context, batches <-chan *batch, free chan<- *batch, dead chan<- deadItem) {
	for b := range batches {
		p.write(ctx, b, dead)
		recycleBatch(b, free)
	}
}

func (p *Pipeline) write(ctx context.Context, b *batch, dead chan<- deadItem) {
	rows := b.rows
	start := p.now()
	sctx, span := p.tracer.Start(ctx, "cellttl.write_batch", trace.WithAttributes(
		attribute.Int("cellttl.batch.rows", len(rows)),
		attribute.Int("cellttl.batch.bytes", b.bytes),
		attribute.String("cellttl.config_version", b.version),
	), trace.WithLinks(links(b.items)...))
	results, err := p.rows.Write(sctx, rows)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, "abandoned at the drain deadline")
		span.End()
		p.log.Error("batch abandoned at the drain deadline; its events will be redelivered",
			"rows", len(rows), "config_version", b.version, "err", err)
		return
	}
	// The writer answers for rows of users erased since the decision
	// (sink.Gate): one it withdrew, sent or refused, is settled
	// unwritten; a refused one becomes a letter, which the dead-letter
	// stage judges again as it is produced (screen).
	refused, withdrawn := 0, 0
	for i := range b.items {
		switch results[i] {
		case nil:
			b.items[i].tenant.Written.Add(1)
		case sink.ErrWithdrawn:
			// Its user was erased while the row waited: settled unwritten.
			b.items[i].tenant.Erased.Add(1)
			withdrawn++
		default:
			refused++
			continue
		}
		b.acks = append(b.acks, b.items[i].ack)
	}
	// The written rows are settled together (one lock of the tracker and
	// of the budget), and before the refused ones wait for the dead-letter
	// topic, which may be slow.
	p.src.Settle(b.acks)
	for i := 0; refused > 0; i++ {
		if rerr := results[i]; rerr != nil && rerr != sink.ErrWithdrawn {
			it := &b.items[i]
			dead <- deadItem{dl: deadletter.Letter{Msg: it.msg, Reason: rerr.Error(), Class: reasonBigtableRefused, Tenant: it.id, ExpiresAt: it.expires, KeepUntil: it.keep},
				ack: it.ack, tenant: it.tenant, reason: reasonBigtableRefused, who: rowSubject(&rows[i])}
			refused--
		}
	}
	written := len(b.acks) - withdrawn
	span.SetAttributes(attribute.Int("cellttl.batch.written", written), attribute.Int("cellttl.batch.dead_lettered", len(rows)-len(b.acks)),
		attribute.Int("cellttl.batch.erased", withdrawn))
	span.End()
	// No config version label: every edit would add series until a
	// restart. The version in force is cellttl_config_info's.
	p.metrics.batchRows.Record(ctx, int64(len(rows)))
	p.metrics.batchBytes.Record(ctx, int64(b.bytes))
	p.metrics.batchDuration.Record(ctx, p.now().Sub(start).Seconds())
	p.log.Debug("batch written", "rows", len(rows), "written", written, "flushed_by", b.reason, "config_version", b.version, "took", p.now().Sub(start))
}

// maxLinks bounds the links of one batch span: enough to follow a sample of
// the events into the batch without making spans as large as batches.
const maxLinks = 128

// links returns a link to the producer span of each message that carries a
// W3C trace context header, up to maxLinks.
func links(items []item) []trace.Link {
	var out []trace.Link
	prop := propagation.TraceContext{}
	for i := range items {
		if len(out) == maxLinks {
			break
		}
		hs := items[i].msg.Headers
		if len(hs) == 0 {
			continue
		}
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), headerCarrier(hs)))
		if sc.IsValid() {
			out = append(out, trace.Link{SpanContext: sc})
		}
	}
	return out
}

// headerCarrier reads Kafka headers as a propagation carrier.
type headerCarrier []ingest.Header

func (h headerCarrier) Get(key string) string {
	for _, x := range h {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}

func (h headerCarrier) Set(string, string) {} // read-only

func (h headerCarrier) Keys() []string {
	keys := make([]string, len(h))
	for i, x := range h {
		keys[i] = x.Key
	}
	return keys
}

// rowSubject is whose data a row's letter would copy.
func rowSubject(r *sink.Row) erasure.Subject {
	k, _ := rowkey.Parse(r.Key) // the pipeline's own key
	return erasure.Subject{Tenant: k.Tenant, User: k.User, UserRead: true, Millis: k.Millis, At: position(r.Source)}
}

// position is a row's source as the erasure ledger takes it.
func position(s sink.Source) erasure.Position {
	return erasure.Position{Topic: s.Topic, TopicID: s.TopicID, Partition: s.Partition, Offset: s.Offset}
}
