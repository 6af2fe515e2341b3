package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// scope names the package's metrics.
const scope = "github.com/cellttl/cellttl/ingest"

// consumerMetrics are the instruments the fetcher counts with, and the
// registration of those read at collection time.
type consumerMetrics struct {
	offsetResets metric.Int64Counter
	fetchErrors  metric.Int64Counter
	undecodable  metric.Int64Counter
	aborted      metric.Int64Counter
	rebalances   metric.Int64Counter
	// rebalanced is the time a worker owned no partition across a
	// rebalance: from a generation's end to the next one's assignment.
	rebalanced   metric.Float64Histogram
	registration metric.Registration
}

// gauges are the instruments read from the consumer's state when metrics
// are collected.
type gauges struct {
	consumed                                       metric.Int64ObservableCounter
	lag, committed, owned, inflight, limit         metric.Int64ObservableGauge
	committedLag, stalled, lastStable, unstableLag metric.Int64ObservableGauge
	timeLag                                        metric.Float64ObservableGauge
}

// registerMetrics reports consumption, lag, commits and the byte budget,
// read from the consumer's state when metrics are collected, with the
// package's meter of mp (one that records nothing when mp is nil).
func (c *Consumer) registerMetrics(mp metric.MeterProvider) (*consumerMetrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(scope)
	g, err := newGauges(meter)
	if err != nil {
		return nil, err
	}
	var m consumerMetrics
	var errs []error
	for _, s := range []struct {
		dst              *metric.Int64Counter
		name, unit, desc string
	}{
		{&m.offsetResets, "cellttl.kafka.offset_resets", "{reset}",
			"committed offsets found outside the log and reset by --offset-out-of-range"},
		{&m.fetchErrors, "cellttl.kafka.fetch_errors", "{error}",
			"failures to read a partition (fetch, offset lookup, leader): each is retried with backoff"},
		{&m.undecodable, "cellttl.kafka.undecodable_batches", "{batch}",
			"record batches that could not be decoded (past the decompression bound, or broken), handed on to the dead-letter topic"},
		{&m.aborted, "cellttl.kafka.aborted_records", "{record}",
			"records of aborted transactions skipped under --isolation-level read_committed: never written nor dead-lettered, their offsets settled"},
		{&m.rebalances, "cellttl.kafka.consumer.rebalances", "{rebalance}",
			"generations of the consumer group this worker joined (each follows a rebalance, the first its join)"},
	} {
		*s.dst, err = meter.Int64Counter(s.name, metric.WithUnit(s.unit), metric.WithDescription(s.desc))
		errs = append(errs, err)
	}
	m.rebalanced, err = meter.Float64Histogram("cellttl.kafka.consumer.rebalance.duration", metric.WithUnit("s"),
		metric.WithDescription("time this worker owned no partition across a rebalance: from a generation's end (or its own start) to the next generation's assignment"))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register consumer metrics: %w", err)
	}
	base := []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.destination.name", c.cfg.Topic),
		attribute.String("messaging.consumer.group.name", c.cfg.Group),
	}
	m.registration, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.observe(o, g, base)
		return nil
	}, g.consumed, g.lag, g.committed, g.owned, g.inflight, g.limit, g.committedLag, g.stalled, g.lastStable, g.unstableLag, g.timeLag)
	if err != nil {
		return nil, fmt.Errorf("register consumer metrics: %w", err)
	}
	// The counters exist from start-up, at 0, for rate() and dashboards.
	for _, n := range []metric.Int64Counter{m.offsetResets, m.fetchErrors, m.undecodable, m.aborted, m.rebalances} {
		n.Add(context.Background(), 0)
	}
	return &m, nil
}

// newGauges creates the instruments read at collection time.
func newGauges(meter metric.Meter) (*gauges, error) {
	var g gauges
	var err error
	g.consumed, err = meter.Int64ObservableCounter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("messages fetched from Kafka"))
	errs := []error{err}
	for _, s := range []struct {
		dst              *metric.Int64ObservableGauge
		name, unit, desc string
	}{
		{&g.lag, "cellttl.kafka.consumer.lag", "{message}",
			"messages between the next to fetch and the end of what is read (the last stable offset under read_committed, the high watermark under read_uncommitted), per owned partition"},
		{&g.committed, "cellttl.kafka.consumer.committed_offset", "{offset}",
			"offset last committed, per owned partition"},
		{&g.owned, "cellttl.kafka.consumer.partitions", "{partition}",
			"partitions assigned to this worker"},
		{&g.inflight, "cellttl.inflight.bytes", "By",
			"bytes of events fetched and not yet settled (bounded by --max-inflight-bytes)"},
		{&g.limit, "cellttl.inflight.limit", "By",
			"the bound cellttl.inflight.bytes is held under: the part of --max-inflight-bytes for fetched events"},
		{&g.committedLag, "cellttl.kafka.consumer.committed_lag", "{message}",
			"messages between the committed offset and the end of what is read (the last stable offset under read_committed, the high watermark under read_uncommitted), per owned partition: what the group has not settled"},
		{&g.stalled, "cellttl.kafka.consumer.stalled_partitions", "{partition}",
			"owned partitions that made no progress for longer than --partition-stall-timeout"},
		{&g.lastStable, "cellttl.kafka.consumer.last_stable_offset", "{offset}",
			"the partition's last stable offset, per owned partition: the first record of the oldest transaction still open (the high watermark when none is); read_committed reads nothing past it"},
		{&g.unstableLag, "cellttl.kafka.consumer.unstable_lag", "{message}",
			"messages between the last stable offset and the high watermark, per owned partition: held back by a transaction still open, which read_committed waits for"},
	} {
		*s.dst, err = meter.Int64ObservableGauge(s.name, metric.WithUnit(s.unit), metric.WithDescription(s.desc))
		errs = append(errs, err)
	}
	g.timeLag, err = meter.Float64ObservableGauge("cellttl.kafka.consumer.time_lag", metric.WithUnit("s"),
		metric.WithDescription("age of the oldest event fetched and not yet settled, per owned partition (0 when none waits): its record timestamp, or its fetch when the record has none or one ahead"))
	if err := errors.Join(append(errs, err)...); err != nil {
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
		age := 0.0
		if p.OldestUnsettled != nil {
			age = max(0, time.Since(*p.OldestUnsettled).Seconds())
		}
		o.ObserveFloat64(g.timeLag, age, attrs)
	}
	o.ObserveInt64(g.stalled, int64(nstalled), baseSet)
}
