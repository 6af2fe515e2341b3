package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// scope names the package's metrics.
const scope = "github.com/cellttl/cellttl/ingest"

// meter is the package's meter of mp; a meter that records nothing when
// mp is nil.
func meter(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	return mp.Meter(scope)
}

// consumerMetrics are the instruments the fetcher counts with, and the
// registration of those read at collection time.
type consumerMetrics struct {
	offsetResets metric.Int64Counter
	fetchErrors  metric.Int64Counter
	undecodable  metric.Int64Counter
	registration metric.Registration
}

// registerMetrics reports consumption, lag, commits and the byte budget,
// read from the consumer's state when metrics are collected.
func (c *Consumer) registerMetrics(meter metric.Meter) (*consumerMetrics, error) {
	consumed, err1 := meter.Int64ObservableCounter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("messages fetched from Kafka"))
	lag, err2 := meter.Int64ObservableGauge("cellttl.kafka.consumer.lag", metric.WithUnit("{message}"),
		metric.WithDescription("messages between the next to fetch and the partition's high watermark, per owned partition"))
	committed, err3 := meter.Int64ObservableGauge("cellttl.kafka.consumer.committed_offset", metric.WithUnit("{offset}"),
		metric.WithDescription("offset last committed, per owned partition"))
	owned, err4 := meter.Int64ObservableGauge("cellttl.kafka.consumer.partitions", metric.WithUnit("{partition}"),
		metric.WithDescription("partitions assigned to this worker"))
	inflight, err5 := meter.Int64ObservableGauge("cellttl.inflight.bytes", metric.WithUnit("By"),
		metric.WithDescription("bytes of events fetched and not yet settled (bounded by --max-inflight-bytes)"))
	limit, err8 := meter.Int64ObservableGauge("cellttl.inflight.limit", metric.WithUnit("By"),
		metric.WithDescription("the bound cellttl.inflight.bytes is held under: the part of --max-inflight-bytes for fetched events"))
	resets, err6 := meter.Int64Counter("cellttl.kafka.offset_resets", metric.WithUnit("{reset}"),
		metric.WithDescription("committed offsets found outside the log and reset by --offset-out-of-range"))
	fetchErrors, err7 := meter.Int64Counter("cellttl.kafka.fetch_errors", metric.WithUnit("{error}"),
		metric.WithDescription("failures to read a partition (fetch, offset lookup, leader): each is retried with backoff"))
	undecodable, err9 := meter.Int64Counter("cellttl.kafka.undecodable_batches", metric.WithUnit("{batch}"),
		metric.WithDescription("record batches that could not be decoded (past the decompression bound, or broken), handed on to the dead-letter topic"))
	committedLag, err10 := meter.Int64ObservableGauge("cellttl.kafka.consumer.committed_lag", metric.WithUnit("{message}"),
		metric.WithDescription("messages between the committed offset and the partition's high watermark, per owned partition: what the group has not settled"))
	stalled, err11 := meter.Int64ObservableGauge("cellttl.kafka.consumer.stalled_partitions", metric.WithUnit("{partition}"),
		metric.WithDescription("owned partitions that made no progress for longer than --partition-stall-timeout"))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8, err9, err10, err11); err != nil {
		return nil, fmt.Errorf("register consumer metrics: %w", err)
	}
	base := []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.destination.name", c.cfg.Topic),
		attribute.String("messaging.consumer.group.name", c.cfg.Group),
	}
	baseSet := metric.WithAttributes(base...)
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(consumed, c.consumed.Load(), baseSet)
		o.ObserveInt64(inflight, c.budget.Held())
		o.ObserveInt64(limit, c.budget.Limit())
		s := c.Status()
		o.ObserveInt64(owned, int64(len(s.Partitions)), baseSet)
		nstalled := 0
		for _, p := range s.Partitions {
			attrs := metric.WithAttributes(append(base[:3:3], attribute.String("messaging.destination.partition.id", strconv.Itoa(p.Partition)))...)
			o.ObserveInt64(lag, p.Lag, attrs)
			if p.Committed >= 0 {
				o.ObserveInt64(committed, p.Committed, attrs)
			}
			if p.CommittedLag >= 0 {
				o.ObserveInt64(committedLag, p.CommittedLag, attrs)
			}
			if p.Stalled != "" {
				nstalled++
			}
		}
		o.ObserveInt64(stalled, int64(nstalled), baseSet)
		return nil
	}, consumed, lag, committed, owned, inflight, limit, committedLag, stalled)
	if err != nil {
		return nil, fmt.Errorf("register consumer metrics: %w", err)
	}
	// The counters exist from start-up, at 0, for rate() and dashboards.
	resets.Add(context.Background(), 0)
	fetchErrors.Add(context.Background(), 0)
	undecodable.Add(context.Background(), 0)
	return &consumerMetrics{offsetResets: resets, fetchErrors: fetchErrors, undecodable: undecodable, registration: reg}, nil
}
