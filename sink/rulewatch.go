package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/cellttl/cellttl/internal/tick"
)

// RuleWatch reads the family's GC rule again and again while the worker
// runs. Cell timestamps are computed for one max-age; under another, the
// cells written expire at the wrong time (a shorter rule collects them
// early: data lost). So while the family's rule is not the one the worker
// computes for (an operator ran `worker setup --update-gc-policy` before
// restarting the workers, or edited it with cbt), Held returns why, and a
// Writer given it writes nothing: its rows wait, neither written nor
// refused, until the rule and the worker agree again.
type RuleWatch struct {
	ac     *bigtable.AdminClient
	target Target
	maxAge time.Duration
	fix    string
	log    *slog.Logger

	mu       sync.Mutex
	held     error     // why writes wait, nil when the rule agrees
	failed   time.Time // last time a read failure was logged
	read     time.Time // last time the rule was read
	readErr  error     // why the last read failed, if it did
	interval time.Duration
	now      func() time.Time // the clock of the reads and their age

	also    func(context.Context) error // Also's check, nil when none
	alsoErr error                       // what it found last
}

// Also adds a check of the table that Check runs after the family's rule:
// check returns what is wrong for good (another family's rule, say), nil
// when nothing is or it could not tell. What it finds makes the worker
// unready and is logged once; it holds no write.
func (r *RuleWatch) Also(check func(context.Context) error) { r.also = check }

// NewRuleWatch watches t's rule, which must be max-age maxAge; fix says
// what to do when it is not, for the log and readiness.
func NewRuleWatch(ac *bigtable.AdminClient, t Target, maxAge time.Duration, fix string, log *slog.Logger) *RuleWatch {
	return &RuleWatch{ac: ac, target: t, maxAge: maxAge, fix: fix, log: log, read: time.Now(), now: time.Now}
}

// Problem returns why the worker is not ready as far as the rule goes:
// writes held, or the rule not read for three intervals (writes then go on
// under the rule read last, and readiness says so).
func (r *RuleWatch) Problem() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held != nil {
		return r.held
	}
	if r.alsoErr != nil {
		return r.alsoErr
	}
	if r.interval > 0 && r.now().Sub(r.read) > 3*r.interval {
		return fmt.Errorf("the GC rule of family %s has not been read for %s (%v): writes go on under the rule read last", r.target, r.now().Sub(r.read).Round(time.Second), r.readErr)
	}
	return nil
}

// Held returns why writes must wait, nil when they may go on.
func (r *RuleWatch) Held() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// Check reads the rule once. A rule that disagrees, or a family or table
// that is gone, holds writes; one that agrees releases them. When the rule
// cannot be read, what was known stays, and the error is returned.
func (r *RuleWatch) Check(ctx context.Context) error {
	err := CheckGC(ctx, r.ac, r.target, r.maxAge)
	if r.also != nil {
		also := r.also(ctx)
		r.mu.Lock()
		switch {
		case also != nil && (r.alsoErr == nil || also.Error() != r.alsoErr.Error()):
			r.log.Error("the table is not as the workers need it", "err", also)
		case also == nil && r.alsoErr != nil:
			r.log.Info("the table is as the workers need it again", "was", r.alsoErr.Error())
		}
		r.alsoErr = also
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if IsMismatch(err) || errors.Is(err, ErrNotSetUp) || err == nil {
		r.read, r.readErr = r.now(), nil
	} else {
		r.readErr = err
	}
	switch {
	case err == nil:
		if r.held != nil {
			r.log.Info("the family's GC rule agrees with the tenants file again; writes go on", "family", r.target.String(), "rule", DescribeGC(bigtable.MaxAgePolicy(r.maxAge)))
		}
		r.held = nil
	case IsMismatch(err) || errors.Is(err, ErrNotSetUp):
		held := fmt.Errorf("writes held: %w; %s", err, r.fix)
		if r.held == nil || r.held.Error() != held.Error() {
			r.log.Error("the family's GC rule changed under the worker: no cell is written until it agrees with the tenants file again, and nothing is dead-lettered for it",
				"family", r.target.String(), "err", err, "fix", r.fix)
		}
		r.held = held
	default:
		if r.now().Sub(r.failed) >= time.Minute {
			r.failed = r.now()
			r.log.Warn("could not read the family's GC rule; checking again", "family", r.target.String(), "err", err)
		}
		return err
	}
	return nil
}

// Run checks every interval until ctx ends.
func (r *RuleWatch) Run(ctx context.Context, interval time.Duration) {
	r.mu.Lock()
	r.interval = interval
	r.mu.Unlock()
	tick.Every(ctx, interval, func(ctx context.Context) {
		cctx, cancel := context.WithTimeout(ctx, max(interval, 10*time.Second))
		defer cancel()
		_ = r.Check(cctx)
	})
}
