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
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/retry"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// Source is where messages come from and where they are settled; it
// commits what is settled on its own (see ingest.Consumer).
type Source interface {
	// Poll returns the next messages, at least one, waiting until ctx
	// ends; reuse is the slice the previous call returned, done with.
	Poll(ctx context.Context, reuse []ingest.Fetched) ([]ingest.Fetched, error)
	Done(ingest.Ack)
	Settle([]ingest.Ack)
	// Failed is closed when the source must stop the worker: Poll then
	// returns why.
	Failed() <-chan struct{}
}

// RowWriter writes a batch of rows; see sink.Writer.Write. It must not
// keep rows once it returns: the pipeline reuses them.
type RowWriter interface {
	Write(ctx context.Context, rows []sink.Row) ([]error, error)
}

// DeadLetterer produces rejected messages to the dead-letter topic.
type DeadLetterer interface {
	Write(ctx context.Context, dls []deadletter.Letter) error
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
	// tracer records a span per write batch.
	tracer trace.Tracer
}

// scope names the pipeline's metrics and spans.
const scope = "github.com/cellttl/cellttl/pipeline"

// New returns a Pipeline, its metrics from mp and its spans from tp (none
// when nil). config returns the tenants configuration in force; it is
// called once per message and must not block.
func New(cfg Config, src Source, rows RowWriter, dlq DeadLetterer, config func() *tenants.Config, mp metric.MeterProvider, tp trace.TracerProvider, log *slog.Logger) *Pipeline {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	return &Pipeline{
		cfg: cfg, src: src, rows: rows, dlq: dlq, config: config, log: log,
		meter:  mp.Meter(scope),
		mp:     mp,
		now:    time.Now,
		stats:  &Stats{},
		tracer: tp.Tracer(scope),
	}
}

// SetClock sets the clock the pipeline decides by (an event's expiry, a
// batch's age): the host's, which a test may move. Call it before Run.
func (p *Pipeline) SetClock(now func() time.Time) { p.now = now }

// Stats returns the per-tenant counters.
func (p *Pipeline) Stats() *Stats { return p.stats }

// item is what the pipeline keeps of a message while its row is written:
// how to settle it, and the message itself for the dead-letter topic.
type item struct {
	ack    ingest.Ack
	msg    ingest.Message
	tenant *TenantStats
	// id (when listed), expires (when its cells expire) and keep (how
	// long its payload may live) are for a dead letter, should Bigtable
	// refuse the row.
	id            string
	expires, keep time.Time
}

// batch is rows on their way to Bigtable, and their messages.
type batch struct {
	rows    []sink.Row
	items   []item       // items[i] is the message of rows[i]
	version string       // tenants config version all rows were computed under
	bytes   int          // of event values
	reason  string       // why it was flushed: flushRows, flushBytes, ...
	acks    []ingest.Ack // scratch: the rows written, to settle
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
	// The drain deadline runs from ctx's end, or from the source's failure:
	// a worker that must stop stops within DrainTimeout, also while
	// Bigtable or the dead-letter topic takes nothing (the fetch loop may
	// be waiting on them, unable to see the failure).
	var drainTimer *time.Timer
	startDrain := sync.OnceFunc(func() { drainTimer = time.AfterFunc(p.cfg.DrainTimeout, cancelDrain) })
	defer func() {
		startDrain() // sets drainTimer, if neither did before
		drainTimer.Stop()
	}()
	stopDrainTimer := context.AfterFunc(ctx, startDrain)
	defer stopDrainTimer()
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		select {
		case <-p.src.Failed():
			startDrain()
		case <-watchDone:
		}
	}()

	// Batches are recycled: at most one is being built, and one per writer
	// is written.
	free := make(chan *batch, p.cfg.Writers+1)
	batches := make(chan *batch)
	dead := make(chan deadItem, 1024)

	var writeWG, dlqWG sync.WaitGroup
	for range p.cfg.Writers {
		writeWG.Go(func() { p.writeLoop(drainCtx, batches, free, dead) })
	}
	dlqWG.Go(func() { p.deadLetterLoop(drainCtx, dead) })

	fetchErr := p.fetchLoop(ctx, newBatcher(p.cfg, batches, free, &p.metrics, p.now), dead)

	close(batches)
	writeWG.Wait()
	close(dead)
	dlqWG.Wait()
	// What is settled now is committed by the source: on its own while it
	// runs, and once more when it is closed (ingest.Consumer.Close).
	switch {
	case fetchErr != nil:
		return fetchErr
	case drainCtx.Err() != nil:
		return fmt.Errorf("drain did not finish within %s: unsettled events will be redelivered", p.cfg.DrainTimeout)
	}
	return nil
}

// fetchLoop fetches and routes messages until ctx ends, building batches
// on the same goroutine: a message crosses no channel of its own between
// Kafka's response and its batch. It flushes what it holds when it returns.
// Memory is bounded by the Source: it holds back messages beyond its byte
// budget until earlier ones are settled.
func (p *Pipeline) fetchLoop(ctx context.Context, b *batcher, dead chan<- deadItem) error {
	defer b.flush(flushDrain)
	var park *parking
	if p.cfg.Schemas != nil || p.cfg.Erasures != nil {
		// Its fetches end with the loop, also when the source fails.
		fctx, cancel := context.WithCancel(ctx)
		park = newParking(p.cfg.Schemas, p.cfg.MaxInflightBytes)
		defer park.stop()
		defer cancel()
		ctx = fctx
	}
	unparked := func(f *ingest.Fetched) func(context.Context) error { return p.route(f, p.now(), p.config(), b, dead) }
	var msgs []ingest.Fetched
	for ctx.Err() == nil {
		if park != nil {
			park.unpark(ctx, unparked)
			if park.full() {
				// The rows batched so far are written first: only the
				// records held wait.
				b.flush(flushInterval)
				park.await(ctx, unparked)
				continue
			}
		}
		// An open batch is due at its age: wait for messages until then.
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if wait, open := b.untilDue(p.now()); open {
			if wait <= 0 {
				b.flush(flushInterval)
				continue
			}
			pctx, cancel = context.WithTimeout(ctx, wait)
		}
		if park != nil && park.waiting() {
			// A schema fetched ends the wait: its partition goes on.
			var stop context.CancelFunc
			pctx, stop = context.WithCancel(pctx)
			timeout := cancel
			cancel = func() { stop(); timeout() }
			if park.wakeOn(stop) {
				cancel()
				continue
			}
		}
		var err error
		msgs, err = p.src.Poll(pctx, msgs)
		due := pctx.Err() != nil // before cancel, which ends pctx too
		cancel()
		if err != nil {
			if ctx.Err() != nil || due {
				continue // stopping, the batch's age (flushed above), or a schema fetched
			}
			return err
		}
		// Read once per poll (up to a chunk of a response), not per
		// message: the clock for expiry, and the tenants config (a reload
		// between two messages of one response makes no difference anyone
		// could tell).
		now, cfg := p.now(), p.config()
		for i := range msgs {
			if park != nil && park.holds(&msgs[i]) {
				park.park(ctx, &msgs[i], nil)
				continue
			}
			if wait := p.route(&msgs[i], now, cfg, b, dead); wait != nil {
				park.park(ctx, &msgs[i], wait) // only a ledger asks, and with one there is a park
			}
		}
	}
	return nil
}

// record is what a decoder with mapping m reads of msg: the headers the
// mapping names are looked up here, where the Kafka client's types are
// known.
func record(m *event.Mapping, msg *ingest.Message) event.Source {
	r := event.Source{Value: msg.Value, Key: msg.Key, Time: msg.Time}
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

// cutError is why a record the fetcher held cut is dead-lettered: its
// value is too large, or its key or headers were (more than 64 KiB, left
// out: its fields may be read from them).
func cutError(c *ingest.Cut, d event.Decoder) error {
	if c.Size > int64(d.MaxBytes) {
		_, err := d.DecodeRecord(&event.Source{Size: c.Size}) // the decoder's own words
		return err
	}
	return &event.Error{Class: event.TooLarge, Reason: fmt.Sprintf("the record's %s took more than 64 KiB: the record is too large to hold", strings.ReplaceAll(c.Dropped, ",", " and "))}
}

// route decides a message's fate: dead letter, skip, or a row to write. It
// returns what the message waits for instead when the ledger must look its
// user up first (Lookup): the message is then not routed.
func (p *Pipeline) route(f *ingest.Fetched, now time.Time, cfg *tenants.Config, b *batcher, dead chan<- deadItem) (wait func(context.Context) error) {
	msg := &f.Msg
	if msg.Time.Sub(now) > p.cfg.Decoder.MaxClockSkew {
		// Counted, not corrected: the cells stay a function of the record.
		p.stats.ahead.Add(1)
	}
	// Decided in this frame: a Decision is large, and a wrapper returning
	// it costs a copy per event (BenchmarkPipeline, 178 instructions).
	var dec Decision
	ledger := p.ledger()
	if !p.unread(f, &dec) {
		var latest time.Time
		if p.cfg.StrictRetention {
			latest = StrictLatest(now, p.cfg.Decoder.MaxClockSkew)
		}
		dec = Decide(&p.cfg.Decoder, cfg, ledger, msg, now, latest)
	}
	ev := &dec.Event
	switch dec.Fate {
	case Held:
		// Stopping while it waited for the schema registry: left unsettled.
		return nil
	case Lookup:
		tenant, user := ev.Tenant, ev.User
		return func(ctx context.Context) error { return ledger.Resolve(ctx, tenant, user) }
	case Rejected:
		// Under its tenant's row only when the file lists it and the event
		// was read as far as its time (only its own TTL failed): the ids of
		// an event that failed before are the producer's word alone.
		row := OtherTenants
		if _, listed := cfg.Policy.Tenants[ev.Tenant]; listed && !ev.Base.IsZero() {
			row = ev.Tenant
		}
		ts := p.stats.Tenant(row)
		ts.Consumed.Add(1)
		p.deadLetter(b, dead, deadItem{dl: deadletter.Letter{Msg: *msg, Reason: dec.Err.Error(), Field: dec.Field, Cut: f.Cut, Undecodable: f.Undecodable,
			Class: dec.Class, KeepUntil: dec.KeepUntil(cfg, p.cfg.UnlistedDeadLetterTTL, msg.Time, now)}, ack: f.Ack, tenant: ts, reason: dec.Class,
			who: dec.Subject(msg)})
		return nil
	case UnlistedDeadLetter:
		p.stats.Unlisted(ev.Tenant)
		ts := p.stats.Tenant(UnlistedTenants)
		ts.Consumed.Add(1)
		p.deadLetter(b, dead, deadItem{dl: deadletter.Letter{Msg: *msg, Reason: dec.Err.Error(), Field: dec.Field,
			Class: dec.Class, Tenant: ev.Tenant, KeepUntil: dec.KeepUntil(cfg, p.cfg.UnlistedDeadLetterTTL, msg.Time, now)}, ack: f.Ack, tenant: ts, reason: dec.Class,
			who: dec.Subject(msg)})
		return nil
	case TimeAhead:
		ts := p.count(&dec)
		dl := deadletter.Letter{Msg: *msg, Reason: dec.Err.Error(), Field: dec.Field, Class: dec.Class, KeepUntil: dec.KeepUntil(cfg, p.cfg.UnlistedDeadLetterTTL, msg.Time, now)}
		if dec.Listed {
			dl.Tenant = ev.Tenant
		}
		p.deadLetter(b, dead, deadItem{dl: dl, ack: f.Ack, tenant: ts, reason: dec.Class, who: dec.Subject(msg)})
		return nil
	}
	ts := p.count(&dec)
	switch dec.Fate {
	case Expired:
		ts.Expired.Add(1)
		p.src.Done(f.Ack)
		return nil
	case Erased:
		ts.Erased.Add(1)
		p.src.Done(f.Ack)
		return nil
	}
	it := item{ack: f.Ack, msg: *msg, tenant: ts, expires: dec.Cell.Expiry, keep: dec.KeepUntil(cfg, p.cfg.UnlistedDeadLetterTTL, msg.Time, now)}
	if dec.Listed {
		it.id = ev.Tenant
	}
	b.add(cfg.Version, dec.Row, it)
	return nil
}

// unread decides, into dec, a message the fetcher could not read or held
// cut: rejected without being decoded. It reports whether f was one.
func (p *Pipeline) unread(f *ingest.Fetched, dec *Decision) bool {
	switch {
	case f.Undecodable != nil:
		*dec = Decision{Fate: Rejected, Err: errors.New(f.Undecodable.Reason), Class: reasonUndecodable}
		return true
	case f.Cut != nil:
		// Never decoded: what the fetcher held is not all of the record.
		*dec = Decision{Fate: Rejected, Err: cutError(f.Cut, p.cfg.Decoder), Class: string(event.TooLarge)}
		var evErr *event.Error
		if errors.As(dec.Err, &evErr) {
			dec.Field, dec.Class = evErr.Field, string(evErr.Class)
		}
		return true
	}
	return false
}

// ledger is the erasure ledger in force, nil when there is none.
func (p *Pipeline) ledger() *erasure.Ledger {
	if p.cfg.Erasures == nil {
		return nil
	}
	return p.cfg.Erasures()
}

// count counts an event of a tenant's (not dead-lettered) under its
// tenant, or under UnlistedTenants when the file does not list it, and
// returns the row's counts.
func (p *Pipeline) count(dec *Decision) *TenantStats {
	ev := &dec.Event
	row := ev.Tenant
	if !dec.Listed {
		p.stats.Unlisted(ev.Tenant)
		row = UnlistedTenants
	}
	ts := p.stats.Tenant(row)
	ts.Consumed.Add(1)
	if ev.Clamped {
		ts.Clamped.Add(1)
	}
	switch dec.TTLClamp {
	case expiry.BelowMin:
		ts.TTLClampedMin.Add(1)
	case expiry.AboveMax:
		ts.TTLClampedMax.Add(1)
	}
	return ts
}

// deadLetter hands d to the dead-letter loop.
func (p *Pipeline) deadLetter(b *batcher, dead chan<- deadItem, d deadItem) {
	select {
	case dead <- d:
	default:
		// The dead-letter topic is behind: this loop is about to wait for
		// it, and the rows it holds must not wait with it past their
		// interval (their offsets would not be committed).
		b.flush(flushInterval)
		dead <- d
	}
}
