package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/grpc/codes"

	"github.com/cellttl/cellttl/admin"
	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/telemetry"
	"github.com/cellttl/cellttl/tenants"
)

// runOptions are the flags of worker run, each declared by the package
// whose config it fills.
type runOptions struct {
	tableOptions
	startupTimeout time.Duration
	// strictRetention refuses to run where the retention promise cannot
	// hold: producers may stamp records past --max-clock-skew.
	strictRetention bool
	// erasureRefresh is how often the erasure ledger is read again.
	erasureRefresh time.Duration
	kafka          ingest.Config
	dlq            deadletter.Config
	pipe           pipeline.Config
	writer         sink.WriterConfig
	admin          admin.Config
}

func defaultRunOptions() runOptions {
	return runOptions{
		tableOptions:   defaultTableOptions(),
		kafka:          ingest.DefaultConfig(),
		dlq:            deadletter.DefaultConfig(),
		pipe:           pipeline.DefaultConfig(),
		writer:         sink.DefaultWriterConfig(),
		admin:          admin.DefaultConfig(),
		startupTimeout: time.Minute,
		erasureRefresh: defaultErasureRefresh,
	}
}

// defaultErasureRefresh: with the default --write-timeout (30s), a user
// erased at t has no row written after t + 3×5s + 30s = 45s, the wait
// worker forget makes between its passes.
const defaultErasureRefresh = 5 * time.Second

// registerErasureRefresh declares --erasure-refresh, for the commands that
// write events (the worker and redrive).
func registerErasureRefresh(f *envflag.FlagSet, d *time.Duration) {
	f.Duration(d, "erasure-refresh", "ERASURE_REFRESH", *d, fmt.Sprintf("how often the erasure ledger is read again; writes wait while the ledger loaded last is older than %d of these, so a user erased at t has no row written after t + %d×this + --write-timeout", erasure.StaleAfter, erasure.StaleAfter))
}

func (o *runOptions) register(f *envflag.FlagSet) {
	o.tableOptions.register(f)
	o.tenants.RegisterReloadFlags(f)
	o.kafka.RegisterFlags(f)
	o.dlq.RegisterFlags(f)
	o.admin.RegisterFlags(f)
	o.writer.RegisterFlags(f)
	o.pipe.RegisterFlags(f)
	registerErasureRefresh(f, &o.erasureRefresh)
	f.Bool(&o.strictRetention, "strict-retention", "STRICT_RETENTION", false, "refuse to start (and fail /readyz) while the input topic lets producers stamp records further ahead than --max-clock-skew, which would let them buy retention")
	f.Duration(&o.startupTimeout, "startup-timeout", "STARTUP_TIMEOUT", o.startupTimeout, "how long start-up waits for Bigtable and Kafka to answer, trying again, before it gives up")
}

// resolve checks every flag, each error naming its flag (exit status 2).
func (o *runOptions) resolve() error {
	if err := o.tableOptions.resolve(); err != nil {
		return err
	}
	if o.erasureRefresh <= 0 {
		return usageError(fmt.Errorf("--erasure-refresh %s: must be positive", o.erasureRefresh))
	}
	if o.startupTimeout <= 0 {
		return usageError(fmt.Errorf("--startup-timeout %s: must be positive", o.startupTimeout))
	}
	if err := errors.Join(o.kafka.Validate(), o.dlq.Validate(o.kafka.Topic), o.tenants.Validate(), o.writer.Validate(), o.pipe.Resolve(), o.admin.Validate()); err != nil {
		return usageError(err)
	}
	return nil
}

// runWorker is worker run: consume, compute cell timestamps, write.
func runWorker(ctx context.Context, args []string, stderr io.Writer) error {
	o := defaultRunOptions()
	f := envflag.New("worker run", "worker run: consume click events and write them with per-tenant TTLs.", stderr)
	o.register(f)
	if err := parse(f, args); err != nil {
		return err
	}
	if err := o.resolve(); err != nil {
		return err
	}
	log, err := o.log.Logger(stderr)
	if err != nil {
		return usageError(err)
	}
	s, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := s.cfg
	// Bigtable and Kafka may still be starting (a pod beside its
	// emulator, a broker restarting): wait for them, saying which one and
	// why, up to --startup-timeout.
	err = startupChecks(ctx, o.startupTimeout, log, func(ctx context.Context) error {
		if err := checkBigtable(ctx, s.ac, o.table, cfg.Policy.GCMaxAge()); err != nil {
			return err
		}
		return checkKafka(ctx, o.kafka.Brokers, o.kafka.Security)
	})
	switch {
	case sink.IsMismatch(err):
		return fmt.Errorf("refusing to start: %w (the tenants file asks for %s; `worker setup --update-gc-policy` changes the rule, see `worker check` first)", err, describePolicy(cfg.Policy))
	case errors.Is(err, sink.ErrNotSetUp):
		return fmt.Errorf("refusing to start: %w (the tenants file asks for %s)", err, describePolicy(cfg.Policy))
	case err != nil:
		return fmt.Errorf("refusing to start: %w", err)
	}
	limitMemory(o.pipe.MaxInflightBytes, log)
	tel, err := telemetry.Setup(ctx, version())
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("telemetry shutdown", "err", err)
		}
	}()
	w, err := newWorker(ctx, &o, cfg, s.dc, s.ac, tel.MeterProvider(), log)
	if err != nil {
		return err
	}
	return w.serve(ctx, tel.MetricsHandler())
}

// memoryOverhead is what the Go heap may hold beyond --max-inflight-bytes:
// the runtime, the clients' buffers, the metrics, and room for the garbage
// collector to work. The process also maps its binary (about 35 MiB
// resident): measured, peak RSS stays within --max-inflight-bytes + 64 MiB
// (RELIABILITY.md).
const memoryOverhead = 24 << 20

// limitMemory gives the garbage collector a soft limit of --max-inflight-bytes
// plus memoryOverhead, unless GOMEMLIMIT sets one: without it the heap may
// grow to twice what is live before a collection, and the event bytes the
// bound holds would count twice in the process's memory. An operator's
// GOMEMLIMIT (the Deployment derives it from the pod's limit) wins.
func limitMemory(maxInflight int64, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("memory limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
		return
	}
	limit := maxInflight + memoryOverhead
	debug.SetMemoryLimit(limit)
	log.Info("memory limit for the garbage collector", "bytes", limit, "max_inflight_bytes", maxInflight)
}

// worker is a running worker's parts: the consumer, the dead-letter
// writer, the Bigtable writer and the pipeline between them.
type worker struct {
	o            *runOptions
	cfg          *tenants.Config
	dc           *bigtable.Client
	rules        *sink.RuleWatch
	erasures     *erasure.Watch
	log          *slog.Logger
	dlq          *deadletter.Writer
	times        *kafkaconn.RecordTimeWatch
	consumer     *ingest.Consumer
	writer       *sink.Writer
	reloader     *tenants.Reloader
	pipeline     *pipeline.Pipeline
	lastWriteErr lastError
}

// newWorker builds the parts, checks the dead-letter topic and joins the
// consumer group. The parts record their metrics through mp (nothing when
// nil).
func newWorker(ctx context.Context, o *runOptions, cfg *tenants.Config, dc *bigtable.Client, ac *bigtable.AdminClient, mp metric.MeterProvider, log *slog.Logger) (*worker, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	w := &worker{o: o, cfg: cfg, dc: dc, log: log}
	// The rule the cells are computed for never changes while the worker
	// runs (a reload that would change it is refused): checked at start-up,
	// then watched.
	w.rules = sink.NewRuleWatch(ac, o.table.Target(), cfg.Policy.GCMaxAge(),
		fmt.Sprintf("set it back (`worker setup --update-gc-policy` with the tenants file this worker runs, %s), or restart the workers with the tenants file that matches the new rule", describePolicy(cfg.Policy)), log)
	// Before anything is consumed: an event of an erased user must never
	// be written, so the worker knows who was erased before it writes.
	w.erasures = erasure.NewWatch(erasure.NewStore(dc, o.table.ErasureTable()), o.erasureRefresh, log)
	lctx, cancel := context.WithTimeout(ctx, o.startupTimeout)
	err := w.erasures.Start(lctx)
	cancel()
	if err != nil {
		return nil, err
	}
	brokers, sec := o.kafka.Brokers, o.kafka.Security
	ccfg, err := o.kafka.ConsumerConfig(o.pipe.FetchBudget(), o.pipe.Decoder.MaxBytes)
	if err != nil {
		return nil, err
	}
	if w.dlq, err = deadletter.NewWriter(brokers, o.dlq.Topics(o.kafka.Topic), sec, mp, log); err != nil {
		return nil, err
	}
	// Before joining the group: a dead-letter topic that cannot take dead
	// letters is said at once, not at the first bad event. The worker runs
	// anyway (good events flow); /readyz answers 503 until it is fixed.
	rs, err := w.dlq.Check(ctx)
	if err != nil {
		log.Error("dead-letter topics cannot take dead letters; the letters bound for them will wait, uncommitted, until they can", "err", err)
	}
	logDeadLetterTopics(rs, cfg.Policy, log)
	if w.times, err = kafkaconn.NewRecordTimeWatch(brokers, o.kafka.Topic, sec, o.pipe.Decoder.MaxClockSkew, o.strictRetention, log); err != nil {
		_ = w.dlq.Close()
		return nil, err
	}
	if _, err := w.times.Check(ctx); o.strictRetention && (err != nil || w.times.Problem() != nil) {
		_ = w.dlq.Close()
		w.times.Close()
		return nil, fmt.Errorf("refusing to start (--strict-retention): %w", cmp.Or(err, w.times.Problem()))
	}
	w.consumer, err = ingest.NewConsumer(ccfg, mp, log)
	if err != nil {
		_ = w.dlq.Close()
		return nil, err
	}
	wcfg := o.writer
	wcfg.OnRetry = func(rows int, code codes.Code, err error) { w.lastWriteErr.set(err) }
	wcfg.Held = func() error { return cmp.Or(w.rules.Held(), w.erasures.Held()) }
	wcfg.Gate = w.erasures
	if w.writer, err = sink.NewWriter(dc, o.table.Target(), wcfg, mp, log); err != nil {
		_ = errors.Join(w.consumer.Close(), w.dlq.Close())
		return nil, err
	}
	w.reloader = tenants.NewReloader(o.tenants.Path, cfg, o.tenants.ReloadInterval, log)
	if err := errors.Join(w.reloader.RegisterMetrics(mp.Meter(meterName)), w.erasures.RegisterMetrics(mp.Meter(meterName))); err != nil {
		_ = errors.Join(w.consumer.Close(), w.dlq.Close())
		return nil, err
	}
	pcfg := o.pipe
	pcfg.Erasures = w.erasures.Current
	w.pipeline = pipeline.New(pcfg, w.consumer, w.writer, w.dlq, w.reloader.Current, mp, log)
	return w, nil
}

// meterName scopes the metrics the command registers: the tenants
// reloader's.
const meterName = "github.com/cellttl/cellttl"

// serve runs the pipeline until ctx ends and it has drained, with the
// admin server beside it when --admin-addr is set, and closes the parts.
func (w *worker) serve(ctx context.Context, metrics http.Handler) error {
	o, log := w.o, w.log
	var wg sync.WaitGroup
	defer wg.Wait()
	bg, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	wg.Go(func() { w.dlq.Run(bg, o.dlq.CheckInterval) })
	wg.Go(func() { w.times.Run(bg, o.dlq.CheckInterval) })
	defer w.times.Close()
	wg.Go(func() { w.rules.Run(bg, o.writer.RuleCheckInterval) })
	wg.Go(func() { w.erasures.Run(bg) })
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
		if err != nil {
			return errors.Join(err, w.consumer.Close(), w.dlq.Close())
		}
		log.Info("admin server listening", "addr", addr.String())
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
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
	closeErr := w.consumer.Close() // the final commit, then leave the group
	t := w.pipeline.Stats().Totals()
	log.Info("worker stopping", "consumed", t.Consumed, "written", t.Written, "expired", t.Expired, "dead_lettered", t.DeadLettered, "clamped", t.Clamped, "erased", t.Erased, "committed", w.consumer.Committed())
	return errors.Join(runErr, closeErr, w.dlq.Close())
}

// readinessChecks: in the consumer group, Bigtable answering and taking
// writes, the dead-letter topic taking dead letters, a config loaded.
func (w *worker) readinessChecks() []admin.Check {
	tbl := w.dc.Open(w.o.table.Table)
	return []admin.Check{
		{Name: "kafka", Fn: func(context.Context) error {
			s := w.consumer.Status()
			if !s.Joined {
				if s.LastError != "" {
					return fmt.Errorf("not in the consumer group: %s", s.LastError)
				}
				return errors.New("not in the consumer group")
			}
			return errors.Join(w.consumer.Problem(), w.times.Problem())
		}},
		{Name: "bigtable", Fn: func(ctx context.Context) error {
			// A point read of a key no event can have ('#' is not allowed in
			// a tenant id): cheap, and it fails when Bigtable is unreachable.
			if _, err := tbl.ReadRow(ctx, "#readiness-probe"); err != nil {
				return fmt.Errorf("bigtable read: %w", err)
			}
			// Reads can pass while every write is refused (an app profile
			// that routes nowhere, missing write permission), or held (the
			// family's GC rule changed under the worker).
			return errors.Join(w.rules.Problem(), w.writer.Outage(), w.erasures.Held())
		}},
		{Name: "dead-letter", Fn: func(context.Context) error { return w.dlq.Problem() }},
		{Name: "config", Fn: func(context.Context) error {
			if w.reloader.Current() == nil {
				return errors.New("no tenants config loaded")
			}
			return nil
		}},
	}
}

// logDeadLetterTopics says, topic by topic, how long a dead letter's
// payload can stay there, and which tenants' letters no topic can keep
// with their payload.
func logDeadLetterTopics(rs []deadletter.TopicRetention, p *expiry.Policy, log *slog.Logger) {
	shortest := time.Duration(0)
	for _, r := range rs {
		if r.Problem != nil {
			continue
		}
		log.Info("dead-letter topic ready", "topic", r.Topic, "created", r.Created, "retention", duration.Format(r.Retention), "segment", duration.Format(r.Segment),
			"cleanup_policy", r.Policy, "keeps_up_to", duration.Format(r.Keeps), "max_message_bytes", r.MaxMessageBytes, "writable", r.Writable)
		if r.Keeps > 0 && (shortest == 0 || r.Keeps < shortest) {
			shortest = r.Keeps
		}
	}
	var short []string
	for id, ttl := range p.Tenants {
		if shortest == 0 || ttl < shortest {
			short = append(short, id+" "+duration.Format(ttl))
		}
	}
	if len(short) > 0 {
		slices.Sort(short)
		log.Warn("dead letters of these tenants keep no payload (their TTL ends before any dead-letter topic deletes them); add a shorter class with --dlq-classes to keep it",
			"tenants", strings.Join(short[:min(len(short), 20)], ", "), "count", len(short), "shortest_keep", duration.Format(shortest))
	}
}
