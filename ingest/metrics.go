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
	aborted      metric.Int64Counter
	registration metric.Registration
}

// gauges are the instruments read from the consumer's state when metrics
// are collected.
type gauges struct {
	consumed                                       metric.Int64ObservableCounter
	lag, committed, owned, inflight, limit         metric.Int64ObservableGauge
	committedLag, stalled, lastStable, unstableLag metric.Int64ObservableGauge
}

// registerMetrics reports consumption, lag, commits and the byte budget,
// read from the consumer's state when metrics are collected.
func (c *Consumer) registerMetrics(meter metric.Meter) (*consumerMetrics, error) {
	g, err := newGauges(meter)
	if err != nil {
		return nil, err
	}
	resets, err1 := meter.Int64Counter("cellttl.kafka.offset_resets", metric.WithUnit("{reset}"),
		metric.WithDescription("committed offsets found outside the log and reset by --offset-out-of-range"))
	fetchErrors, err2 := meter.Int64Counter("cellttl.kafka.fetch_errors", metric.WithUnit("{error}"),
		metric.WithDescription("failures to read a partition (fetch, offset lookup, leader): each is retried with backoff"))
	undecodable, err3 := meter.Int64Counter("cellttl.kafka.undecodable_batches", metric.WithUnit("{batch}"),
		metric.WithDescription("record batches that could not be decoded (past the decompression bound, or broken), handed on to the dead-letter topic"))
	aborted, err4 := meter.Int64Counter("cellttl.kafka.aborted_records", metric.WithUnit("{record}"),
		metric.WithDescription("records of aborted transactions skipped under --isolation-level read_committed: never written nor dead-lettered, their offsets settled"))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("register consumer metrics: %w", err)
	}
	base := []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.destination.name", c.cfg.Topic),
		attribute.String("messaging.consumer.group.name", c.cfg.Group),
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.observe(o, g, base)
		return nil
	}, g.consumed, g.lag, g.committed, g.owned, g.inflight, g.limit, g.committedLag, g.stalled, g.lastStable, g.unstableLag)
	if err != nil {
		return nil, fmt.Errorf("register consumer metrics: %w", err)
	}
	// The counters exist from start-up, at 0, for rate() and dashboards.
	for _, n := range []metric.Int64Counter{resets, fetchErrors, undecodable, aborted} {
		n.Add(context.Background(), 0)
	}
	return &consumerMetrics{offsetResets: resets, fetchErrors: fetchErrors, undecodable: undecodable, aborted: aborted, registration: reg}, nil
}

// newGauges creates the instruments read at collection time.
func newGauges(meter metric.Meter) (*gauges, error) {
	var g gauges
	var errs [10]error
	g.consumed, errs[0] = meter.Int64ObservableCounter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("messages fetched from Kafka"))
	g.lag, errs[1] = meter.Int64ObservableGauge("cellttl.kafka.consumer.lag", metric.WithUnit("{message}"),
		metric.WithDescription("messages between the next to fetch and the end of what is read (the last stable offset under read_committed, the high watermark under read_uncommitted), per owned partition"))
	g.committed, errs[2] = meter.Int64ObservableGauge("cellttl.kafka.consumer.committed_offset", metric.WithUnit("{offset}"),
		metric.WithDescription("offset last committed, per owned partition"))
	g.owned, errs[3] = meter.Int64ObservableGauge("cellttl.kafka.consumer.partitions", metric.WithUnit("{partition}"),
		metric.WithDescription("partitions assigned to this worker"))
	g.inflight, errs[4] = meter.Int64ObservableGauge("cellttl.inflight.bytes", metric.WithUnit("By"),
		metric.WithDescription("bytes of events fetched and not yet settled (bounded by --max-inflight-bytes)"))
	g.limit, errs[5] = meter.Int64ObservableGauge("cellttl.inflight.limit", metric.WithUnit("By"),
		metric.WithDescription("the bound cellttl.inflight.bytes is held under: the part of --max-inflight-bytes for fetched events"))
	g.committedLag, errs[6] = meter.Int64ObservableGauge("cellttl.kafka.consumer.committed_lag", metric.WithUnit("{message}"),
		metric.WithDescription("messages between the committed offset and the end of what is read (the last stable offset under read_committed, the high watermark under read_uncommitted), per owned partition: what the group has not settled"))
	g.stalled, errs[7] = meter.Int64ObservableGauge("cellttl.kafka.consumer.stalled_partitions", metric.WithUnit("{partition}"),
		metric.WithDescription("owned partitions that made no progress for longer than --partition-stall-timeout"))
	g.lastStable, errs[8] = meter.Int64ObservableGauge("cellttl.kafka.consumer.last_stable_offset", metric.WithUnit("{offset}"),
		metric.WithDescription("the partition's last stable offset, per owned partition: the first record of the oldest transaction still open (the high watermark when none is); read_committed reads nothing past it"))
	g.unstableLag, errs[9] = meter.Int64ObservableGauge("cellttl.kafka.consumer.unstable_lag", metric.WithUnit("{message}"),
		metric.WithDescription("messages between the last stable offset and the high watermark, per owned partition: held back by a transaction still open, which read_committed waits for"))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("register consumer metrics: %w", err)
	}
	return &g, nil
}

// observe reports the consumer's state: its totals and, per owned
// partition (a label bound by the topic's configuration, never chosen by a
// producer), its offsets and lags.
func (c *Consumer) observe(o metric.Observer, g *gauges, base []attribute.KeyValue) {
	baseSet := metric.WithAttributes(base...)
	o.ObserveInt64(g.consumed, c.consumed.Load(), baseSet)
	o.ObserveInt64(g.inflight, c.budget.Held())
	o.ObserveInt64(g.limit, c.budget.Limit())
	s := c.Status()
	o.ObserveInt64(g.owned, int64(len(s.Partitions)), baseSet)
	nstalled := 0
	for _, p := range s.Partitions {
		attrs := metric.WithAttributes(append(base[:3:3], attribute.String("messaging.destination.partition.id", strconv.Itoa(p.Partition)))...)
		o.ObserveInt64(g.lag, p.Lag, attrs)
		if p.Committed >= 0 {
			o.ObserveInt64(g.committed, p.Committed, attrs)
		}
		if p.CommittedLag >= 0 {
			o.ObserveInt64(g.committedLag, p.CommittedLag, attrs)
		}
		if p.LastStable >= 0 {
			o.ObserveInt64(g.lastStable, p.LastStable, attrs)
		}
		if p.UnstableLag >= 0 {
			o.ObserveInt64(g.unstableLag, p.UnstableLag, attrs)
		}
		if p.Stalled != "" {
			nstalled++
		}
	}
	o.ObserveInt64(g.stalled, int64(nstalled), baseSet)
}
