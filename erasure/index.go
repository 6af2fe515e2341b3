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
	rows, ignored, err := s.read(ctx, "read the expiry index of", rng, ledgerColumns, now, parseIndexKey, ld.cells)
	if err != nil {
		return loaded{}, err
	}
	return loaded{l: ld.l, rows: rows, ignored: ignored}, nil
}

// indexed reports whether worker setup has indexed the ledger: whether
// every record in force has its index row.
func (s *Store) indexed(ctx context.Context) (bool, error) {
	row, err := s.tbl.ReadRow(ctx, indexedKey, bigtable.RowFilter(bigtable.FamilyFilter("^"+Family+"$")))
	if status.Code(err) == codes.NotFound {
		return false, fmt.Errorf("read %s: %w", s.name, ErrMissing)
	}
	if err != nil {
		return false, fmt.Errorf("read the index marker of the erasure ledger %s: %w", s.name, err)
	}
	for _, it := range row[Family] {
		if it.Column == Family+":"+colIndexed && string(it.Value) == indexVersion {
			return true, nil
		}
	}
	return false, nil
}

// indexBatch is how many rows Index writes per request.
const indexBatch = 1000

// Index writes the index row of every record in force at now that a
// release before the index wrote without one, then the marker that says
// the index is whole; worker setup runs it, the workers cannot (they only
// read the ledger). It reads every record row, once: done already (the
// marker is there), it reads nothing. indexed counts the records indexed.
// Run again, it writes the same cells again.
func (s *Store) Index(ctx context.Context, now time.Time) (indexed int, already bool, _ error) {
	if ok, err := s.indexed(ctx); err != nil || ok {
		return 0, ok, err
	}
	var keys []string
	var muts []*bigtable.Mutation
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		errs, err := s.tbl.ApplyBulk(ctx, keys, muts)
		if err == nil {
			for _, e := range errs {
				if e != nil {
					err = e
					break
				}
			}
		}
		if err != nil {
			return fmt.Errorf("write the expiry index of the erasure ledger %s: %w", s.name, err)
		}
		keys, muts = keys[:0], muts[:0]
		return nil
	}
	var werr error
	_, _, err := s.read(ctx, "read", recordRanges, ledgerColumns, now, parseRecordKey, func(tenant, user string, cells []bigtable.ReadItem) {
		if werr != nil {
			return
		}
		// One index row per expiry: the cells of each forget of the user
		// go to the row of the time they expire, named as they are.
		rows := map[bigtable.Timestamp]*bigtable.Mutation{}
		for _, it := range cells {
			m := rows[it.Timestamp]
			if m == nil {
				m = bigtable.NewMutation()
				rows[it.Timestamp] = m
				keys, muts = append(keys, indexKey(it.Timestamp, tenant, user)), append(muts, m)
			}
			m.Set(Family, strings.TrimPrefix(it.Column, Family+":"), it.Timestamp, it.Value)
			if strings.HasPrefix(it.Column, Family+":"+colUpTo+".") {
				indexed++
			}
		}
		if len(keys) >= indexBatch {
			werr = flush()
		}
	})
	if err == nil {
		err = werr
	}
	if err == nil {
		err = flush()
	}
	if err != nil {
		return indexed, false, err
	}
	// The marker last: a setup interrupted before it leaves the workers
	// reading every record at start, as before the index.
	m := bigtable.NewMutation()
	m.Set(Family, colIndexed, never, []byte(indexVersion))
	if err := s.tbl.Apply(ctx, indexedKey, m); err != nil {
		return indexed, false, fmt.Errorf("mark the erasure ledger %s indexed: %w", s.name, err)
	}
	return indexed, false, nil
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
