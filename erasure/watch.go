package erasure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// StaleAfter is how many refresh intervals a worker writes under the
// ledger it loaded last: past that, writes wait until a load succeeds.
// With the write timeout it makes the bound forget waits between its
// passes (docs/retention.md, "Erasure").
const StaleAfter = 3

// FullEvery is how many refreshes apart the records are read in full; the
// refreshes between read the journal of the last minutes only (see
// Store). A full read drops the records that expired, and finds a record
// the journal reads missed: one whose recording host's clock was more than
// JournalMargin behind the worker's.
const FullEvery = 12

// JournalMargin is how far before the last load a refresh reads the
// journal from: room for the clocks of the host that ran forget and of
// the worker to disagree, and for a record to become visible some time
// after the time it carries.
const JournalMargin = 5 * time.Minute

// Watch holds the ledger in force and loads it again every interval.
//
// The promise it keeps: a write attempt starts only under a ledger loaded
// at most StaleAfter intervals ago (Held), and rows decided under an older
// generation are checked against the current one before each attempt
// (Admits). So a user erased by a record written at t has no row written
// by an attempt that starts after t + StaleAfter×interval.
type Watch struct {
	store    *Store
	interval time.Duration
	log      *slog.Logger
	now      func() time.Time
	// fullEvery is FullEvery, but for tests.
	fullEvery int

	cur atomic.Pointer[Ledger]

	mu        sync.Mutex
	loadedAt  time.Time // last successful load
	missing   bool      // the table did not exist at the last load
	seen      bool      // the table existed at some load
	fullAt    time.Time // last successful full read
	sinceFull int       // refreshes since it
	ignored   int       // rows the last load could not read as records
	lastErr   error     // why the last load failed, nil when it did not
	warned    bool      // lastErr has been logged
}

// NewWatch returns a watch of store's ledger, to be started with Start.
func NewWatch(store *Store, interval time.Duration, log *slog.Logger) *Watch {
	w := &Watch{store: store, interval: interval, log: log, now: time.Now, fullEvery: FullEvery}
	w.cur.Store(&Ledger{})
	return w
}

// Start loads the ledger the first time, trying again until it loads or
// ctx ends: a worker must not write an event before it knows who was
// erased. A missing table is an empty ledger (no erasure can have been
// recorded: forget writes nowhere else), and is logged.
func (w *Watch) Start(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		err := w.load(ctx)
		if err == nil {
			if w.Missing() {
				w.log.Warn("erasure ledger table missing: no erasure can be recorded until worker setup creates it; it is looked for again every refresh",
					"table", w.store.Table(), "refresh", w.interval)
			} else {
				w.log.Info("erasure ledger loaded", "table", w.store.Table(), "erased_users", w.Current().Len(), "refresh", w.interval)
			}
			return nil
		}
		w.log.Warn("erasure ledger not loaded yet; nothing is written until it is", "table", w.store.Table(), "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("load the erasure ledger: %w", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, w.interval)
	}
}

// Run loads the ledger every interval until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.refresh(ctx)
		}
	}
}

// refresh loads once, logging a failure once until a load succeeds.
func (w *Watch) refresh(ctx context.Context) {
	err := w.load(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil && ctx.Err() == nil && !w.warned:
		w.warned = true
		w.log.Warn("erasure ledger refresh failed; writes wait once it is older than the bound", "table", w.store.Table(),
			"last_loaded", w.loadedAt, "bound", StaleAfter*w.interval, "err", err)
	case err == nil && w.warned:
		w.warned = false
		w.log.Info("erasure ledger refreshed again", "table", w.store.Table(), "erased_users", w.cur.Load().Len())
	}
}

// load reads the ledger, in full or the journal since the last load, and
// puts it in force.
func (w *Watch) load(ctx context.Context) error {
	start := w.now()
	lctx, cancel := context.WithTimeout(ctx, max(w.interval, 5*time.Second))
	defer cancel()
	prev := w.cur.Load()
	w.mu.Lock()
	full := w.sinceFull+1 >= w.fullEvery || w.fullAt.IsZero() || w.missing || w.lastErr != nil
	since := w.loadedAt.Add(-JournalMargin)
	w.mu.Unlock()
	var next *Ledger
	var ignored int
	var err error
	if full {
		next, ignored, err = w.store.LoadLedger(lctx, start)
	} else {
		var entries []entry
		if entries, err = w.store.loadSince(lctx, since); err == nil {
			next = prev.with(entries, start)
		}
	}
	missing := errors.Is(err, ErrMissing)
	w.mu.Lock()
	if missing && w.seen {
		// Gone after it was there: its records are not known to be none.
		err = fmt.Errorf("the erasure ledger table %s existed and is gone: %w", w.store.Table(), err)
		missing = false
	}
	w.mu.Unlock()
	if err != nil && !missing {
		w.mu.Lock()
		w.lastErr = err
		w.mu.Unlock()
		return err
	}
	if next == nil {
		next = &Ledger{} // no table: no erasure
	}
	if next != prev {
		next.gen = prev.gen
		if next.newer(prev) {
			next.gen++
		}
		w.cur.Store(next)
	}
	w.mu.Lock()
	// The load counts from when it began: a record written after that
	// may not be in it.
	w.loadedAt, w.missing, w.lastErr = start, missing, nil
	w.seen = w.seen || !missing
	if full {
		w.fullAt, w.sinceFull, w.ignored = start, 0, ignored
	} else {
		w.sinceFull++
	}
	w.mu.Unlock()
	return nil
}

// Current returns the ledger in force. It never blocks.
func (w *Watch) Current() *Ledger { return w.cur.Load() }

// Generation is the current ledger's generation.
func (w *Watch) Generation() uint64 { return w.cur.Load().gen }

// Admits reports whether the row at key may be written under the ledger
// in force.
func (w *Watch) Admits(key string) bool { return !w.cur.Load().ErasedKey(key) }

// Missing reports whether the ledger table did not exist at the last load.
func (w *Watch) Missing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.missing
}

// Held returns why writes must wait: the ledger in force was loaded more
// than StaleAfter intervals ago, so an erasure recorded since might not be
// in it.
func (w *Watch) Held() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if age := w.now().Sub(w.loadedAt); age > StaleAfter*w.interval {
		return fmt.Errorf("the erasure ledger %s was last loaded %s ago, more than %d refresh intervals (%v): writes wait until it loads",
			w.store.Table(), age.Round(time.Second), StaleAfter, w.lastErr)
	}
	return nil
}

// Status is the watch as /status shows it.
type Status struct {
	Table       string `json:"table"`
	State       string `json:"state"` // loaded, missing (no table), stale (writes wait)
	ErasedUsers int    `json:"erased_users"`
	Generation  uint64 `json:"generation"`
	// LoadedAt is when the load in force began: every record written
	// before it is obeyed.
	LoadedAt time.Time `json:"loaded_at"`
	// FullReadAt is the last read of every record (the others read the
	// journal of what was recorded since).
	FullReadAt time.Time `json:"full_read_at"`
	Refresh    string    `json:"refresh"`
	Ignored    int       `json:"ignored_rows,omitempty"`
	Error      string    `json:"error,omitempty"`
}

// Status returns the watch's state.
func (w *Watch) Status() Status {
	l := w.cur.Load()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := Status{Table: w.store.Table(), State: "loaded", ErasedUsers: l.Len(), Generation: l.gen,
		LoadedAt: w.loadedAt, FullReadAt: w.fullAt, Refresh: w.interval.String(), Ignored: w.ignored}
	if w.missing {
		s.State = "missing"
	}
	if w.lastErr != nil {
		s.Error = w.lastErr.Error()
	}
	if w.now().Sub(w.loadedAt) > StaleAfter*w.interval {
		s.State = "stale"
	}
	return s
}
