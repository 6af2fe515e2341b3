package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/admin"
	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/internal/registry"
	"github.com/cellttl/cellttl/pipeline"
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
	log      *slog.Logger
	dlq      *deadletter.Writer
	times    *kafkaconn.RecordTimeWatch
	consumer *ingest.Consumer
	writer   *sink.Writer
	reloader *tenants.Reloader
	record   *tablemeta.Recorder
	pipeline *pipeline.Pipeline
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
	w.topicID = followIncarnation(ctx, o.kafka, w.erasures, log)
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

// closeKafka closes the Kafka parts openKafka opened: the consumer (its
// final commit, then it leaves the group), the watch, the dead-letter
// writer.
func (w *worker) closeKafka() error {
	var errs []error
	if w.consumer != nil {
		errs = append(errs, w.consumer.Close())
	}
	if w.times != nil {
		w.times.Close()
	}
	if w.dlq != nil {
		errs = append(errs, w.dlq.Close())
	}
	return errors.Join(errs...)
}

// meterName scopes the metrics the command registers: the tenants
// reloader's.
const meterName = "github.com/cellttl/cellttl"

// serve runs the pipeline until ctx ends and it has drained, with the
// admin server beside it when --admin-addr is set, and closes the parts.
//
// The parts close only once nothing uses them: the admin server's probes
// first, then the background loops, then the clients. A check that ran
// after its client's transport closed opened a connection pool of its own
// that nothing closed again.
func (w *worker) serve(ctx context.Context, metrics http.Handler) error {
	o, log := w.o, w.log
	var wg sync.WaitGroup
	// The background loops outlive SIGTERM until the pipeline has drained:
	// a drain writes what it holds, and needs the ledger's refresh, the
	// dead-letter checks and the rules as much as the run did. A refresh
	// stopped with the signal left a drain begun with a stale ledger unable
	// to write anything until its deadline.
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	shutdownAdmin := func() {}
	closeParts := func() error {
		shutdownAdmin()
		stopBackground()
		wg.Wait()
		if w.schemas != nil {
			w.schemas.Close()
		}
		return w.closeKafka() // the final commit, then leave the group
	}
	wg.Go(func() { w.dlq.Run(bg, o.dlq.CheckInterval) })
	wg.Go(func() { w.times.Run(bg, o.dlq.CheckInterval) })
	wg.Go(func() { w.rules.Run(bg, o.writer.RuleCheckInterval) })
	wg.Go(func() { w.erasures.Run(bg) })
	wg.Go(func() { w.followTopicID(bg) })
	// The version in force, recorded at each reload and every heartbeat:
	// worker forget checks its tenants file against it.
	wg.Go(func() {
		w.record.Run(bg, 5*time.Second, func() string { return w.reloader.Current().Version }, w.reloader.Applied())
	})
	if o.tenants.Path != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() { w.reloader.Run(bg, hup) })
	}
	if o.admin.Addr != "" {
		st := &statusSource{w: w, started: time.Now()}
		srv := admin.New(o.admin, metrics, st.status, w.readinessChecks(), log)
		addr, err := srv.Start()
		shutdownAdmin = func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}
		if err = errors.Join(err, srv.RegisterMetrics(w.meter)); err != nil {
			return errors.Join(err, closeParts())
		}
		log.Info("admin server listening", "addr", addr.String())
	}
	if host := os.Getenv("BIGTABLE_EMULATOR_HOST"); host != "" {
		// The client library sends every request there, unauthenticated:
		// right for tests, never for production.
		log.Warn("BIGTABLE_EMULATOR_HOST is set: every Bigtable request goes to that address, without credentials (an emulator), not to Google Cloud", "emulator", host)
	}
	log.Info("worker started", "topic", o.kafka.Topic, "group", o.kafka.Group, "dlq_topic", o.dlq.Base(o.kafka.Topic),
		"table", o.table.Table, "family", o.table.Family, "strategy", w.cfg.Policy.Strategy.String(),
		"default_ttl", duration.Format(w.cfg.Policy.DefaultTTL), "tenants", len(w.cfg.Policy.Tenants), "config_version", w.cfg.Version)
	runErr := w.pipeline.Run(ctx)
	closeErr := closeParts()
	t := w.pipeline.Stats().Totals()
	log.Info("worker stopping", "consumed", t.Consumed, "written", t.Written, "expired", t.Expired, "dead_lettered", t.DeadLettered, "clamped", t.Clamped, "erased", t.Erased, "committed", w.consumer.Committed())
	return errors.Join(runErr, closeErr)
}
