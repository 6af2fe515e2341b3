package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/cellttl/cellttl/erasure"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/cellttl/cellttl/admin"
	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/schema/registry"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/telemetry"
)

// runCmd is worker run: consume, compute cell timestamps, write. Its flags
// are each declared by the package whose config they fill.
type runCmd struct {
	tableOptions
	startupTimeout time.Duration
	// strictRetention refuses to run where the retention promise cannot
	// hold: producers may stamp records past --max-clock-skew. It holds
	// writes while the topic lets them, and dead-letters the events
	// stamped past it.
	strictRetention bool
	// erasureRefresh is how often the erasure ledger is read again.
	erasureRefresh time.Duration
	// erasureExactForever is how many records kept forever the ledger
	// holds exactly (erasure.Store.CompactAbove).
	erasureExactForever int
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

func newRunCmd() *runCmd {
	return &runCmd{
		tableOptions:   defaultTableOptions(),
		kafka:          ingest.DefaultConfig(),
		dlq:            deadletter.DefaultConfig(),
		pipe:           pipeline.DefaultConfig(),
		writer:         sink.DefaultWriterConfig(),
		admin:          admin.DefaultConfig(),
		registry:       registry.DefaultConfig(),
		startupTimeout: time.Minute,
		erasureRefresh: defaultErasureRefresh,

		erasureExactForever: erasure.DefaultCompactAbove,
	}
}

func (o *runCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker run", "worker run: consume click events and write them with per-tenant TTLs.\n\nTo start, set --brokers, --project and --instance (an emulator needs neither),\nand --tenants unless ./tenants.yaml is the file. Every other flag has a\ndefault; the advanced ones, listed last, are tuning.", out)
	o.tableOptions.register(f)
	o.table.RegisterClientMetricsFlag(f)
	o.tenants.RegisterReloadFlags(f)
	o.kafka.RegisterFlags(f)
	o.dlq.RegisterFlags(f)
	o.admin.RegisterFlags(f)
	o.writer.RegisterFlags(f)
	o.pipe.RegisterFlags(f)
	tablemeta.RegisterChangeFlag(f, &o.ttlFromChange)
	o.registry.RegisterFlags(f)
	registerErasureRefresh(f, &o.erasureRefresh)
	f.Int(&o.erasureExactForever, "erasure-exact-forever", "ERASURE_EXACT_FOREVER", o.erasureExactForever,
		"how many erasures kept forever (of a topic that may hold their records for good) the worker holds exactly, at about 90 B each; past it, 1.5 B each, and an event whose user may be one waits for a read of the user's ledger row")
	f.Section("Worker")
	registerStrictRetention(f, &o.strictRetention, "hold to --max-clock-skew the time a producer stamps, which would buy retention: refuse to start, and hold the writes (failing /readyz) while the input topic lets producers stamp records further ahead or its settings go unread for 3 × --dlq-check-interval; dead-letter an event whose time lies further ahead of the worker's clock (reason time_ahead)")
	f.Advanced()
	f.Duration(&o.startupTimeout, "startup-timeout", "STARTUP_TIMEOUT", o.startupTimeout, "how long start-up waits for Bigtable and Kafka to answer, trying again, before it gives up")
	return f
}

// resolve checks every flag, each error naming its flag (exit status 2).
func (o *runCmd) resolve() error {
	if err := o.tableOptions.resolve(); err != nil {
		return err
	}
	if o.erasureRefresh <= 0 {
		return usageError(fmt.Errorf("--erasure-refresh %s: must be positive", o.erasureRefresh))
	}
	if o.erasureExactForever < 1 {
		return usageError(fmt.Errorf("--erasure-exact-forever %d: must be at least 1", o.erasureExactForever))
	}
	if o.startupTimeout <= 0 {
		return usageError(fmt.Errorf("--startup-timeout %s: must be positive", o.startupTimeout))
	}
	if err := errors.Join(o.kafka.Validate(), o.dlq.Validate(o.kafka.Topic), o.tenants.Validate(), o.writer.Validate(), o.pipe.Resolve(), o.admin.Validate(), o.registry.Validate()); err != nil {
		return usageError(err)
	}
	return nil
}

// run checks the flags, waits for Bigtable and Kafka, builds the worker
// and serves until ctx ends.
func (o *runCmd) run(ctx context.Context, _, stderr io.Writer) error {
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
	// Millisecond timestamps are valid under either granularity: read, with
	// the checks' retries, to be said in the log and on /status.
	var granularity sink.Granularity
	err = startupChecks(ctx, o.startupTimeout, log, func(ctx context.Context) error {
		if err := checkBigtable(ctx, s.ac, o.table, cfg.Policy.GCMaxAge()); err != nil {
			return err
		}
		tables, err := o.table.TableAdmin(ctx)
		if err != nil {
			return err
		}
		defer tables.Close()
		if granularity, err = tables.Granularity(ctx, o.table.Table); err != nil {
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
	log.Info("table timestamp granularity", "table", o.table.Table, "granularity", granularity, "means", granularity.Means())
	limitMemory(o.pipe.MaxInflightBytes, log)
	tel, err := telemetry.Setup(ctx, version(), revision())
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
	w, err := newWorker(ctx, o, cfg, s.dc, s.ac, tel.MeterProvider(), tel.TracerProvider(), log)
	if err != nil {
		return err
	}
	w.granularity = granularity
	return w.serve(ctx, tel.MetricsHandler())
}

// memoryOverhead is what the Go heap may hold beyond --max-inflight-bytes:
// the runtime, the clients' buffers, the metrics, and room for the garbage
// collector to work. The process also maps its binary (about 41 MiB
// resident, shared and clean): measured, the worker's own resident memory
// stays within --max-inflight-bytes + 32 MiB (RELIABILITY.md).
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
