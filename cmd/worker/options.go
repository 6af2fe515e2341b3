package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/internal/release"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/telemetry"
	"github.com/cellttl/cellttl/tenants"
)

// tableOptions are the flags of every command that works on the table:
// the tenants file, where the table is, and the log.
type tableOptions struct {
	tenants tenants.FileConfig
	table   sink.TableConfig
	log     telemetry.LogConfig
}

func defaultTableOptions() tableOptions {
	return tableOptions{tenants: tenants.DefaultFileConfig(), table: sink.DefaultTableConfig(), log: telemetry.DefaultLogConfig()}
}

func (o *tableOptions) register(f *envflag.FlagSet) {
	o.tenants.RegisterFlags(f)
	o.table.RegisterFlags(f)
	o.log.RegisterFlags(f)
}

// resolve checks the table flags (exit status 2 when they are wrong).
func (o *tableOptions) resolve() error {
	if err := o.table.Resolve(); err != nil {
		return usageError(err)
	}
	return nil
}

// session is what a command working on the table needs: the tenants config
// and Bigtable clients.
type session struct {
	cfg *tenants.Config
	dc  *bigtable.Client
	ac  *bigtable.AdminClient
	// tracers records the job's spans (openJob); nil records none.
	tracers trace.TracerProvider
}

func (s *session) Close() {
	s.dc.Close()
	s.ac.Close()
}

// open resolves the flags, loads the tenants file (exit status 2 when it is
// invalid) and opens the clients.
func (o *tableOptions) open(ctx context.Context) (*session, error) {
	if err := o.resolve(); err != nil {
		return nil, err
	}
	cfg, err := tenants.Load(o.tenants.Path)
	if err != nil {
		return nil, usageError(err)
	}
	dc, ac, err := o.table.Clients(ctx)
	if err != nil {
		return nil, err
	}
	return &session{cfg: cfg, dc: dc, ac: ac}, nil
}

// describePolicy says what GC rule a policy needs and why.
func describePolicy(p *expiry.Policy) string {
	return fmt.Sprintf("strategy %s with default_ttl %s", p.Strategy, duration.Format(p.DefaultTTL))
}

// startTraces installs the OpenTelemetry providers for a command that runs
// to completion (spans are exported when OTEL_EXPORTER_OTLP_* says where),
// and returns the tracer provider (nil when telemetry is off) and what
// flushes it at the end.
func startTraces(ctx context.Context, log *slog.Logger) (trace.TracerProvider, func()) {
	tel, err := telemetry.Setup(ctx, version(), revision())
	if err != nil {
		log.Warn("telemetry off", "err", err)
		return nil, func() {}
	}
	return tel.TracerProvider(), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("telemetry shutdown", "err", err)
		}
	}
}

// checkFormat validates the --format of a command that prints text or json.
func checkFormat(format string) error {
	if format != "text" && format != "json" {
		return usageError(fmt.Errorf("--format %q: want text or json", format))
	}
	return nil
}

// openJob is open for a command that runs to completion on the table (the
// retention commands): the logger, the session, and traces exported when
// OTLP is configured. done closes the session and flushes the traces.
func (o *tableOptions) openJob(ctx context.Context, stderr io.Writer) (s *session, log *slog.Logger, done func(), err error) {
	if log, err = o.log.Logger(stderr); err != nil {
		return nil, nil, nil, usageError(err)
	}
	if s, err = o.open(ctx); err != nil {
		return nil, nil, nil, err
	}
	var stopTraces func()
	s.tracers, stopTraces = startTraces(ctx, log)
	return s, log, func() { stopTraces(); s.Close() }, nil
}

// followErasures loads the erasure ledger of the session's table and keeps
// it fresh until stop: for the jobs that write or rewrite rows beside the
// workers (redrive, retime, migrate).
// checkRelease refuses a command that writes table when the table's record
// names a newer oldest writer than this release (tablemeta.CheckWriter).
func checkRelease(ctx context.Context, s *session, table string) error {
	rec, err := tablemeta.NewStore(s.dc, table).Read(ctx)
	if err != nil {
		return err
	}
	return rec.CheckWriter(table, release.Version)
}

func followErasures(ctx context.Context, s *session, t sink.TableConfig, refresh time.Duration, log *slog.Logger) (*erasure.Watch, func(), error) {
	return erasure.Follow(ctx, erasure.NewStore(s.dc, t.ErasureTable()), refresh, log)
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

// erasureBound are the flags of the workers' erasure bound, --write-timeout
// and --erasure-refresh: for the commands that write events as the worker
// does (redrive) or wait for the bound (forget).
type erasureBound struct {
	writer  sink.WriterConfig
	refresh time.Duration
}

func defaultErasureBound() erasureBound {
	return erasureBound{writer: sink.DefaultWriterConfig(), refresh: defaultErasureRefresh}
}

func (b *erasureBound) register(f *envflag.FlagSet) {
	b.writer.RegisterTimeoutFlag(f)
	registerErasureRefresh(f, &b.refresh)
}

// registerStrictRetention declares --strict-retention: for the worker, and
// for redrive, which decides each letter by the worker's rule.
func registerStrictRetention(f *envflag.FlagSet, strict *bool, usage string) {
	f.Bool(strict, "strict-retention", "STRICT_RETENTION", false, usage)
}

// topicOptions are the flags of the commands that read how long the
// topics beside the worker keep copies (forget, offboard, retention): the
// input topic and how to reach the brokers, the dead-letter topics'
// names, and how far ahead of its record an event's time may lie.
type topicOptions struct {
	conn         kafkaconn.Connection
	dlq          deadletter.Names
	maxClockSkew time.Duration
}

func defaultTopicOptions() topicOptions {
	return topicOptions{conn: ingest.DefaultConfig().Connection, maxClockSkew: pipeline.DefaultConfig().Decoder.MaxClockSkew}
}

// register declares the connection, the dead-letter topics' names and
// --max-clock-skew.
func (t *topicOptions) register(f *envflag.FlagSet) {
	t.conn.RegisterFlags(f)
	t.dlq.RegisterFlags(f)
	pipeline.RegisterClockFlag(f, &t.maxClockSkew)
}

func (t *topicOptions) validate() error {
	return errors.Join(t.conn.Validate(), t.dlq.Validate(t.conn.Topic), pipeline.CheckClockSkew(t.maxClockSkew))
}

// sources are where the retention statement's facts are read, with these
// flags (retention.Gather).
func (t *topicOptions) sources(s *session, table sink.TableConfig) retention.Sources {
	return retention.Sources{Config: s.cfg, Table: table, Admin: s.ac, Data: s.dc,
		Brokers: t.conn.Brokers, Security: t.conn.Security, Topic: t.conn.Topic, DeadLetters: t.dlq, MaxClockSkew: t.maxClockSkew}
}
