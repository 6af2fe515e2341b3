package pipeline

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/ingest"
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

// batchPolicy decides when the batch being built is flushed: at a number
// of rows, of bytes, at an age, and before an item of another tenants
// config version, so that every batch was computed under exactly one.
type batchPolicy struct {
	maxRows, maxBytes int
	interval          time.Duration
	now               func() time.Time // read once per batch, not per item
	cur               batch
	first             time.Time // when the first item was added
}

func newBatchPolicy(c Config) *batchPolicy {
	p := &batchPolicy{maxRows: c.FlushRows, maxBytes: c.FlushBytes, interval: c.FlushInterval, now: time.Now}
	p.cur.items = make([]item, 0, c.FlushRows)
	return p
}

// Empty reports whether the batch being built has no item yet.
func (p *batchPolicy) Empty() bool { return len(p.cur.items) == 0 }

// Fits reports whether it may join the batch being built.
func (p *batchPolicy) Fits(it *item) bool {
	return len(p.cur.items) == 0 || it.version == p.cur.version
}

// Add adds it (Fits must hold) and reports whether the batch is now due,
// and why.
func (p *batchPolicy) Add(it item) (due bool, reason string) {
	if len(p.cur.items) == 0 {
		p.cur.version, p.first = it.version, p.now()
	}
	p.cur.items = append(p.cur.items, it)
	p.cur.bytes += len(it.row.Value)
	switch {
	case len(p.cur.items) >= p.maxRows:
		return true, flushRows
	case p.cur.bytes >= p.maxBytes:
		return true, flushBytes
	}
	return false, ""
}

// UntilNext is how long until the batch is due by age; false when the
// batch is empty.
func (p *batchPolicy) UntilNext(now time.Time) (time.Duration, bool) {
	if len(p.cur.items) == 0 {
		return 0, false
	}
	return p.interval - now.Sub(p.first), true
}

// Flush returns the batch built so far, nil-itemed when empty, and starts
// a new one.
func (p *batchPolicy) Flush() batch {
	b := p.cur
	if len(b.items) > 0 {
		p.cur = batch{items: make([]item, 0, p.maxRows)}
	}
	return b
}

// batchLoop groups items into batches as the batch policy says. It flushes
// what it holds when items closes, then closes batches.
func (p *Pipeline) batchLoop(items <-chan item, batches chan<- batch) {
	defer close(batches)
	policy := newBatchPolicy(p.cfg)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func(reason string) {
		timer.Stop()
		if b := policy.Flush(); len(b.items) > 0 {
			p.metrics.flushes.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", reason)))
			batches <- b
		}
	}
	for {
		select {
		case it, ok := <-items:
			if !ok {
				flush(flushDrain)
				return
			}
			if !policy.Fits(&it) {
				flush(flushVersion)
			}
			first := policy.Empty()
			if due, reason := policy.Add(it); due {
				flush(reason)
			} else if first {
				wait, _ := policy.UntilNext(policy.first) // its age starts now
				timer.Reset(wait)
			}
		case <-timer.C:
			flush(flushInterval)
		}
	}
}

// writeLoop writes batches until batches closes. A row rejected for good
// goes to the dead-letter topic; a row whose write was cut by the drain
// deadline stays unsettled, so its offset is not committed.
func (p *Pipeline) writeLoop(ctx context.Context, batches <-chan batch, dead chan<- deadItem) {
	for b := range batches {
		rows := make([]sink.Row, len(b.items))
		for i := range b.items {
			rows[i] = b.items[i].row
		}
		start := time.Now()
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
			continue
		}
		written := 0
		for i := range b.items {
			it := &b.items[i]
			if rerr := results[i]; rerr != nil {
				dead <- deadItem{dl: ingest.DeadLetter{Msg: it.msg, Reason: rerr.Error()}, ack: it.ack, tenant: it.tenant, reason: reasonBigtableRefused}
				continue
			}
			it.tenant.Written.Add(1)
			p.src.Done(it.ack)
			written++
		}
		span.SetAttributes(attribute.Int("cellttl.batch.written", written), attribute.Int("cellttl.batch.dead_lettered", len(rows)-written))
		span.End()
		vattr := metric.WithAttributes(attribute.String("cellttl.config_version", b.version))
		p.metrics.batchRows.Record(ctx, int64(len(rows)), vattr)
		p.metrics.batchBytes.Record(ctx, int64(b.bytes), vattr)
		p.metrics.batchDuration.Record(ctx, time.Since(start).Seconds(), vattr)
		p.log.Debug("batch written", "rows", len(rows), "written", written, "config_version", b.version, "took", time.Since(start))
	}
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
type headerCarrier []kafka.Header

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
