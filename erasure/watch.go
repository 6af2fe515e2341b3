package erasure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellttl/cellttl/internal/retry"
	"github.com/cellttl/cellttl/internal/tick"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// StaleAfter is how many refresh intervals a worker writes under the
// ledger it loaded last: past that, writes wait until a load succeeds.
// With the write timeout it makes the bound forget waits between its
// passes (docs/retention.md, "Erasure").
const StaleAfter = 3

// Bound is the workers' bound, for workers reading the ledger every
// refresh and giving a write attempt up to writeTimeout: a user erased at
// t has no row written after t + Bound.
func Bound(refresh, writeTimeout time.Duration) time.Duration {
	return StaleAfter*refresh + writeTimeout
}

// RereadEvery is how often a worker reads the records in force again (the
// expiry index from now on: the working set, not the ledger's history);
// the refreshes between read the journal of the last minutes only (see
// Store and journalFrom). A reread drops from memory the records that
// expired, and finds a record the journal reads missed: one whose journal
// row became readable more than JournalMargin after the time it carries,
// or whose time lies more than RereadEvery + JournalMargin behind the
// worker's clock.
const RereadEvery = 15 * time.Minute

// JournalMargin is how far before its cursor a refresh reads the journal:
// room for the clocks of the hosts that ran forget to disagree (each lies
// within ClockTolerance of Bigtable's), and for a record to become
// readable some time after the time it carries.
const JournalMargin = 5 * time.Minute

// ClockTolerance is how far forget's clock may lie from Bigtable's: forget
// refuses to record beyond it, so that a journal row carries Bigtable's
// time within it, and a worker whose clock lies within JournalMargin -
// ClockTolerance of Bigtable's reads it.
const ClockTolerance = time.Minute

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
	// rereadEvery is RereadEvery, but for tests.
	rereadEvery time.Duration

	cur atomic.Pointer[Ledger]

	mu       sync.Mutex
	loadedAt time.Time // last successful load
	readAt   time.Time // last successful read of the records in force
	rereadAt time.Time // when the next is due
	indexed  bool      // the last read of the records in force read the index
	// newest is the latest time a journal row read carried: the
	// journal's clock (see journalFrom).
	newest time.Time
	// journal and journalBefore are what the journal reads added since
	// the last reread of the records in force, and in the period before
	// it: a reread keeps them (an index cell is written just after its
	// journal row), and lets go of the rest, so that a record's life,
	// once retired, shortens in the workers too.
	journal, journalBefore *Ledger
	// ids are the topics' incarnations the worker reads (SetTopicID).
	ids       map[string]string
	saidAhead bool   // journalAhead has warned
	lastRead  string // what the last load read, and how many rows or records
	lastRows  int    // how many
	ignored   int    // rows the last read of the records could not read as records
	lastErr   error  // why the last load failed, nil when it did not
	warned    bool   // lastErr has been logged
}

// NewWatch returns a watch of store's ledger, to be started with Start.
func NewWatch(store *Store, interval time.Duration, log *slog.Logger) *Watch {
	w := &Watch{store: store, interval: interval, log: log, now: time.Now, rereadEvery: RereadEvery}
	store.lookups.mu.Lock()
	store.lookups.log = log
	store.lookups.mu.Unlock()
	w.cur.Store(&Ledger{})
	return w
}

// Start loads the ledger the first time, trying again until it loads or
// ctx ends: a worker must not write an event before it knows who was
// erased. A missing table is an error at once: it is not "no erasure"
// (a mistyped --erasure-table, a table deleted, worker setup not run
// since the ledger came in), and a worker that took it for one would
// write the events of every user erased.
func (w *Watch) Start(ctx context.Context) error {
	// Workers restarted together retry the same ledger, hence the jitter.
	b := retry.New(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: w.interval})
	for {
		err := w.load(ctx)
		if err == nil {
			w.mu.Lock()
			indexed, read := w.indexed, w.lastRead
			w.mu.Unlock()
			w.log.Info("erasure ledger loaded", "table", w.store.Table(), "erased_users", w.Current().Len(), "read", read, "refresh", w.interval)
			if !indexed {
				w.log.Warn("the erasure ledger has no expiry index yet (records of an earlier release): this start read every record, as each start will until `worker setup` indexes it",
					"table", w.store.Table())
			}
			return nil
		}
		if errors.Is(err, ErrMissing) {
			return err
		}
		w.log.Warn("erasure ledger not loaded yet; nothing is written until it is", "table", w.store.Table(), "err", err)
		if !b.Wait() {
			return fmt.Errorf("load the erasure ledger: %w", err)
		}
	}
}

// SetClock sets the clock the Watch decides by (which records are in
// force, when its ledger is stale): the host's, which a test may move.
// Call it before Run.
func (w *Watch) SetClock(now func() time.Time) { w.now = now }

// SetTopicID says which incarnation of topic the worker reads: its Kafka
// topic id (a mark of another covers every record of the topic). A worker
// that could not read the id calls it not at all, and marks cover by
// offsets. The ledger in force moves to a new generation: rows decided
// before are checked again.
func (w *Watch) SetTopicID(topic, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := maps.Clone(w.ids)
	if ids == nil {
		ids = map[string]string{}
	}
	ids[topic] = id
	w.ids = ids
	cur := *w.cur.Load()
	cur.ids = ids
	cur.gen++
	w.cur.Store(&cur)
}

// Run loads the ledger every interval until ctx ends.
func (w *Watch) Run(ctx context.Context) { tick.Every(ctx, w.interval, w.refresh) }

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

// journalAhead says, once, that the journal holds a row whose time lies
// more than ClockTolerance past this worker's clock at start.
func (w *Watch) journalAhead(beyond, start time.Time) {
	if beyond.IsZero() || beyond.Sub(start) <= ClockTolerance {
		return
	}
	w.mu.Lock()
	said := w.saidAhead
	w.saidAhead = true
	w.mu.Unlock()
	if !said {
		w.log.Warn("the erasure journal holds a row stamped ahead of this worker's clock: this worker's clock runs behind (see NTP), or a forget host's ran ahead when it recorded",
			"table", w.store.Table(), "row_time", beyond.UTC(), "worker_clock", start.UTC(), "ahead_by", beyond.Sub(start).Round(time.Second))
	}
}

// journalFrom is where a refresh reads the journal from, for a worker
// that last loaded at loaded (its own clock) and has read journal rows up
// to newest (the journal's clock, zero before any). The journal is keyed
// by the clock of the host that ran forget, which lies within
// ClockTolerance of Bigtable's; the worker's own is not checked, and a
// worker running ahead that read from loaded less JournalMargin would
// pass over records just written. So the cursor is the earlier of loaded
// and newest, but never earlier than reread less the reread interval: a
// worker whose clock runs up to that far ahead misses nothing between
// rereads, and a ledger without new records costs a read of the last
// rereadEvery + JournalMargin of the journal, not of its history. The
// price: a burst of records followed by none is read again for up to
// that long (20 minutes), where the margin alone read it for 5; known
// records change nothing in memory (Ledger.with).
func journalFrom(loaded, newest time.Time, rereadEvery time.Duration) time.Time {
	cursor := later(newest, loaded.Add(-rereadEvery))
	if loaded.Before(cursor) {
		cursor = loaded
	}
	return cursor.Add(-JournalMargin)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Current returns the ledger in force. It never blocks.
func (w *Watch) Current() *Ledger { return w.cur.Load() }

// Generation is the current ledger's generation.
func (w *Watch) Generation() uint64 { return w.cur.Load().gen }

// Admits reports whether the row at key, of the record read at at (the
// zero Position for a row whose record is not known), may be written
// under the ledger in force. A user the compact part may hold is looked
// up first, once: its error says the ledger cannot tell yet, and the
// write waits (sink.Gate).
func (w *Watch) Admits(ctx context.Context, key string, at Position) (bool, error) {
	l := w.cur.Load()
	if err := l.askKey(ctx, key); err != nil {
		return false, err
	}
	return !l.ErasedKey(key, at), nil
}

// Problem is why records wait for lookups of users held compact, once
// the lookups have failed for longer than LookupPatience: for /readyz.
func (w *Watch) Problem() error { return w.store.lookups.problem() }

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
	State       string `json:"state"` // loaded, or stale (writes wait)
	ErasedUsers int    `json:"erased_users"`
	// CompactUsers is how many of ErasedUsers are of records kept forever
	// held as a filter (see compact): an event of one waits for a lookup.
	CompactUsers int `json:"compact_users,omitempty"`
	// LookupsFailingSince is set while the lookups of users held compact
	// fail: records of those users wait, each holding its partition.
	LookupsFailingSince *time.Time `json:"lookups_failing_since,omitempty"`
	LookupError         string     `json:"lookup_error,omitempty"`
	Generation          uint64     `json:"generation"`
	// LoadedAt is when the load in force began: every record written
	// before it is obeyed.
	LoadedAt time.Time `json:"loaded_at"`
	// FullReadAt is the last read of the records in force, every
	// RereadEvery (the other loads read the journal of what was recorded
	// since). Its name is the one it had when that read was of every
	// record.
	FullReadAt time.Time `json:"full_read_at"`
	// Indexed is false when the ledger had no expiry index when the
	// worker started (records of an earlier release, before worker setup
	// indexed them): that start read every record.
	Indexed bool `json:"indexed"`
	// LastRead says what the last load read: the journal, or the records
	// in force, and how many rows.
	LastRead string `json:"last_read,omitempty"`
	Refresh  string `json:"refresh"`
	Ignored  int    `json:"ignored_rows,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Status returns the watch's state.
func (w *Watch) Status() Status {
	l := w.cur.Load()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := Status{Table: w.store.Table(), State: "loaded", ErasedUsers: l.Len(), CompactUsers: l.compact.len(), Generation: l.gen,
		LoadedAt: w.loadedAt, FullReadAt: w.readAt, Indexed: w.indexed, LastRead: w.lastRead, Refresh: w.interval.String(), Ignored: w.ignored}
	if w.lastErr != nil {
		s.Error = w.lastErr.Error()
	}
	if since, err := w.store.lookups.waiting(); !since.IsZero() {
		s.LookupsFailingSince, s.LookupError = &since, err.Error()
	}
	if w.now().Sub(w.loadedAt) > StaleAfter*w.interval {
		s.State = "stale"
	}
	return s
}

// RegisterMetrics reports the ledger's size and age, read from the watch
// when metrics are collected.
func (w *Watch) RegisterMetrics(m metric.Meter) error {
	users, err1 := m.Int64ObservableGauge("cellttl.erasure.users", metric.WithUnit("{user}"),
		metric.WithDescription("users the erasure ledger in force erases"))
	age, err2 := m.Float64ObservableGauge("cellttl.erasure.ledger_age", metric.WithUnit("s"),
		metric.WithDescription("seconds since the erasure ledger in force began loading; writes wait past 3 × --erasure-refresh"))
	lookups, err3 := m.Int64ObservableCounter("cellttl.erasure.lookups", metric.WithUnit("{lookup}"),
		metric.WithDescription("lookups of users the erasure ledger holds compact (records kept forever past --erasure-exact-forever), by outcome: answered, failed (the record or row waits and asks again)"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("register erasure metrics: %w", err)
	}
	answered, failed := metric.WithAttributes(attribute.String("outcome", "answered")), metric.WithAttributes(attribute.String("outcome", "failed"))
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(users, int64(w.Current().Len()))
		o.ObserveInt64(lookups, w.store.lookups.answered.Load(), answered)
		o.ObserveInt64(lookups, w.store.lookups.failed.Load(), failed)
		w.mu.Lock()
		loaded := w.loadedAt
		w.mu.Unlock()
		if !loaded.IsZero() {
			o.ObserveFloat64(age, w.now().Sub(loaded).Seconds())
		}
		return nil
	}, users, age, lookups)
	if err != nil {
		return fmt.Errorf("register erasure metrics: %w", err)
	}
	return nil
}

// Follow loads the ledger (within a minute) and keeps it fresh in the
// background until stop is called: for the jobs that write or rewrite rows
// beside the workers (redrive, retime, migrate), which must obey it as the
// workers do.
func Follow(ctx context.Context, store *Store, refresh time.Duration, log *slog.Logger) (w *Watch, stop func(), err error) {
	w = NewWatch(store, refresh, log)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = w.Start(sctx)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	bg, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(bg)
	}()
	return w, func() { cancel(); <-done }, nil
}
