package erasure

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/rowkey"
)

// parseIndexKey splits an index row key (see indexKey).
func parseIndexKey(key string) (tenant, user string, ok bool) {
	rest, ok := strings.CutPrefix(key, indexPrefix)
	if !ok {
		return "", "", false
	}
	at, rest, ok := strings.Cut(rest, string(rowkey.Sep))
	if _, err := strconv.ParseInt(at, 10, 64); err != nil || len(at) != 13 || !ok {
		return "", "", false
	}
	return parseRecordKey(rest)
}

// loadInForce reads the index rows of the records in force at now: the key
// range from now on, whatever expired before.
func (s *Store) loadInForce(ctx context.Context, now time.Time) (loaded, error) {
	ld := newLoader()
	from := fmt.Sprintf("%s%013d", indexPrefix, max(0, now.UnixMilli()))
	rng := bigtable.NewRange(from, rowkey.PrefixEnd(indexPrefix))
	// No filter: an index row holds the worker's columns alone, and a
	// filter costs the server each cell.
	rows, ignored, err := s.read(ctx, "read the expiry index of", rng, nil, now, parseIndexKey, ld.cells)
	if err != nil {
		return loaded{}, err
	}
	return loaded{l: ld.l, rows: rows, ignored: ignored}, nil
}

// indexed reports whether worker setup has indexed the ledger: whether
// every record in force has its index row.
func (s *Store) indexed(ctx context.Context) (bool, error) {
	_, ok, err := s.indexedAt(ctx)
	return ok, err
}

// indexedAt reads the marker: whether the ledger is indexed, and when
// worker setup last indexed it.
func (s *Store) indexedAt(ctx context.Context) (at time.Time, ok bool, _ error) {
	row, err := s.tbl.ReadRow(ctx, indexedKey, bigtable.RowFilter(bigtable.FamilyFilter("^"+Family+"$")))
	if status.Code(err) == codes.NotFound {
		return time.Time{}, false, fmt.Errorf("read %s: %w", s.name, ErrMissing)
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read the index marker of the erasure ledger %s: %w", s.name, err)
	}
	for _, it := range row[Family] {
		switch it.Column {
		case Family + ":" + colIndexed:
			ok = string(it.Value) == indexVersion
		case Family + ":" + colIndexedAt:
			at = fromMillis(it.Value)
		}
	}
	return at, ok, nil
}

// indexBatch is how many rows Index writes per request.
const indexBatch = 1000

// Index writes the index row of every record in force at now that a
// release before the index wrote without one, then the marker that says
// the index is whole; worker setup runs it (each run), the workers cannot
// (they only read the ledger). The first time, it reads every record row.
// After (already), it indexes only what an earlier release's forget wrote
// since the last Index: the journal rows since then (less JournalMargin)
// that do not say their record has its index row. indexed counts the
// records indexed. Run again, it writes the same cells again.
func (s *Store) Index(ctx context.Context, now time.Time) (indexed int, already bool, _ error) {
	at, already, err := s.indexedAt(ctx)
	if err != nil {
		return 0, false, err
	}
	w := &indexWriter{s: s, ctx: ctx}
	if already {
		indexed, err = s.indexJournal(ctx, at.Add(-JournalMargin), now, w)
	} else {
		indexed, err = s.indexRecords(ctx, now, w)
	}
	if err == nil {
		err = w.flush()
	}
	if err != nil {
		return indexed, already, err
	}
	// The marker last: a setup interrupted before it leaves the workers
	// reading every record at start, as before the index, or the next
	// setup reading the journal from the last one that finished.
	m := bigtable.NewMutation()
	m.Set(Family, colIndexed, never, []byte(indexVersion))
	m.Set(Family, colIndexedAt, never, millis(now))
	if err := s.tbl.Apply(ctx, indexedKey, m); err != nil {
		return indexed, already, fmt.Errorf("mark the erasure ledger %s indexed: %w", s.name, err)
	}
	return indexed, already, nil
}

// indexRecords writes the index rows of every record row in force at now.
func (s *Store) indexRecords(ctx context.Context, now time.Time, w *indexWriter) (indexed int, _ error) {
	_, _, err := s.read(ctx, "read", recordRanges, ledgerColumns, now, parseRecordKey, func(tenant, user string, cells []bigtable.ReadItem) {
		for _, it := range cells {
			// Each forget's cells go to the index row of the time they
			// expire, named as they are.
			w.set(indexKey(it.Timestamp, tenant, user), strings.TrimPrefix(it.Column, Family+":"), it)
			if strings.HasPrefix(it.Column, Family+":"+colUpTo+".") {
				indexed++
			}
		}
		w.maybeFlush()
	})
	if err == nil {
		err = w.err
	}
	return indexed, err
}

// indexJournal writes the index rows of the records whose journal rows,
// written at or after since, do not say they have one (an earlier
// release's forget wrote them), in force at now.
func (s *Store) indexJournal(ctx context.Context, since, now time.Time, w *indexWriter) (indexed int, _ error) {
	from := fmt.Sprintf("%s%013d", journalPrefix, max(0, since.UnixMilli()))
	rng := bigtable.NewRange(from, rowkey.PrefixEnd(journalPrefix))
	nowTS := bigtable.Time(now)
	err := s.tbl.ReadRows(ctx, rng, func(row bigtable.Row) bool {
		at, key, _ := strings.Cut(strings.TrimPrefix(row.Key(), journalPrefix), string(rowkey.Sep))
		tenant, user, ok := parseRecordKey(key)
		if _, err := strconv.ParseInt(at, 10, 64); err != nil || !ok {
			return true
		}
		var cells []bigtable.ReadItem
		for _, it := range row[Family] {
			switch it.Column {
			case Family + ":" + colHasIndex:
				return true
			case Family + ":" + colUpTo, Family + ":" + colBelow:
				if it.Timestamp > nowTS {
					cells = append(cells, it)
				}
			}
		}
		for _, it := range cells {
			// Named by the journal row's time, which an earlier
			// release's forget made the record's recorded_at: the
			// cells are the record row's own, and indexed again they
			// are written again, not added.
			w.set(indexKey(it.Timestamp, tenant, user), strings.TrimPrefix(it.Column, Family+":")+"."+at, it)
			if it.Column == Family+":"+colUpTo {
				indexed++
			}
		}
		w.maybeFlush()
		return w.err == nil
	}, bigtable.RowFilter(bigtable.FamilyFilter("^"+Family+"$")))
	if err != nil {
		return indexed, fmt.Errorf("read the erasure journal of %s: %w", s.name, err)
	}
	return indexed, w.err
}

// indexWriter writes index cells in batches of rows.
type indexWriter struct {
	s    *Store
	ctx  context.Context
	rows map[string]*bigtable.Mutation
	keys []string
	err  error
}

func (w *indexWriter) set(key, column string, it bigtable.ReadItem) {
	if w.rows == nil {
		w.rows = map[string]*bigtable.Mutation{}
	}
	m := w.rows[key]
	if m == nil {
		m = bigtable.NewMutation()
		w.rows[key] = m
		w.keys = append(w.keys, key)
	}
	m.Set(Family, column, it.Timestamp, it.Value)
}

func (w *indexWriter) maybeFlush() {
	if w.err == nil && len(w.keys) >= indexBatch {
		w.err = w.flush()
	}
}

func (w *indexWriter) flush() error {
	if len(w.keys) == 0 {
		return nil
	}
	muts := make([]*bigtable.Mutation, len(w.keys))
	for i, k := range w.keys {
		muts[i] = w.rows[k]
	}
	errs, err := w.s.tbl.ApplyBulk(w.ctx, w.keys, muts)
	if err == nil {
		for _, e := range errs {
			if e != nil {
				err = e
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("write the expiry index of the erasure ledger %s: %w", w.s.name, err)
	}
	w.rows, w.keys = nil, nil
	return nil
}

// clockKey is the row where forget asks Bigtable the time.
const clockKey = "#c#clock"

// ServerTime asks Bigtable its clock: it writes a cell stamped with the
// server's time (collected a second later by the GC rule) and reads it
// back. The answer is the server's time between the two calls.
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	col := fmt.Sprintf("t.%016x", rand.Uint64())
	m := bigtable.NewMutation()
	m.Set(Family, col, bigtable.ServerTime, nil)
	if err := s.tbl.Apply(ctx, clockKey, m); err != nil {
		if status.Code(err) == codes.NotFound {
			return time.Time{}, fmt.Errorf("ask Bigtable the time in %s: %w", s.name, ErrMissing)
		}
		return time.Time{}, fmt.Errorf("ask Bigtable the time (a cell stamped by the server in %s): %w", s.name, err)
	}
	row, err := s.tbl.ReadRow(ctx, clockKey, bigtable.RowFilter(bigtable.ColumnFilter("^"+col+"$")))
	if err != nil {
		return time.Time{}, fmt.Errorf("ask Bigtable the time (read back the cell stamped by the server in %s): %w", s.name, err)
	}
	if cells := row[Family]; len(cells) > 0 {
		return cells[0].Timestamp.Time().UTC(), nil
	}
	return time.Time{}, fmt.Errorf("ask Bigtable the time: the cell stamped by the server in %s was not there to read back", s.name)
}
