// Package retry is the one way cellttl waits between attempts: exponential
// backoff on cenkalti/backoff, with no limit on the number of attempts.
// Retrying forever is right only for a fault that time can heal; callers
// classify errors first and make an unhealable one loud (readiness, a log
// line with the fix, a metric) while they keep trying, so that nothing is
// lost and nothing is silent.
package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Policy is the range of waits: from Initial, growing by half (the backoff
// package's multiplier, 1.5) up to Max, each wait then jittered by ±50% so
// that workers retrying the same outage spread out: one wait may reach
// 1.5 × Max.
type Policy struct {
	Initial, Max time.Duration
}

// Curve is a Policy's waits for a caller that waits on its own, in a loop
// that waits for other things too (the fetch loop, the group's
// generations): Next is the next wait, Reset starts over after a success.
type Curve struct{ b *backoff.ExponentialBackOff }

// Curve returns p's waits, from Initial.
func (p Policy) Curve() *Curve {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = p.Initial, p.Max
	b.MaxElapsedTime = 0 // never give up
	b.Reset()
	return &Curve{b: b}
}

// Next returns the next wait, jittered.
func (c *Curve) Next() time.Duration { return c.b.NextBackOff() }

// Reset starts the waits over from Initial.
func (c *Curve) Reset() { c.b.Reset() }

// Backoff counts attempts and sleeps between them until its context ends:
//
//	b := retry.New(ctx, policy)
//	for {
//		err := try()
//		if err == nil || !b.Wait() {
//			break
//		}
//	}
type Backoff struct {
	ctx     context.Context
	b       *backoff.ExponentialBackOff
	attempt int
	next    time.Duration
}

// New starts counting at attempt 1.
func New(ctx context.Context, p Policy) *Backoff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = p.Initial, p.Max
	b.MaxElapsedTime = 0 // never give up: the context decides
	b.Reset()
	r := &Backoff{ctx: ctx, b: b, attempt: 1}
	r.next = b.NextBackOff()
	return r
}

// Attempt is the number of the attempt in progress, from 1.
func (r *Backoff) Attempt() int { return r.attempt }

// Next is how long the next Wait sleeps, for log lines that say so.
func (r *Backoff) Next() time.Duration { return r.next }

// Wait sleeps before the next attempt. It returns false, at once, when the
// context has ended.
func (r *Backoff) Wait() bool {
	if r.ctx.Err() != nil {
		return false
	}
	t := time.NewTimer(r.next)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return false
	case <-t.C:
	}
	r.attempt++
	r.next = r.b.NextBackOff()
	return true
}

// Failure is one failed attempt, as Do reports it before waiting.
type Failure struct {
	Attempt int           // from 1
	Next    time.Duration // the wait before the next attempt
	Err     error
	// Permanent is the classification hook's verdict: a fault time does not
	// heal (a permission, a missing topic). It is retried all the same, so
	// that nothing is lost, and must be made loud.
	Permanent bool
}

// Loop is the retry-forever loop of cellttl: the Bigtable writes and the
// dead-letter produces both run through it, with one classification hook
// and one metric.
type Loop struct {
	Op     string // what is retried, the label of cellttl.retries
	Policy Policy
	// Permanent classifies an error; nil treats every error as transient.
	Permanent func(error) bool
	// OnFailure, when set, is told of each failure before the wait: the
	// caller's log line and its own counters.
	OnFailure func(context.Context, Failure)
	retries   metric.Int64Counter
}

// NewLoop returns a loop whose failures are counted in cellttl.retries
// {op, class} through mp (not counted when nil).
func NewLoop(op string, p Policy, mp metric.MeterProvider) (*Loop, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	c, err := mp.Meter(scope).Int64Counter("cellttl.retries", metric.WithUnit("{attempt}"),
		metric.WithDescription("failed attempts retried with backoff, by operation and class (transient or permanent)"))
	if err != nil {
		return nil, fmt.Errorf("register retry metric: %w", err)
	}
	// Both classes exist from start-up, at 0, for rate() and dashboards.
	for _, class := range []string{"transient", "permanent"} {
		c.Add(context.Background(), 0, metric.WithAttributes(attribute.String("op", op), attribute.String("class", class)))
	}
	return &Loop{Op: op, Policy: p, retries: c}, nil
}

// scope names the package's metric.
const scope = "github.com/cellttl/cellttl/internal/retry"

// Do calls attempt until it returns nil, waiting between calls, without a
// limit on the number of attempts: until ctx ends, when Do returns the last
// error joined with ctx's.
func (l *Loop) Do(ctx context.Context, attempt func(ctx context.Context) error) error {
	b := New(ctx, l.Policy)
	for {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		f := Failure{Attempt: b.Attempt(), Next: b.Next(), Err: err, Permanent: l.Permanent != nil && l.Permanent(err)}
		class := "transient"
		if f.Permanent {
			class = "permanent"
		}
		if l.retries != nil {
			l.retries.Add(ctx, 1, metric.WithAttributes(attribute.String("op", l.Op), attribute.String("class", class)))
		}
		if l.OnFailure != nil {
			l.OnFailure(ctx, f)
		}
		if !b.Wait() {
			return errors.Join(err, ctx.Err())
		}
	}
}
