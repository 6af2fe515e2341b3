package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/admin"
	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/registry"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/schema"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/telemetry"
)

// runOptions are the flags of worker run, each declared by the package
// whose config it fills.
type runOptions struct {
	tableOptions
	startupTimeout time.Duration
	// strictRetention refuses to run where the retention promise cannot
	// hold: producers may stamp records past --max-clock-skew. It holds
	// writes while the topic lets them, and dead-letters the events
	// stamped past it.
	strictRetention bool
	// erasureRefresh is how often the erasure ledger is read again.
	erasureRefresh time.Duration
	// ttlFromChange records --ttl-from as the table's setting over
	// another one recorded (tablemeta).
	ttlFromChange bool
	kafka         ingest.Config
	dlq           deadletter.Config
	pipe          pipeline.Config
	writer        sink.WriterConfig
	admin         admin.Config
	registry      registry.Config
}

func defaultRunOptions() runOptions {
	return runOptions{
		tableOptions:   defaultTableOptions(),
		kafka:          ingest.DefaultConfig(),
		dlq:            deadletter.DefaultConfig(),
		pipe:           pipeline.DefaultConfig(),
		writer:         sink.DefaultWriterConfig(),
		admin:          admin.DefaultConfig(),
		registry:       registry.DefaultConfig(),
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
	f.Section("Erasure")
	f.Advanced()
	f.Duration(d, "erasure-refresh", "ERASURE_REFRESH", *d, fmt.Sprintf("how often the erasure ledger is read again; writes wait while the ledger loaded last is older than %d of these, so a user erased at t has no row written after t + %d×this + --write-timeout", erasure.StaleAfter, erasure.StaleAfter))
}

// registerErasureBound declares the flags of the workers' erasure bound,
// --erasure-refresh and --write-timeout: for the commands that write events
// as the worker does (redrive) or wait for the bound (forget).
func (o *runOptions) registerErasureBound(f *envflag.FlagSet) {
	o.writer.RegisterTimeoutFlag(f)
	registerErasureRefresh(f, &o.erasureRefresh)
}

// registerStrictRetention declares --strict-retention: for the worker, and
// for redrive, which decides each letter by the worker's rule.
func registerStrictRetention(f *envflag.FlagSet, strict *bool, usage string) {
	f.Bool(strict, "strict-retention", "STRICT_RETENTION", false, usage)
}

func (o *runOptions) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker run", "worker run: consume click events and write them with per-tenant TTLs.", out)
	o.register(f)
	return f
}

func (o *runOptions) register(f *envflag.FlagSet) {
	o.tableOptions.register(f)
	o.tenants.RegisterReloadFlags(f)
	o.kafka.RegisterFlags(f)
	o.dlq.RegisterFlags(f)
	o.admin.RegisterFlags(f)
	o.writer.RegisterFlags(f)
	o.pipe.RegisterFlags(f)
	tablemeta.RegisterChangeFlag(f, &o.ttlFromChange)
	o.registry.RegisterFlags(f)
	registerErasureRefresh(f, &o.erasureRefresh)
	f.Section("Worker")
	registerStrictRetention(f, &o.strictRetention, "hold to --max-clock-skew the time a producer stamps, which would buy retention: refuse to start, and hold the writes (failing /readyz) while the input topic lets producers stamp records further ahead or its settings go unread for 3 × --dlq-check-interval; dead-letter an event whose time lies further ahead of the worker's clock (reason time_ahead)")
	f.Advanced()
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
	if err := errors.Join(o.kafka.Validate(), o.dlq.Validate(o.kafka.Topic), o.tenants.Validate(), o.writer.Validate(), o.pipe.Resolve(), o.admin.Validate(), o.registry.Validate()); err != nil {
		return usageError(err)
	}
	return nil
}

// runWorker is worker run: consume, compute cell timestamps, write.
func runWorker(ctx context.Context, args []string, stderr io.Writer) error {
	o := defaultRunOptions()
	if err := parse(o.flags(stderr), args); err != nil {
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
	w, err := newWorker(ctx, &o, cfg, s.dc, s.ac, tel.MeterProvider(), tel.TracerProvider(), log)
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
			"cleanup_policy", r.Policy, "keeps_up_to", duration.Format(r.Keeps), "max_message_bytes", r.MaxMessageBytes, "writable", r.Writable,
			"partitions", r.Partitions, "replicas", r.Replicas)
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

// openSchemas sets the decoder to read values through the schema registry
// when --value-format asks for one; nil, and JSON, otherwise. Close the
// schemas when done.
func (o *runOptions) openSchemas(mp metric.MeterProvider, log *slog.Logger) (*registry.Schemas, error) {
	if o.registry.ValueFormat() == schema.JSON {
		return nil, nil
	}
	s, err := registry.New(o.registry, o.pipe.Decoder.Mapping, mp, log)
	if err != nil {
		return nil, err
	}
	o.pipe.Decoder.Values, o.pipe.Schemas = s, s
	log.Info("values are read through the schema registry", "value_format", o.registry.Format, "schema_registry", o.registry.URL)
	return s, nil
}
