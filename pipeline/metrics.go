package pipeline

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/event"
)

// instruments are the pipeline's metrics. Per-event counts are read from
// Stats at collection time, so the hot path pays nothing for them.
type instruments struct {
	batchRows     metric.Int64Histogram
	batchBytes    metric.Int64Histogram
	batchDuration metric.Float64Histogram
	flushes       metric.Int64Counter
	deadLetters   metric.Int64Counter
	registration  metric.Registration
}

// deadLetterReasons are the values of cellttl.dead_letters' reason: the
// classes of event.Error, and rows Bigtable refused.
var deadLetterReasons = []string{
	string(event.TooLarge), string(event.NotJSON), string(event.Missing), string(event.WrongType),
	string(event.BadID), string(event.BadTime), string(event.BadTTL), string(event.Ambiguous), string(event.NoRecordTime), reasonBigtableRefused, reasonUndecodable, reasonUnlisted, reasonTimeAhead,
	string(event.NotFramed), string(event.UnknownSchema), string(event.BadSchema), string(event.Undecodable),
}

// reasonBigtableRefused is the reason of a row Bigtable refused for good,
// reasonUndecodable of a record batch the fetcher could not decode.
const (
	reasonBigtableRefused = "bigtable_refused"
	reasonUndecodable     = "undecodable_batch"
	// reasonUnlisted is an event of a tenant tenants.yaml does not list,
	// under unlisted_tenants: dead-letter.
	reasonUnlisted = "unlisted_tenant"
	// reasonTimeAhead is an event whose time lies past the worker's clock
	// + --max-clock-skew, under --strict-retention (ahead.go).
	reasonTimeAhead = "time_ahead"
)

func (p *Pipeline) registerMetrics() error {
	var err error
	m := &p.metrics
	meter := p.meter
	if m.batchRows, err = meter.Int64Histogram("cellttl.batch.rows", metric.WithUnit("{row}"),
		metric.WithDescription("rows per Bigtable write batch"),
		metric.WithExplicitBucketBoundaries(1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000)); err != nil {
		return err
	}
	if m.batchBytes, err = meter.Int64Histogram("cellttl.batch.bytes", metric.WithUnit("By"),
		metric.WithDescription("bytes of event values per Bigtable write batch"),
		metric.WithExplicitBucketBoundaries(1<<10, 16<<10, 64<<10, 256<<10, 1<<20, 4<<20, 16<<20)); err != nil {
		return err
	}
	if m.batchDuration, err = meter.Float64Histogram("cellttl.batch.duration", metric.WithUnit("s"),
		metric.WithDescription("time to write a batch to Bigtable, retries included")); err != nil {
		return err
	}
	if m.flushes, err = meter.Int64Counter("cellttl.batch.flushes", metric.WithUnit("{batch}"),
		metric.WithDescription("batches flushed, by reason: rows, bytes, interval, config_version, drain")); err != nil {
		return err
	}
	if m.deadLetters, err = meter.Int64Counter("cellttl.dead_letters", metric.WithUnit("{message}"),
		metric.WithDescription("events produced to the dead-letter topic, by reason: "+strings.Join(deadLetterReasons, ", "))); err != nil {
		return err
	}
	// Every reason exists from start-up, at 0, for rate() and dashboards.
	for _, r := range deadLetterReasons {
		m.deadLetters.Add(context.Background(), 0, metric.WithAttributes(attribute.String("reason", r)))
	}
	counter := func(name, desc string) metric.Int64ObservableCounter {
		c, cerr := meter.Int64ObservableCounter(name, metric.WithUnit("{event}"), metric.WithDescription(desc))
		if cerr != nil && err == nil {
			err = cerr
		}
		return c
	}
	consumed := counter("cellttl.events.consumed", "events fetched from Kafka, by tenant")
	written := counter("cellttl.events.written", "events written to Bigtable, by tenant")
	dead := counter("cellttl.events.dead_lettered", "events produced to the dead-letter topic, by tenant (_other: no valid tenant)")
	expired := counter("cellttl.events.expired", "events skipped because they had expired before they were processed, by tenant")
	erased := counter("cellttl.events.erased", "events not written because the erasure ledger covers their user and time (worker forget), by tenant")
	clamped := counter("cellttl.events.clamped", "events whose occurred_at lay beyond --max-clock-skew and was clamped, by tenant")
	ttlClamped := counter("cellttl.events.ttl_clamped", "events whose own TTL (--ttl-from) lay outside their tenant's min_ttl..max_ttl and was clamped, by tenant and bound (min, max)")
	ahead := counter("cellttl.records.timestamp_ahead", "records whose timestamp lay further ahead of the worker's clock than --max-clock-skew when processed (their cells still follow the record; under --strict-retention they are dead-lettered, reason time_ahead; see /status record_timestamps)")
	unlisted := counter("cellttl.events.unlisted", "events of tenants tenants.yaml does not list, whatever unlisted_tenants does with them (no tenant label: /status lists the most frequent ids)")
	if err != nil {
		return fmt.Errorf("register pipeline metrics: %w", err)
	}
	m.registration, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		p.stats.EachSeries(p.config(), func(label string, t *Counts) {
			attrs := metric.WithAttributes(attribute.String("cellttl.tenant", label))
			o.ObserveInt64(consumed, t.Consumed, attrs)
			o.ObserveInt64(written, t.Written, attrs)
			o.ObserveInt64(dead, t.DeadLettered, attrs)
			o.ObserveInt64(expired, t.Expired, attrs)
			o.ObserveInt64(clamped, t.Clamped, attrs)
			o.ObserveInt64(erased, t.Erased, attrs)
			o.ObserveInt64(ttlClamped, t.TTLClampedMin, metric.WithAttributes(attribute.String("cellttl.tenant", label), attribute.String("bound", "min")))
			o.ObserveInt64(ttlClamped, t.TTLClampedMax, metric.WithAttributes(attribute.String("cellttl.tenant", label), attribute.String("bound", "max")))
		})
		o.ObserveInt64(unlisted, p.stats.UnlistedTotal())
		o.ObserveInt64(ahead, p.stats.TimestampsAhead())
		return nil
	}, consumed, written, dead, expired, clamped, erased, ttlClamped, unlisted, ahead)
	if err != nil {
		return fmt.Errorf("register pipeline metrics: %w", err)
	}
	return nil
}
