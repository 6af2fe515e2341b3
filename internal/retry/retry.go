// Package retry is the one way cellttl waits between attempts: exponential
// backoff on cenkalti/backoff, with no limit on the number of attempts.
// Retrying forever is right only for a fault that time can heal; callers
// classify errors first and make an unhealable one loud (readiness, a log
// line with the fix, a metric) while they keep trying, so that nothing is
// lost and nothing is silent.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy is the range of waits: from Initial, doubling up to Max, each wait
// then jittered by ±50% so that workers retrying the same outage spread out.
type Policy struct {
	Initial, Max time.Duration
}

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
