package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/sink"
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
	tel, err := telemetry.Setup(ctx, version())
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

// watchErasures loads the erasure ledger and keeps it fresh until stop is
// called: for the commands that write events (redrive), which must obey it
// as the worker does.
func watchErasures(ctx context.Context, s *session, t sink.TableConfig, refresh time.Duration, log *slog.Logger) (w *erasure.Watch, stop func(), err error) {
	w = erasure.NewWatch(erasure.NewStore(s.dc, t.ErasureTable()), refresh, log)
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	err = w.Start(sctx)
	scancel()
	if err != nil {
		return nil, nil, err
	}
	bg, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(bg)
	}()
	return w, func() { cancel(); <-done }, nil
}
