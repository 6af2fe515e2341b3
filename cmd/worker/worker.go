package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/schema/registry"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/tenants"
)

// worker is a running worker's parts: the consumer, the dead-letter
// writer, the Bigtable writer and the pipeline between them.
type worker struct {
	o        *runCmd
	cfg      *tenants.Config
	rules    *sink.RuleWatch
	erasures *erasure.Watch
	topicID  string // the input topic's id at start, "" unread
	// granularity is the table's timestamp granularity, read at start.
	granularity sink.Granularity
	log         *slog.Logger
	dlq         *deadletter.Writer
	times       *kafkaconn.RecordTimeWatch
	consumer    *ingest.Consumer
	writer      *sink.Writer
	reloader    *tenants.Reloader
	record      *tablemeta.Recorder
	pipeline    *pipeline.Pipeline
	// schemas reads values through the schema registry; nil for JSON.
	schemas      *registry.Schemas
	lastWriteErr lastError
	meter        metric.Meter // the parts' meter, for the admin server's
}

// newWorker builds the parts, checks the dead-letter topic and joins the
// consumer group. The parts record their metrics through mp and their
// spans through tp (nothing when nil).
func newWorker(ctx context.Context, o *runCmd, cfg *tenants.Config, dc *bigtable.Client, ac *bigtable.AdminClient, mp metric.MeterProvider, tp trace.TracerProvider, log *slog.Logger) (_ *worker, err error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	w := &worker{o: o, cfg: cfg, log: log, meter: mp.Meter(meterName)}
	// The rule the cells are computed for never changes while the worker
	// runs (a reload that would change it is refused): checked at start-up,
	// then watched.
	w.rules = sink.NewRuleWatch(ac, o.table.Target(), cfg.Policy.GCMaxAge(),
		fmt.Sprintf("set it back (`worker setup --update-gc-policy` with the tenants file this worker runs, %s), or restart the workers with the tenants file that matches the new rule", describePolicy(cfg.Policy)), log)
	// The record's family, checked at start-up too: a rule put on it since
	// that collects by age would delete the record, slowly (GC is lazy).
	w.rules.Also(func(ctx context.Context) error {
		err := tablemeta.CheckFamily(ctx, ac, o.table.Table)
		if tablemeta.Unfit(err) {
			return err
		}
		return nil // a read that failed: the event family's read says so
	})
	// Before anything is consumed: an event of an erased user must never
	// be written, so the worker knows who was erased before it writes.
	store := erasure.NewStore(dc, o.table.ErasureTable())
	store.CompactAbove = o.erasureExactForever
	w.erasures = erasure.NewWatch(store, o.erasureRefresh, log)
	w.erasures.SetClock(wallClock)
	lctx, cancel := context.WithTimeout(ctx, o.startupTimeout)
	err = w.erasures.Start(lctx)
	cancel()
	if err != nil {
		return nil, err
	}
	w.topicID = followIncarnation(ctx, o.kafka.Connection, w.erasures, log)
	if err := w.claimRecord(ctx, dc); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = w.closeKafka()
		}
	}()
	if err := w.openKafka(ctx, mp); err != nil {
		return nil, err
	}
	w.dlq.SetSourceID(o.kafka.Topic, w.topicID)
	if w.writer, err = sink.NewWriter(dc, o.table.Target(), w.writerConfig(), mp, log); err != nil {
		return nil, err
	}
	w.reloader = tenants.NewReloader(o.tenants.Path, cfg, o.tenants.ReloadInterval, log)
	left := func(tenant string) (time.Time, bool) { return w.erasures.Current().LeftAt(tenant) }
	w.reloader.SetGate(tenants.RefuseReturning(left))
	if ids := tenants.ListedButLeft(cfg, left); len(ids) > 0 {
		log.Warn("the tenants file lists tenants that have left (worker offboard): none of their events is written; list them as offboarded, or drop them", "tenants", ids)
	}
	if err := errors.Join(w.reloader.RegisterMetrics(w.meter), w.erasures.RegisterMetrics(w.meter), w.registerShortfalls(w.meter)); err != nil {
		return nil, err
	}
	if w.schemas, err = openSchemas(context.Background(), o.registry, &o.pipe, mp, log); err != nil {
		return nil, err
	}
	pcfg := o.pipe
	pcfg.Erasures, pcfg.ErasuresHeld = w.erasures.Current, w.erasures.Held
	pcfg.StrictRetention = o.strictRetention
	w.pipeline = pipeline.New(pcfg, w.consumer, w.writer, w.dlq, w.reloader.Current, mp, tp, log)
	w.pipeline.SetClock(wallClock)
	return w, nil
}

// openKafka builds the Kafka parts: the dead-letter writer, checked before
// the group is joined, the watch of the input topic's record times, and
// the consumer, which joins the group. On an error, closeKafka closes what
// it opened.
func (w *worker) openKafka(ctx context.Context, mp metric.MeterProvider) error {
	o, log := w.o, w.log
	brokers, sec := o.kafka.Brokers, o.kafka.Security
	ccfg, err := o.kafka.ConsumerConfig(o.pipe.FetchBudget(), o.pipe.Decoder.MaxBytes)
	if err != nil {
		return err
	}
	keys, err := o.dlq.Keys()
	if err != nil {
		return err
	}
	if w.dlq, err = deadletter.NewWriter(brokers, o.dlq.Topics(o.kafka.Topic), sec, mp, log); err != nil {
		return err
	}
	w.dlq.SetClock(wallClock)
	if keys != nil {
		w.dlq.SignWith(keys)
	} else {
		log.Info("dead letters are not signed: worker redrive cannot tell them from letters someone else produced to the dead-letter topics (--dlq-signing-key-file)")
	}
	// Before joining the group: a dead-letter topic that cannot take dead
	// letters is said at once, not at the first bad event. The worker runs
	// anyway (good events flow); /readyz answers 503 until it is fixed.
	rs, err := w.dlq.Check(ctx)
	if err != nil && ctx.Err() == nil {
		log.Error("dead-letter topics cannot take dead letters; the letters bound for them will wait, uncommitted, until they can", "err", err)
	}
	deadletter.LogTopics(rs, w.cfg.Policy.Tenants, log)
	if w.times, err = kafkaconn.NewRecordTimeWatch(brokers, o.kafka.Topic, sec, o.pipe.Decoder.MaxClockSkew, o.strictRetention, log); err != nil {
		return err
	}
	if _, err := w.times.Check(ctx); o.strictRetention && (err != nil || w.times.Problem() != nil) {
		return fmt.Errorf("refusing to start (--strict-retention): %w", cmp.Or(err, w.times.Problem()))
	}
	w.consumer, err = ingest.NewConsumer(ccfg, mp, log)
	return err
}

// meterName scopes the metrics the command registers: the tenants
// reloader's.
const meterName = "github.com/cellttl/cellttl"
