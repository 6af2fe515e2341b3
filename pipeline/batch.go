package pipeline

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
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
		))
		results, err := p.rows.Write(sctx, rows)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(otelcodes.Error, "abandoned at the drain deadline")
			span.End()
			p.log.Error("batch abandoned at the drain deadline; its events will be redelivered",
				"rows", len(rows), "config_version", b.version, "err", err)
			continue
		}
		written, lastWritten := 0, -1
		for i := range b.items {
			it := &b.items[i]
			if rerr := results[i]; rerr != nil {
				dead <- deadItem{dl: ingest.DeadLetter{Msg: it.msg, Reason: rerr.Error()}, ack: it.ack, tenant: it.tenant, size: it.size}
				continue
			}
			it.tenant.Written.Add(1)
			p.settle(it.ack, it.size)
			written, lastWritten = written+1, i
		}
		if lastWritten >= 0 {
			last := &b.items[lastWritten]
			last.tenant.setSample(Sample{Key: last.row.Key, Timestamp: last.row.Timestamp, Expiry: last.expiry})
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
