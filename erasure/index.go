package erasure

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/rowkey"
)

// The expiry index holds one cell per record, in rows of the records that
// expire in the same hour: a worker reads the records in force as a few
// thousand rows, not one row each (a row costs the client and the server
// far more than a cell). A row key is
//
//	#x#<the hour's first Unix ms, 13 digits>#<shard>
//
// and, for the records that never expire, after every hour,
//
//	#x#9999999999999#<the 30 days they were recorded in, Unix ms, 13 digits>#<shard>
//
// where the shard (two hex digits) spreads the users of one forget, which
// all expire at the same millisecond, over indexShards rows, and the
// records that never expire over foreverShards: a fleet whose topics keep
// records forever may record millions of them in 30 days, and a reader
// holds a row whole (at ten million, 16 rows would be 60 MB each; 256 are
// 4 MB). Readers read key ranges, and retirement deletes the cell it read
// by the row it read it in, so the count may change between releases. A cell's
// column is tenant#user#<recorded ms, 13 digits>: the erasures of a user
// that expire in the same hour are cells of their own. Its value is
// erased_up_to (Unix ms, 8 bytes big-endian), then the mark, encoded,
// when the record has one; its timestamp, the record's expiry.
const (
	indexShards   = 16
	foreverShards = 256
)

// indexKey is the index row of the cell of a record of tenant's user,
// recorded at recorded (Unix ms), whose cells carry ts.
func indexKey(ts bigtable.Timestamp, tenant, user string, recorded int64) string {
	h := fnv.New32a()
	h.Write([]byte(recordKey(tenant, user)))
	shard := h.Sum32() % indexShards
	if ts == never {
		shard = h.Sum32() % foreverShards
		// By 30 days: a fleet records few that never expire, or all.
		const period = 30 * 24 * 3600 * 1000
		return fmt.Sprintf("%s%013d#%013d#%02x", indexPrefix, rowkey.MaxMillis, recorded-recorded%period, shard)
	}
	ms := min(max(0, int64(ts)/1000), rowkey.MaxMillis-1)
	return fmt.Sprintf("%s%013d#%02x", indexPrefix, ms-ms%(3600*1000), shard)
}

// indexColumn is the column of a record's index cell.
func indexColumn(tenant, user string, recorded int64) string {
	return fmt.Sprintf("%s%c%013d", recordKey(tenant, user), rowkey.Sep, recorded)
}

// indexCell adds to the ledger the record of one index cell: a cell that
// is not one (not written by forget or setup) is counted as ignored.
func (ld *loader) indexCell(it bigtable.ReadItem) bool {
	col := strings.TrimPrefix(it.Column, Family+":")
	i := strings.LastIndexByte(col, rowkey.Sep)
	tenant, user, ok := parseRecordKey(col[:max(i, 0)])
	if i < 0 || !ok || len(it.Value) < 8 {
		return false
	}
	e := erased{upTo: int64(binary.BigEndian.Uint64(it.Value)), expires: forever}
	if it.Timestamp != never {
		e.expires = int64(it.Timestamp) / 1000
	}
	// An offboarding is always held exactly: the filter is asked by an
	// event's user, never by its tenant alone.
	if e.expires == forever && ld.compact != nil && user != "" {
		if ld.exactForever >= ld.compactAbove {
			// Held by the filter: the lookup reads its mark.
			ld.compact.add(tenant, user)
			return true
		}
		ld.exactForever++
	}
	if len(it.Value) > 8 {
		// A mark that does not decode erases by time alone: the record
		// still stands.
		e.below, _ = ld.ms.decode(it.Value[8:])
	}
	recorded, _ := strconv.ParseInt(col[i+1:], 10, 64)
	ld.put(tenant, user, e, recorded)
	return true
}

// loadInForce reads the index cells of the records in force at now: the
// key range from now's hour on, whatever expired before. Its count is of
// records (cells), expired ones of the hour among them.
func (s *Store) loadInForce(ctx context.Context, now time.Time) (loaded, error) {
	ld := newLoader()
	ld.compact, ld.compactAbove = newCompact(int(s.compacted.Load()), s.lookupUser), s.compactAbove()
	ms := max(0, now.UnixMilli())
	from := fmt.Sprintf("%s%013d", indexPrefix, ms-ms%(3600*1000))
	forever := fmt.Sprintf("%s%013d", indexPrefix, rowkey.MaxMillis)
	nowTS := bigtable.Time(now)
	var got loaded
	// The records that never expire first, then the hours from now's: a
	// scan is no snapshot, and a record whose index cell moves (Retire)
	// is written in its hour's row before its never-expiring cell goes.
	// Read in key order, hours first, a scan could pass the hour before
	// the write and the never-expiring row after the deletion, and miss
	// the record until the next reread; read so, it finds it in one or
	// the other.
	for _, rng := range []bigtable.RowRange{bigtable.NewRange(forever, rowkey.PrefixEnd(indexPrefix)), bigtable.NewRange(from, forever)} {
		// No filter: an index row holds index cells alone, and a filter
		// costs the server each cell.
		err := s.tbl.ReadRows(ctx, rng, func(row bigtable.Row) bool {
			for _, it := range row[Family] {
				got.rows++
				if it.Timestamp <= nowTS {
					continue
				}
				if !ld.indexCell(it) {
					got.ignored++
				}
			}
			return true
		})
		if status.Code(err) == codes.NotFound {
			return loaded{}, fmt.Errorf("read %s: %w", s.name, ErrMissing)
		}
		if err != nil {
			return loaded{}, fmt.Errorf("read the expiry index of the erasure ledger %s: %w", s.name, err)
		}
	}
	got.l = ld.l
	if ld.compact.n > 0 {
		got.l.compact = ld.compact
	}
	s.compacted.Store(int64(ld.compact.n))
	return got, nil
}

// indexed reports whether worker setup has indexed the ledger: whether
// every record in force has its index cell.
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

// indexBatch is how many cells Index writes per request (Bigtable takes
// up to 100,000 mutations in one).
const indexBatch = 10_000

// Index writes the index cell of every record in force at now that a
// release before the index wrote without one, then the marker that says
// the index is whole; worker setup runs it (each run), the workers cannot
// (they only read the ledger). The first time, it reads every record row.
// After (already), it indexes only what an earlier release's forget wrote
// since the last Index: the journal rows since then (less JournalMargin)
// that do not say their record has its index cell. indexed counts the
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

// indexRecords writes the index cells of every record row in force at now.
func (s *Store) indexRecords(ctx context.Context, now time.Time, w *indexWriter) (indexed int, _ error) {
	_, _, err := s.read(ctx, "read", recordRanges, ledgerColumns, now, parseRecordKey, func(tenant, user string, cells []bigtable.ReadItem) {
		// Each forget of the user is a record: its up_to and mark cells,
		// named by when it recorded.
		byAt := map[string]*indexEntry{}
		for _, it := range cells {
			name, at, _ := strings.Cut(strings.TrimPrefix(it.Column, Family+":"), ".")
			e := byAt[at]
			if e == nil {
				e = &indexEntry{ts: it.Timestamp}
				byAt[at] = e
			}
			switch name {
			case colUpTo:
				e.upTo = it.Value
			case colBelow:
				e.below = it.Value
			}
		}
		for at, e := range byAt {
			recorded, err := strconv.ParseInt(at, 10, 64)
			if err != nil || len(e.upTo) != 8 {
				continue
			}
			w.set(indexKey(e.ts, tenant, user, recorded), indexColumn(tenant, user, recorded), e.ts, append(slices.Clone(e.upTo), e.below...))
			indexed++
		}
		w.maybeFlush()
	})
	if err == nil {
		err = w.err
	}
	return indexed, err
}

// indexJournal writes the index cells of the records whose journal rows,
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
		var e indexEntry
		for _, it := range row[Family] {
			switch it.Column {
			case Family + ":" + colHasIndex:
				return true
			case Family + ":" + colUpTo:
				e.upTo, e.ts = it.Value, it.Timestamp
			case Family + ":" + colBelow:
				e.below = it.Value
			}
		}
		if len(e.upTo) != 8 || e.ts <= nowTS {
			return true
		}
		// Named by the journal row's time, which an earlier release's
		// forget made the record's recorded_at: the cell is the one the
		// records' index gave it, written again, not added.
		recorded, _ := strconv.ParseInt(at, 10, 64)
		w.set(indexKey(e.ts, tenant, user, recorded), indexColumn(tenant, user, recorded), e.ts, append(slices.Clone(e.upTo), e.below...))
		indexed++
		w.maybeFlush()
		return w.err == nil
	}, bigtable.RowFilter(bigtable.FamilyFilter("^"+Family+"$")))
	if err != nil {
		return indexed, fmt.Errorf("read the erasure journal of %s: %w", s.name, err)
	}
	return indexed, w.err
}

// indexEntry is one record's cells, as the index is written from them.
type indexEntry struct {
	ts          bigtable.Timestamp
	upTo, below []byte
}

// indexWriter writes index cells in batches of rows.
type indexWriter struct {
	s     *Store
	ctx   context.Context
	rows  map[string]*bigtable.Mutation
	keys  []string
	cells int
	err   error
}

func (w *indexWriter) set(key, column string, ts bigtable.Timestamp, value []byte) {
	if w.rows == nil {
		w.rows = map[string]*bigtable.Mutation{}
	}
	m := w.rows[key]
	if m == nil {
		m = bigtable.NewMutation()
		w.rows[key] = m
		w.keys = append(w.keys, key)
	}
	m.Set(Family, column, ts, value)
	w.cells++
}

func (w *indexWriter) maybeFlush() {
	if w.err == nil && w.cells >= indexBatch {
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
	w.rows, w.keys, w.cells = nil, nil, 0
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
