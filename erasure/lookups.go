package erasure

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// LookupPatience is how long lookups of users held compact may keep
// failing before the worker calls itself not ready: each failure holds the
// partition (or the write) that asked, and a short outage of the ledger
// table should not take the pod out of its Service.
const LookupPatience = 30 * time.Second

// DefaultLookupAttempt bounds one lookup of a user held compact, the client's own
// retries included: a point read answers in milliseconds, and several
// failed attempts fit in LookupPatience before the worker calls itself not
// ready.
const DefaultLookupAttempt = 5 * time.Second

// lookups is how the compact part's lookups fare, for the store that makes
// them: a record that waits for one holds its partition, a row its write,
// and without this nothing would say so. A failure after an answer (or the
// first ever) begins a wait, logged once with its cause; the next answer
// ends it, logged once too. The counts are for the metrics.
type lookups struct {
	answered, failed atomic.Int64

	mu    sync.Mutex
	log   *slog.Logger // nil: not logged (a store without a watch)
	since time.Time    // when the failures began, zero while lookups answer
	err   error
	now   func() time.Time
}

func (l *lookups) done(err error) {
	if err == nil {
		l.answered.Add(1)
	} else {
		l.failed.Add(1)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && l.since.IsZero():
		l.since, l.err = l.clock(), err
		if l.log != nil {
			l.log.Warn("looking up erased users held compact fails: records of these users wait, each holding its partition, and rechecked rows their write, until the ledger table answers",
				"err", err)
		}
	case err != nil:
		l.err = err
	case !l.since.IsZero():
		if l.log != nil {
			l.log.Info("lookups of erased users held compact answer again", "failing_for", l.clock().Sub(l.since).Round(time.Second))
		}
		l.since, l.err = time.Time{}, nil
	}
}

func (l *lookups) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// waiting returns since when lookups fail, and the last failure.
func (l *lookups) waiting() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since, l.err
}

// problem is the wait, once it has lasted past LookupPatience.
func (l *lookups) problem() error {
	since, err := l.waiting()
	if since.IsZero() || l.clock().Sub(since) <= LookupPatience {
		return nil
	}
	return fmt.Errorf("lookups of erased users held compact have failed since %s: records of those users wait, each holding its partition: %w",
		since.Format(time.RFC3339), err)
}
