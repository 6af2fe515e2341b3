package sink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"golang.org/x/time/rate"
)

// Throttle paces the rows a Writer sends, for a Bigtable cluster shared
// with others. Two limits, the lower in force:
//
//   - a cap in rows per second the operator sets (SetCap; the worker takes
//     it from the tenants file's max_write_rate, so an edit changes it
//     live), per worker;
//   - Bigtable's own throttling: a write refused with RESOURCE_EXHAUSTED
//     cuts the rate to half of what was sent over the last second (or of
//     the limit in force), at most once per second; each second without
//     one lets it grow by a tenth, until it reaches the cap, or, without
//     one, runs at twice what is sent and is lifted. Additive increase,
//     multiplicative decrease: retries at full speed would keep the
//     cluster saturated.
//
// Waiting is backpressure: the rows are held, never dropped; the worker
// fetches no more than its byte budget meanwhile. The Go client does not
// expose Bigtable's flow-control hints (MutateRowsResponse.rate_limit_info,
// read by the Java client's batcher): RESOURCE_EXHAUSTED is the signal
// this Writer gets.
type Throttle struct {
	now   func() time.Time
	capOf func() float64 // Follow's, nil when none

	mu      sync.Mutex
	lim     *rate.Limiter
	cap     float64   // rows/s, 0: none
	backoff float64   // rows/s since Bigtable's throttling, 0: none
	cutAt   time.Time // the last cut
	grewAt  time.Time // the last growth
	window  time.Time // start of the second sent counts
	sent    float64   // rows sent in the current second
	lastSec float64   // rows sent in the second before

	waited atomic.Int64 // nanoseconds spent waiting
	cuts   atomic.Int64
}

// minRate is the floor of a cut: a cluster refusing everything still gets
// rows, which tell when it takes writes again, and the rate grows back by
// the clock from there (about 50 s from 10 to 1,000 rows a second).
const minRate = 10

// NewThrottle returns a Throttle with no limit.
func NewThrottle() *Throttle {
	return &Throttle{now: time.Now, lim: rate.NewLimiter(rate.Inf, 0)}
}

// Follow has every Wait take the cap from capOf (rows per second, 0 for
// none): a cap that follows a reloaded configuration.
func (t *Throttle) Follow(capOf func() float64) { t.capOf = capOf }

// SetCap sets the operator's cap in rows per second; 0 lifts it.
func (t *Throttle) SetCap(rowsPerSecond float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rowsPerSecond == t.cap {
		return
	}
	t.cap = rowsPerSecond
	t.applyLocked()
}

// Limit is the rate in force, in rows per second; 0 when none is.
func (t *Throttle) Limit() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.lim.Limit(); l != rate.Inf {
		return float64(l)
	}
	return 0
}

// applyLocked puts the lower of the two limits in force.
func (t *Throttle) applyLocked() {
	l := math.Inf(1)
	if t.cap > 0 {
		l = t.cap
	}
	if t.backoff > 0 {
		l = math.Min(l, t.backoff)
	}
	if math.IsInf(l, 1) {
		t.lim.SetLimit(rate.Inf)
		return
	}
	// A second's worth of burst: one request of a full batch passes at
	// any rate a batch fits in, and WaitN is never asked for more.
	t.lim.SetBurst(max(1, int(l)))
	t.lim.SetLimit(rate.Limit(l))
}

// Wait blocks until rows may be sent, or ctx ends (its error). The rows
// are taken a burst at a time (a second's worth), and the limit is read
// again before each: a batch larger than a second's worth does not wait
// at a cut rate that grew back meanwhile, nor at a cap an edit raised
// (Follow). The time waited is counted as it passes.
func (t *Throttle) Wait(ctx context.Context, rows int) error {
	for rows > 0 {
		if t.capOf != nil {
			t.SetCap(t.capOf())
		}
		t.mu.Lock()
		t.growLocked(t.now())
		n := rows
		if t.lim.Limit() != rate.Inf {
			n = min(rows, t.lim.Burst())
		}
		// Reserved under the lock: a cut or a cap edit in between could
		// shrink the burst below n, which WaitN refuses.
		r := t.lim.ReserveN(t.now(), n)
		t.mu.Unlock()
		if !r.OK() {
			continue // the limit changed since: asked again
		}
		if d := r.DelayFrom(t.now()); d > 0 {
			start := t.now()
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				r.Cancel()
				t.waited.Add(int64(t.now().Sub(start)))
				return fmt.Errorf("wait for the write rate limit: %w", ctx.Err())
			}
			t.waited.Add(int64(t.now().Sub(start)))
		}
		rows -= n
	}
	return nil
}

// growLocked lets a rate cut by Bigtable's throttling grow back by a tenth
// (and a row) for each whole second since it last grew or was cut: by the
// clock, not by the requests, which a low rate makes rare.
func (t *Throttle) growLocked(now time.Time) {
	if t.backoff == 0 {
		return
	}
	secs := int(now.Sub(t.grewAt) / time.Second)
	if secs < 1 {
		return
	}
	for range min(secs, 100) {
		t.backoff = t.backoff*1.1 + 1
	}
	t.grewAt = t.grewAt.Add(time.Duration(secs) * time.Second)
	switch {
	case t.cap > 0 && t.backoff >= t.cap:
		t.backoff = 0
	case t.cap == 0 && t.backoff >= 2*max(t.lastSec, t.sent, minRate):
		t.backoff = 0 // it no longer binds
	}
	t.applyLocked()
}

// Sent counts rows a request carried, whatever its outcome, cuts the rate
// when Bigtable throttled it, and otherwise lets a cut rate grow back.
func (t *Throttle) Sent(rows int, throttled bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.window) >= time.Second {
		t.lastSec, t.sent, t.window = t.sent, 0, now
	}
	t.sent += float64(rows)
	if throttled {
		if now.Sub(t.cutAt) < time.Second {
			return
		}
		from := max(t.lastSec, t.sent)
		if l := t.lim.Limit(); l != rate.Inf {
			from = math.Min(from, float64(l))
		}
		t.backoff, t.cutAt, t.grewAt = max(minRate, from/2), now, now
		t.cuts.Add(1)
		t.applyLocked()
		return
	}
	t.growLocked(now)
}

// registerMetrics reports the rate in force and the time spent waiting.
func (t *Throttle) registerMetrics(m metric.Meter) error {
	limit, err1 := m.Float64ObservableGauge("cellttl.bigtable.write_rate_limit", metric.WithUnit("{row}/s"),
		metric.WithDescription("rows per second this worker may send to Bigtable: the lower of max_write_rate (tenants file) and the rate Bigtable's throttling (RESOURCE_EXHAUSTED) left; 0 when neither limits"))
	waited, err2 := m.Float64ObservableCounter("cellttl.bigtable.throttle_wait", metric.WithUnit("s"),
		metric.WithDescription("time writes waited for the write rate limit"))
	cuts, err3 := m.Int64ObservableCounter("cellttl.bigtable.throttled", metric.WithUnit("{cut}"),
		metric.WithDescription("cuts of the write rate after Bigtable refused writes with RESOURCE_EXHAUSTED (at most one a second)"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("register write rate metrics: %w", err)
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(limit, t.Limit())
		o.ObserveFloat64(waited, time.Duration(t.waited.Load()).Seconds())
		o.ObserveInt64(cuts, t.cuts.Load())
		return nil
	}, limit, waited, cuts)
	if err != nil {
		return fmt.Errorf("register write rate metrics: %w", err)
	}
	return nil
}
