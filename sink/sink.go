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
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Column qualifiers within the family.
const (
	ColumnEvent     = "event"
	ColumnWrittenAt = "written_at"
)

// MaxMutationsPerRequest is Bigtable's limit for one MutateRows request.
const MaxMutationsPerRequest = 100_000

// Row is one event's row.
type Row struct {
	Key string
	// Timestamp of every cell of the row, in microseconds, a multiple of 1000.
	Timestamp int64
	// Value goes into the event column exactly as given.
	Value []byte
	// WrittenAt asks for the written_at column with the real write time, at
	// the same timestamp so that it expires with the event.
	WrittenAt bool
}

// Cells is the number of cells (mutations) the row writes.
func (r *Row) Cells() int {
	if r.WrittenAt {
		return 2
	}
	return 1
}

// Writer writes rows into one family of one table.
type Writer struct {
	table     *bigtable.Table
	tableName string
	family    string
	cfg       WriterConfig
	log       *slog.Logger
	m         writerMetrics
}

type writerMetrics struct {
	duration metric.Float64Histogram
	rows     metric.Int64Counter
	retries  metric.Int64Counter
}

func newWriterMetrics() writerMetrics {
	// From the global provider as it is now: telemetry.Setup installs one
	// before the writer is built.
	meter := otel.Meter("github.com/cellttl/cellttl/sink")
	// Instrument creation only fails on invalid names; these are constant.
	d, _ := meter.Float64Histogram("db.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("duration of Bigtable MutateRows calls, one per attempt"),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	r, _ := meter.Int64Counter("cellttl.bigtable.rows_attempted", metric.WithUnit("{row}"),
		metric.WithDescription("rows sent to Bigtable, retries included"))
	re, _ := meter.Int64Counter("cellttl.bigtable.retries", metric.WithUnit("{row}"),
		metric.WithDescription("rows retried after a retryable failure, by gRPC status code"))
	return writerMetrics{duration: d, rows: r, retries: re}
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
	// Now is the clock for written_at; time.Now when nil.
	Now func() time.Time
}

// DefaultWriterConfig returns the defaults.
func DefaultWriterConfig() WriterConfig {
	return WriterConfig{AttemptTimeout: 30 * time.Second, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second}
}

// NewWriter returns a Writer for the target family.
func NewWriter(c *bigtable.Client, t Target, cfg WriterConfig, log *slog.Logger) *Writer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Writer{table: c.Open(t.Table), tableName: t.Table, family: t.Family, cfg: cfg, log: log, m: newWriterMetrics()}
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
func (w *Writer) Write(ctx context.Context, rows []Row) ([]error, error) {
	results := make([]error, len(rows))
	pending := make([]int, len(rows)) // indexes of rows not yet settled
	for i := range pending {
		pending[i] = i
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = w.cfg.InitialBackoff
	bo.MaxInterval = w.cfg.MaxBackoff
	bo.MaxElapsedTime = 0
	for attempt := 1; ; attempt++ {
		retry, code, err := w.attempt(ctx, rows, pending, results)
		// The caller's span (one per batch) learns how hard the write was.
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int("cellttl.batch.attempts", attempt))
		if len(retry) == 0 {
			return results, nil
		}
		if ctx.Err() != nil {
			return results, fmt.Errorf("write %d rows: %w", len(retry), ctx.Err())
		}
		w.m.retries.Add(ctx, int64(len(retry)), metric.WithAttributes(attribute.String("rpc.grpc.status_code", code.String())))
		if w.cfg.OnRetry != nil {
			w.cfg.OnRetry(len(retry), code, err)
		}
		wait := bo.NextBackOff()
		w.log.Warn("bigtable write failed, retrying", "rows", len(retry), "attempt", attempt, "code", code.String(), "backoff", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return results, fmt.Errorf("write %d rows: %w", len(retry), ctx.Err())
		case <-t.C:
		}
		pending = retry
	}
}

// attempt makes one ApplyBulk call for the rows at pending, records the rows
// rejected for good in results and returns the indexes to try again, with
// the code and error of one of their failures.
func (w *Writer) attempt(ctx context.Context, rows []Row, pending []int, results []error) ([]int, codes.Code, error) {
	keys := make([]string, len(pending))
	muts := make([]*bigtable.Mutation, len(pending))
	var writtenAt [8]byte
	binary.BigEndian.PutUint64(writtenAt[:], uint64(w.cfg.Now().UnixMicro()))
	for j, i := range pending {
		keys[j], muts[j] = rows[i].Key, w.mutation(&rows[i], writtenAt[:])
	}
	actx := ctx
	if w.cfg.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, w.cfg.AttemptTimeout)
		defer cancel()
	}
	start := time.Now()
	rowErrs, err := w.table.ApplyBulk(actx, keys, muts)
	w.record(ctx, start, len(pending), err, rowErrs)
	if err != nil {
		code := status.Code(err)
		if permanent(code) && ctx.Err() == nil {
			// The request as a whole was refused. Blame no row for that
			// unless it is the only one: split the batch to find it.
			if len(pending) == 1 {
				results[pending[0]] = &RowError{Code: code, Err: err}
				return nil, code, nil
			}
			h := len(pending) / 2
			r1, _, _ := w.attempt(ctx, rows, pending[:h], results)
			r2, c2, e2 := w.attempt(ctx, rows, pending[h:], results)
			return append(r1, r2...), c2, e2
		}
		return pending, code, err
	}
	var retry []int
	var lastCode codes.Code
	var lastErr error
	for j, rerr := range rowErrs {
		if rerr == nil {
			continue
		}
		code := status.Code(rerr)
		if permanent(code) {
			results[pending[j]] = &RowError{Code: code, Err: rerr}
			continue
		}
		retry = append(retry, pending[j])
		lastCode, lastErr = code, rerr
	}
	return retry, lastCode, lastErr
}

// mutation writes the row's cells, all at the row's timestamp.
func (w *Writer) mutation(r *Row, writtenAt []byte) *bigtable.Mutation {
	m := bigtable.NewMutation()
	m.Set(w.family, ColumnEvent, bigtable.Timestamp(r.Timestamp), r.Value)
	if r.WrittenAt {
		m.Set(w.family, ColumnWrittenAt, bigtable.Timestamp(r.Timestamp), writtenAt)
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
	w.m.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributeSet(attribute.NewSet(
		attribute.String("db.system.name", "gcp.bigtable"),
		attribute.String("db.operation.name", "MutateRows"),
		attribute.String("db.collection.name", w.tableName),
		attribute.String("db.response.status_code", code.String()),
	)))
	w.m.rows.Add(ctx, int64(rows))
}

// permanent reports whether a failure with code is a property of the data
// (the same row will be refused again) rather than of the service's state.
// Everything else, including the codes for an unknown table or missing
// permission, is retried: those are operators' problems, and dead-lettering
// good events because of them would lose data.
func permanent(code codes.Code) bool {
	switch code {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		return true
	}
	return false
}

// IsRowError reports whether err is a permanent per-row failure.
func IsRowError(err error) bool {
	var re *RowError
	return errors.As(err, &re)
}
