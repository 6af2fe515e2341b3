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

// batchLoop groups items into batches by count, bytes and age, and cuts a
// batch early when the tenants config version changes, so that every batch
// was computed under exactly one version. It flushes what it holds when
// items closes, then closes batches.
func (p *Pipeline) batchLoop(items <-chan item, batches chan<- batch) {
	defer close(batches)
	var cur batch
	var bytes int
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		if len(cur.items) == 0 {
			return
		}
		timer.Stop()
		cur.bytes = bytes
		batches <- cur
		cur = batch{items: make([]item, 0, p.cfg.FlushRows)}
		bytes = 0
	}
	cur.items = make([]item, 0, p.cfg.FlushRows)
	for {
		select {
		case it, ok := <-items:
			if !ok {
				flush()
				return
			}
			if len(cur.items) > 0 && it.version != cur.version {
				flush()
			}
			if len(cur.items) == 0 {
				cur.version = it.version
				timer.Reset(p.cfg.FlushInterval)
			}
			cur.items = append(cur.items, it)
			bytes += len(it.row.Value)
			if len(cur.items) >= p.cfg.FlushRows || bytes >= p.cfg.FlushBytes {
				flush()
			}
		case <-timer.C:
			flush()
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
				dead <- deadItem{dl: ingest.DeadLetter{Msg: it.msg, Reason: rerr.Error()}, ack: it.ack, tenant: it.tenant}
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
