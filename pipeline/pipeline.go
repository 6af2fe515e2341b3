// Package pipeline wires the worker's stages: Kafka messages in, each
// decoded, given its tenant's cell timestamp, batched and written to
// Bigtable or set aside in the dead-letter topic, and its offset settled.
// It owns the order of shutdown: stop fetching, flush, commit, leave.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/retry"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// Source is where messages come from and where they are settled.
type Source interface {
	Fetch(ctx context.Context) (kafka.Message, ingest.Ack, error)
	Done(ingest.Ack)
	Commit(ctx context.Context) error
	CommitLoop(ctx context.Context)
}

// RowWriter writes a batch of rows; see sink.Writer.Write.
type RowWriter interface {
	Write(ctx context.Context, rows []sink.Row) ([]error, error)
}

// DeadLetterer produces rejected messages to the dead-letter topic.
type DeadLetterer interface {
	Write(ctx context.Context, dls []ingest.DeadLetter) error
}

// Pipeline moves events from a Source to a RowWriter.
type Pipeline struct {
	cfg     Config
	src     Source
	rows    RowWriter
	dlq     DeadLetterer
	config  func() *tenants.Config
	log     *slog.Logger
	now     func() time.Time
	stats   *Stats
	metrics instruments
	meter   metric.Meter
	mp      metric.MeterProvider
	dlqLoop *retry.Loop
	// tracer records a span per write batch; it does nothing until a tracer
	// provider is installed.
	tracer trace.Tracer
}

// scope names the pipeline's metrics and spans.
const scope = "github.com/cellttl/cellttl/pipeline"

// New returns a Pipeline, its metrics from mp (none when nil). config
// returns the tenants configuration in force; it is called once per
// message and must not block.
func New(cfg Config, src Source, rows RowWriter, dlq DeadLetterer, config func() *tenants.Config, mp metric.MeterProvider, log *slog.Logger) *Pipeline {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	return &Pipeline{
		cfg: cfg, src: src, rows: rows, dlq: dlq, config: config, log: log,
		meter:  mp.Meter(scope),
		mp:     mp,
		now:    time.Now,
		stats:  &Stats{},
		tracer: otel.Tracer(scope),
	}
}

// Stats returns the per-tenant counters.
func (p *Pipeline) Stats() *Stats { return p.stats }

// item is one message on its way to Bigtable.
type item struct {
	row    sink.Row
	ack    ingest.Ack
	msg    kafka.Message
	tenant *TenantStats
	// version of the tenants config the row's timestamp was computed under.
	version string
}

type batch struct {
	items   []item
	version string // tenants config version all items were processed under
	bytes   int    // of event values
}

// Run processes messages until ctx ends, then drains: it stops fetching,
// writes what was fetched, commits, and returns. It returns nil when the
// drain finished within DrainTimeout.
func (p *Pipeline) Run(ctx context.Context) error {
	if err := p.registerMetrics(); err != nil {
		return err
	}
	var err error
	if p.dlqLoop, err = newDeadLetterLoop(p.mp, p.log); err != nil {
		return err
	}
	defer func() { _ = p.metrics.registration.Unregister() }()

	// Writes and dead-letter produces outlive ctx: they are cut only when the
	// drain deadline passes.
	drainCtx, cancelDrain := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelDrain()
	stopDrainTimer := context.AfterFunc(ctx, func() {
		time.AfterFunc(p.cfg.DrainTimeout, cancelDrain)
	})
	defer stopDrainTimer()

	items := make(chan item, p.cfg.FlushRows)
	batches := make(chan batch)
	dead := make(chan deadItem, 1024)

	var commitWG, writeWG, dlqWG, batchWG sync.WaitGroup
	commitCtx, stopCommits := context.WithCancel(drainCtx)
	commitWG.Go(func() { p.src.CommitLoop(commitCtx) })
	batchWG.Go(func() { p.batchLoop(items, batches) })
	for range p.cfg.Writers {
		writeWG.Go(func() { p.writeLoop(drainCtx, batches, dead) })
	}
	dlqWG.Go(func() { p.deadLetterLoop(drainCtx, dead) })

	fetchErr := p.fetchLoop(ctx, items, dead)

	close(items)
	batchWG.Wait()
	writeWG.Wait()
	close(dead)
	dlqWG.Wait()
	stopCommits()
	commitWG.Wait()

	// The final commit gets a moment even when the drain ran out of time:
	// whatever is settled by now should not be redelivered.
	finalCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	commitErr := p.src.Commit(finalCtx)
	drained := drainCtx.Err() == nil
	switch {
	case fetchErr != nil:
		return errors.Join(fetchErr, commitErr)
	case commitErr != nil:
		return fmt.Errorf("final commit: %w", commitErr)
	case !drained:
		return fmt.Errorf("drain did not finish within %s: unsettled events will be redelivered", p.cfg.DrainTimeout)
	}
	return nil
}

// fetchLoop fetches and routes messages until ctx ends. Memory is bounded
// by the Source: it holds back messages beyond its byte budget until
// earlier ones are settled.
func (p *Pipeline) fetchLoop(ctx context.Context, items chan<- item, dead chan<- deadItem) error {
	for {
		msg, ack, err := p.src.Fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		p.route(msg, ack, items, dead)
	}
}

// record is what a decoder with mapping m reads of msg: the headers the
// mapping names are looked up here, where the Kafka client's types are
// known.
func record(m *event.Mapping, msg *kafka.Message) event.Record {
	r := event.Record{Value: msg.Value, Key: msg.Key, Time: msg.Time}
	if m != nil {
		for i, name := range m.Headers() {
			for _, h := range msg.Headers {
				if h.Key == name {
					r.Headers[i].Value = h.Value
					r.Headers[i].Count++
				}
			}
		}
	}
	return r
}

// route decides a message's fate: dead letter, skip, or a row to write.
func (p *Pipeline) route(msg kafka.Message, ack ingest.Ack, items chan<- item, dead chan<- deadItem) {
	now := p.now()
	rec := record(p.cfg.Decoder.Mapping, &msg)
	ev, err := p.cfg.Decoder.DecodeRecord(&rec)
	if err != nil {
		var evErr *event.Error
		field, reason := "", string(event.NotJSON)
		if errors.As(err, &evErr) {
			field, reason = evErr.Field, string(evErr.Class)
		}
		ts := p.stats.Tenant(ev.Tenant)
		ts.Consumed.Add(1)
		dead <- deadItem{dl: ingest.DeadLetter{Msg: msg, Reason: err.Error(), Field: field}, ack: ack, tenant: ts, reason: reason}
		return
	}
	ts := p.stats.Tenant(ev.Tenant)
	ts.Consumed.Add(1)
	if ev.Clamped {
		ts.Clamped.Add(1)
	}
	cfg := p.config()
	pol := cfg.Policy
	cell := pol.Cell(ev.Tenant, ev.Base)
	if expiry.Expired(cell.Expiry, now) {
		ts.Expired.Add(1)
		p.src.Done(ack)
		return
	}
	items <- item{
		row:     sink.Row{Key: rowkey.Key(ev.Tenant, ev.User, ev.ID, ev.Base.UnixMilli()), Timestamp: cell.Timestamp, Value: msg.Value, WrittenAt: pol.RecordRealTimestamp},
		ack:     ack,
		msg:     msg,
		tenant:  ts,
		version: cfg.Version,
	}
}
