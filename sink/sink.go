// Package sink writes rows to Bigtable: batches through ApplyBulk, retrying
// only what failed, and the table set-up those writes rely on. It knows
// nothing of Kafka; what a row stands for is the caller's business.
package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/internal/retry"
	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/rowkey"
)

// MaxMutationsPerRequest is Bigtable's limit for one MutateRows request.
const MaxMutationsPerRequest = 100_000

// Writer writes rows into one family of one table.
type Writer struct {
	// table's calls are waits of a command that bounds them (worker
	// redrive); under worker run, one context lookup more each.
	table     *btwait.Table
	tableName string
	family    string
	cfg       WriterConfig
	log       *slog.Logger
	m         writerMetrics
	loop      *retry.Loop

	mu             sync.Mutex
	outageSince    time.Time // zero while writes go through
	outageCode     codes.Code
	outageErr      error
	throttledSince time.Time // the first RESOURCE_EXHAUSTED of a run, none written since
	throttledLast  time.Time // the last one
}

type writerMetrics struct {
	duration metric.Float64Histogram
	rows     metric.Int64Counter
	retries  metric.Int64Counter
}

// scope names the package's metrics.
const scope = "github.com/cellttl/cellttl/sink"

func newWriterMetrics(mp metric.MeterProvider) (writerMetrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(scope)
	d, err1 := meter.Float64Histogram("db.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("duration of Bigtable MutateRows calls, one per attempt"),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	r, err2 := meter.Int64Counter("cellttl.bigtable.rows_attempted", metric.WithUnit("{row}"),
		metric.WithDescription("rows sent to Bigtable, retries included"))
	re, err3 := meter.Int64Counter("cellttl.bigtable.retries", metric.WithUnit("{row}"),
		metric.WithDescription("rows retried after a retryable failure, by gRPC status code"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return writerMetrics{}, fmt.Errorf("register Bigtable writer metrics: %w", err)
	}
	// A counter is exported from its first Add: at 0 from the start, the
	// retries series exists before the first retry, for rate() and alerts.
	re.Add(context.Background(), 0)
	return writerMetrics{duration: d, rows: r, retries: re}, nil
}

// WriterConfig tunes retries.
type WriterConfig struct {
	// AttemptTimeout bounds one ApplyBulk call, the client's own retries
	// included; what is still unwritten then is retried here, where it is
	// logged and counted.
	AttemptTimeout time.Duration
	// Backoff between attempts: exponential from InitialBackoff to MaxBackoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// OnRetry, when set, is told of every failed attempt: the number of rows
	// to retry, and the gRPC code and error of one of their failures.
	OnRetry func(rows int, code codes.Code, err error)
	// Held, when set, is asked before every attempt: while it returns an
	// error, nothing is sent, and the rows wait (retried with backoff),
	// neither written nor refused. See RuleWatch.
	Held func() error
	// Gate, when set, is asked before every attempt about the rows decided
	// under an older generation of it (Row.Gen); a row it no longer admits
	// is not sent, and its result is ErrWithdrawn.
	Gate Gate
	// Throttle, when set, paces the rows sent (see Throttle).
	Throttle *Throttle
	// ThrottledOutageAfter is how long requests refused whole with
	// RESOURCE_EXHAUSTED, none written meanwhile, are Bigtable's flow
	// control before they count as an outage (Outage, the error log).
	ThrottledOutageAfter time.Duration
	// RuleCheckInterval is how often the worker's RuleWatch reads the
	// family's GC rule.
	RuleCheckInterval time.Duration
	// Now is the writer's clock: written_at, the calls' durations, the
	// start of an outage; time.Now when nil.
	Now func() time.Time
}

// DefaultWriterConfig returns the defaults.
func DefaultWriterConfig() WriterConfig {
	return WriterConfig{AttemptTimeout: 30 * time.Second, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second,
		RuleCheckInterval: 30 * time.Second, ThrottledOutageAfter: time.Minute}
}

// NewWriter returns a Writer for the target family, its metrics from mp
// (none when nil).
func NewWriter(c *bigtable.Client, t Target, cfg WriterConfig, mp metric.MeterProvider, log *slog.Logger) (*Writer, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m, err := newWriterMetrics(mp)
	if err != nil {
		return nil, err
	}
	if cfg.Throttle != nil && mp != nil {
		if err := cfg.Throttle.registerMetrics(mp.Meter(scope)); err != nil {
			return nil, err
		}
	}
	loop, err := retry.NewLoop("bigtable.write", retry.Policy{Initial: cfg.InitialBackoff, Max: cfg.MaxBackoff}, mp)
	if err != nil {
		return nil, err
	}
	w := &Writer{table: btwait.Open(c, t.Table), tableName: t.Table, family: t.Family, cfg: cfg, log: log, m: m, loop: loop}
	// Every failure the loop retries is one every row shares or one time
	// heals: a row's own refusal never comes back to it (see attempt).
	w.loop.OnFailure = w.onFailure
	return w, nil
}

// RowError is a permanent failure of one row: writing it again cannot
// succeed, so the caller should set the event aside (dead-letter it).
type RowError struct {
	Code codes.Code
	Err  error
}

func (e *RowError) Error() string {
	return fmt.Sprintf("bigtable rejected the row (%s): %v", e.Code, e.Err)
}
func (e *RowError) Unwrap() error { return e.Err }

// Write writes rows and returns, per row, nil or the *RowError that rejected
// it for good. Retryable failures are retried, only for the rows that
// failed, with exponential backoff and without a limit until ctx ends; then
// Write returns ctx's error and the rows' outcomes are unknown. Cells carry
// explicit timestamps, so writing a row again is harmless.
//
// A row is rejected for good only on evidence that the refusal is its own:
// Bigtable refused the row's entry with a code about its content while it
// wrote another entry of the same request, or a request without the row
// succeeds. A failure that every row shares (a wrong app profile, a table
// state, missing permission) is an outage: retried, logged with the likely
// fix, reported by Outage, and never blamed on rows.
func (w *Writer) Write(ctx context.Context, rows []Row) ([]error, error) {
	wr := &write{w: w, rows: rows, results: make([]error, len(rows))}
	pending := make([]int, len(rows)) // indexes of rows not yet settled
	for i := range pending {
		pending[i] = i
	}
	attempts := 0
	err := w.loop.Do(ctx, func(ctx context.Context) error {
		// Checked, paced, then checked again and sent at once (send): a
		// row leaves right after its user was checked against a ledger
		// fresh enough, however long the pacing (the erasure bound counts
		// on it), and a held batch spends none of the write rate.
		var err error
		if pending, err = wr.admit(ctx, pending); err != nil {
			return &held{err}
		}
		if len(pending) == 0 {
			return nil
		}
		if err := w.pace(ctx, len(pending)); err != nil {
			return err
		}
		attempts++
		out := wr.attempt(ctx, pending)
		// The caller's span (one per batch) learns how hard the write was.
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int("cellttl.batch.attempts", attempts))
		if out.wrote {
			w.recovered()
		}
		if len(out.retry) == 0 {
			return nil
		}
		pending = out.retry
		if out.err == nil {
			// Rows held back before they were sent, and no failure.
			return &held{out.held}
		}
		if out.whole && ctx.Err() == nil {
			w.failing(out.code, out.err)
		}
		return &retryable{out: out}
	})
	if err != nil {
		return wr.results, fmt.Errorf("write %d rows: %w", len(pending), ctx.Err())
	}
	wr.withdrawRefused(ctx)
	return wr.results, nil
}

// retryable is an attempt that left rows to write again.
type retryable struct{ out outcome }

func (r *retryable) Error() string {
	return fmt.Sprintf("%d rows to retry (%s): %v", len(r.out.retry), r.out.code, r.out.err)
}

// onFailure counts, reports and logs an attempt that left rows to retry.
func (w *Writer) onFailure(ctx context.Context, f retry.Failure) {
	var r *retryable
	if !errors.As(f.Err, &r) {
		return
	}
	out := r.out
	w.m.retries.Add(ctx, int64(len(out.retry)), metric.WithAttributes(attribute.String("rpc.grpc.status_code", out.code.String())))
	if w.cfg.OnRetry != nil {
		w.cfg.OnRetry(len(out.retry), out.code, out.err)
	}
	w.log.Warn("bigtable write failed, retrying", "rows", len(out.retry), "attempt", f.Attempt, "code", out.code.String(),
		"whole_request", out.whole, "backoff", f.Next, "err", out.err)
}

// outcome is what one attempt left to do.
type outcome struct {
	retry []int // indexes of rows to try again
	code  codes.Code
	err   error // one of the retried rows' failures
	// whole is set when no row of the attempt was written and no row was
	// blamed: a failure the rows share.
	whole bool
	wrote bool // some row was written
	// held says why rows in retry were not sent: the writes held, or the
	// gate unable to tell (admit). With err nil, no row failed.
	held error
}

// apply makes one ApplyBulk call for the rows at pending.
func (w *Writer) apply(ctx context.Context, rows []Row, pending []int) ([]error, error) {
	keys := make([]string, len(pending))
	muts := make([]*bigtable.Mutation, len(pending))
	var writtenAt [8]byte
	binary.BigEndian.PutUint64(writtenAt[:], uint64(w.cfg.Now().UnixMicro()))
	// The ttl cells' values, one buffer for the call: the mutations hold
	// them until ApplyBulk returns.
	var ttls []byte
	for _, i := range pending {
		if rows[i].TTL.Own {
			ttls = make([]byte, 0, rowkey.TTLValueSize*len(pending))
			break
		}
	}
	for j, i := range pending {
		r := &rows[i]
		var ttl []byte
		if r.TTL.Own {
			n := len(ttls)
			ttls = rowkey.AppendTTL(ttls, r.TTL.Effective, r.TTL.Requested)
			ttl = ttls[n:len(ttls):len(ttls)]
		}
		keys[j], muts[j] = r.Key, w.mutation(r, writtenAt[:], ttl)
	}
	actx := ctx
	if w.cfg.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, w.cfg.AttemptTimeout)
		defer cancel()
	}
	start := w.cfg.Now()
	rowErrs, err := w.table.ApplyBulk(actx, keys, muts)
	w.record(ctx, start, len(pending), err, rowErrs)
	return rowErrs, err
}

// mutation writes the row's cells, all at the row's timestamp.
func (w *Writer) mutation(r *Row, writtenAt, ttl []byte) *bigtable.Mutation {
	m := bigtable.NewMutation()
	m.Set(w.family, rowkey.ColumnEvent, bigtable.Timestamp(r.Timestamp), r.Value)
	if r.WrittenAt {
		m.Set(w.family, rowkey.ColumnWrittenAt, bigtable.Timestamp(r.Timestamp), writtenAt)
	}
	if ttl != nil {
		m.Set(w.family, rowkey.ColumnTTL, bigtable.Timestamp(r.Timestamp), ttl)
	}
	return m
}

// record notes one ApplyBulk call in the metrics.
func (w *Writer) record(ctx context.Context, start time.Time, rows int, err error, rowErrs []error) {
	code := status.Code(err)
	if err == nil {
		for _, re := range rowErrs {
			if re != nil {
				code = status.Code(re)
				break
			}
		}
	}
	w.m.duration.Record(ctx, w.cfg.Now().Sub(start).Seconds(), metric.WithAttributeSet(attribute.NewSet(
		attribute.String("db.system.name", "gcp.bigtable"),
		attribute.String("db.operation.name", "MutateRows"),
		attribute.String("db.collection.name", w.tableName),
		attribute.String("db.response.status_code", code.String()),
	)))
	w.m.rows.Add(ctx, int64(rows))
}

// aboutContent reports whether a failure with code can be a property of
// the data (the same row will be refused again) rather than of the
// service's state. Such a failure is blamed on a row only with evidence
// (see Write). Every other code, including those for an unknown table or
// missing permission, is retried: those are operators' problems, and
// dead-lettering good events because of them would lose data.
func aboutContent(code codes.Code) bool {
	switch code {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		return true
	}
	return false
}
