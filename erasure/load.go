package erasure

import (
	"context"
	"fmt"
	"time"
)

// One load of the ledger by the Watch: what it reads (the records in
// force, or the journal since the last load), and how it is put in force.

// load reads the records in force, or the journal since the last load,
// and puts them in force.
func (w *Watch) load(ctx context.Context) error {
	start := w.now()
	prev := w.cur.Load()
	p := w.planLoad(start)
	// A read of the records in force grows with the working set: it may
	// take longer than a refresh; a journal read may not.
	timeout := max(w.interval, 5*time.Second)
	if p.reread {
		timeout = RereadTimeout(w.interval)
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	read := w.readJournal
	if p.reread {
		read = w.readInForce
	}
	r, err := read(lctx, p, prev)
	if err != nil {
		w.loadFailed(p, err)
		return err
	}
	w.install(p, prev, r)
	return nil
}

// RereadTimeout bounds a worker's read of the records in force, for a
// worker reading the ledger every refresh: a read that began before a
// change to the index has ended this long after it.
func RereadTimeout(refresh time.Duration) time.Duration {
	return max(StaleAfter*refresh, 30*time.Second)
}

// loadPlan is what one load reads, decided from the last loads.
type loadPlan struct {
	start  time.Time // the load counts from here
	first  bool      // no reread has succeeded yet
	reread bool      // the records in force, not the journal
	since  time.Time // where a journal read begins
}

// loadResult is what one load read, to be put in force.
type loadResult struct {
	next    *Ledger
	grew    bool // next holds a record prev did not
	got     loaded
	indexed bool // the first reread found the ledger indexed
	what    string
	newest  time.Time // the journal's newest row read
}

// planLoad decides what a load beginning at start reads: the records in
// force at the first load and every rereadEvery after; the journal since
// the last load between, even after a reread failed (one that keeps
// failing must not stop the others: it is tried again a minute of
// refreshes later).
func (w *Watch) planLoad(start time.Time) loadPlan {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := w.readAt.IsZero()
	return loadPlan{start: start, first: first, reread: first || !start.Before(w.rereadAt),
		since: journalFrom(w.loadedAt, w.newest, w.rereadEvery)}
}

// readInForce reads every record in force at p.start, with what the
// journal held meanwhile. A ledger worker setup has not indexed yet holds
// records of an earlier release without index cells: the first load
// reads every record, once; the rereads after read the index, as what the
// first read holds stays until it expires.
func (w *Watch) readInForce(ctx context.Context, p loadPlan, prev *Ledger) (r loadResult, err error) {
	r.indexed = true
	if p.first {
		if r.indexed, err = w.store.indexed(ctx); err != nil {
			return r, err
		}
	}
	if r.indexed {
		r.got, err = w.store.loadInForce(ctx, p.start)
		r.what = "records in force (expiry index): %d records"
	} else {
		r.got, err = w.store.loadAll(ctx, p.start)
		r.what = "every record (not indexed): %d rows"
	}
	if err != nil {
		return r, err
	}
	r.next = r.got.l
	w.mu.Lock()
	r.next.withHeld(w.journalBefore, p.start)
	r.next.withHeld(w.journal, p.start)
	w.mu.Unlock()
	r.grew = r.next.newer(prev)
	return r, nil
}

// readJournal reads the journal since p.since onto prev. A row past this
// worker's clock does not move the cursor (it could only hold it at the
// last load, where a clock running ahead misses records): a forget
// host's clock ahead, one an earlier release wrote, or this worker's
// behind.
func (w *Watch) readJournal(ctx context.Context, p loadPlan, prev *Ledger) (r loadResult, err error) {
	entries, rows, newest, beyond, err := w.store.loadSince(ctx, p.since, p.start)
	if err != nil {
		return r, err
	}
	r.got.rows, r.newest = rows, newest
	w.journalAhead(beyond, p.start)
	r.next, r.grew = prev.with(entries, p.start)
	w.mu.Lock()
	held := w.journal
	if held == nil {
		held = &Ledger{}
	}
	w.journal, _ = held.with(entries, p.start)
	w.mu.Unlock()
	r.what = "journal since " + p.since.UTC().Format(time.RFC3339) + ": %d rows"
	return r, nil
}

// loadFailed keeps a load's error; a reread that failed is tried again
// sooner than the next reread would be.
func (w *Watch) loadFailed(p loadPlan, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastErr = err
	if p.reread && !p.first {
		w.rereadAt = p.start.Add(min(w.rereadEvery, 12*w.interval))
	}
}

// install puts what a load read in force.
func (w *Watch) install(p loadPlan, prev *Ledger, r loadResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.next != prev {
		// Under the lock, from the ledger in force (SetTopicID may have
		// replaced prev meanwhile): its ids, and a generation no lower.
		r.next.ids, r.next.gen = w.ids, w.cur.Load().gen
		if r.grew {
			r.next.gen++
		}
		w.cur.Store(r.next)
	}
	// The load counts from when it began: a record written after that
	// may not be in it.
	w.loadedAt, w.lastErr = p.start, nil
	w.newest = later(w.newest, r.newest)
	w.lastRead, w.lastRows = fmt.Sprintf(r.what, r.got.rows), r.got.rows
	if p.reread {
		w.readAt, w.rereadAt, w.ignored = p.start, p.start.Add(w.rereadEvery), r.got.ignored
		w.journalBefore, w.journal = w.journal, nil
		if p.first {
			w.indexed = r.indexed
		}
	}
}
