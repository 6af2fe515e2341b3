package erasure

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/rowkey"
)

// The ledger table holds one row per erased user (key tenant#user) in
// family Family. A record's cells carry, as their timestamp, the time the
// record expires, and the family's GC rule is a max-age of GCMaxAge: the
// one-second strategy of the event table, so each record expires on its
// own time (the copies it must suppress differ per erasure), and Bigtable
// collects it after. Until then the loader leaves expired records out.
//
// Each record is also written as a journal row, keyed by the time it was
// recorded (#j#<Unix ms, 13 digits>#tenant#user: a key no tenant's row
// can have, as a tenant id is never empty). A refresh reads the journal
// rows of the last few minutes, a key range, so it costs what was
// recorded since, not the size of the ledger; every FullEvery refreshes
// the records are read in full. Journal rows expire with their record.
const (
	Family   = "e"
	GCMaxAge = time.Second

	// A record's columns, each followed by "." and the 13 digits of the
	// Unix millisecond it was recorded: every forget of a user adds its
	// own cells, none overwrites another's (two records that never
	// expire share a timestamp).
	colUpTo        = "up_to"        // erased_up_to, Unix milliseconds, 8 bytes big-endian
	colRecordedAt  = "recorded_at"  // Unix milliseconds, 8 bytes big-endian
	colRequestedBy = "requested_by" // who asked, as --requested-by gave it
	colBelow       = "below"        // the Mark, encoded (see Mark.encode)

	journalPrefix = "#j#"
)

// never is the cell timestamp of a record that must never expire: the
// largest timestamp Bigtable takes at millisecond granularity.
const never = bigtable.Timestamp(rowkey.MaxMillis * 1000)

// ErrMissing is Load's error for a ledger table that does not exist:
// worker setup has not been run since the ledger came in, or the ledger
// was lost. It says what setup will and will not do about it.
var ErrMissing = errors.New("the erasure ledger table does not exist. `worker setup` creates it, but not beside an event table that holds events: " +
	"there a missing ledger is a lost one (or a mistyped --erasure-table), and an empty one would let the workers write every erased user's events again. " +
	"Restore it if you can; `worker setup --new-erasure-ledger` creates an empty one, and every erasure recorded before is then lost until `worker forget` is run again for those users")

// Store reads and writes the ledger table.
type Store struct {
	tbl  *bigtable.Table
	name string
}

// NewStore returns the store of the ledger table named table.
func NewStore(c *bigtable.Client, table string) *Store {
	return &Store{tbl: c.Open(table), name: table}
}

// Table is the ledger table's name.
func (s *Store) Table() string { return s.name }

// Put writes r: its record row, then its journal row. Each is one row
// mutation, all there or not at all; a failure between the two leaves a
// record the next full read finds (and Put fails: forget deletes nothing).
// Put again with the same RecordedAt, it writes the same cells again: so
// forget adds the mark to a record it has written (see Mark).
func (s *Store) Put(ctx context.Context, r Record) error {
	if err := rowkey.ValidateID("tenant", r.Tenant); err != nil {
		return err
	}
	if p := rowkey.IDProblem(r.User); p != "" {
		return fmt.Errorf("the user id %s", p)
	}
	ts := never
	if !r.Expires.IsZero() {
		ts = bigtable.Time(r.Expires.Truncate(time.Millisecond))
	}
	at := fmt.Sprintf(".%013d", max(0, r.RecordedAt.UnixMilli()))
	m := bigtable.NewMutation()
	m.Set(Family, colUpTo+at, ts, millis(r.UpTo))
	m.Set(Family, colRecordedAt+at, ts, millis(r.RecordedAt))
	m.Set(Family, colRequestedBy+at, ts, []byte(r.RequestedBy))
	j := bigtable.NewMutation()
	j.Set(Family, colUpTo, ts, millis(r.UpTo))
	if r.Below != nil {
		m.Set(Family, colBelow+at, ts, r.Below.encode())
		j.Set(Family, colBelow, ts, r.Below.encode())
	}
	for _, row := range []struct {
		key string
		m   *bigtable.Mutation
	}{{recordKey(r.Tenant, r.User), m}, {journalKey(r.RecordedAt, r.Tenant, r.User), j}} {
		if err := s.tbl.Apply(ctx, row.key, row.m); err != nil {
			if status.Code(err) == codes.NotFound {
				return fmt.Errorf("record the erasure in %s: %w", s.name, ErrMissing)
			}
			return fmt.Errorf("record the erasure in %s: %w", s.name, err)
		}
	}
	return nil
}

// journalKey is the journal row of a record.
func journalKey(recordedAt time.Time, tenant, user string) string {
	return fmt.Sprintf("%s%013d%c%s", journalPrefix, max(0, recordedAt.UnixMilli()), rowkey.Sep, recordKey(tenant, user))
}

// Load reads every record in force at now: expired records are left out
// (GC is lazy). ignored counts rows whose key names no user (not written
// by forget; they can suppress nothing, and must not stop the workers).
func (s *Store) Load(ctx context.Context, now time.Time) (_ []Record, ignored int, _ error) {
	var out []Record
	ms := marks{}
	ignored, err := s.scan(ctx, now, nil, func(tenant, user string, cells []bigtable.ReadItem) {
		// A user's row holds the cells of each forget, named by when it
		// recorded (see colUpTo). Each still in force is a record.
		byAt := map[string]*Record{}
		for _, it := range cells {
			name, at, _ := strings.Cut(strings.TrimPrefix(it.Column, Family+":"), ".")
			r := byAt[at]
			if r == nil {
				r = &Record{Tenant: tenant, User: user}
				if it.Timestamp != never {
					r.Expires = it.Timestamp.Time().UTC()
				}
				byAt[at] = r
			}
			switch name {
			case colUpTo:
				r.UpTo = fromMillis(it.Value)
			case colRecordedAt:
				r.RecordedAt = fromMillis(it.Value)
			case colRequestedBy:
				r.RequestedBy = string(it.Value)
			case colBelow:
				// A mark that does not decode erases by time alone: the
				// record still stands.
				r.Below, _ = ms.decode(it.Value)
			}
		}
		for _, r := range byAt {
			out = append(out, *r)
		}
	})
	return out, ignored, err
}

// LoadLedger reads the ledger in force at now, as the workers need it:
// erased_up_to and the mark alone, no Record built.
func (s *Store) LoadLedger(ctx context.Context, now time.Time) (_ *Ledger, ignored int, _ error) {
	l := &Ledger{users: map[string]map[string]erased{}}
	ms := marks{}
	only := bigtable.ColumnFilter("^(" + colUpTo + "|" + colBelow + `)\..*`)
	ignored, err := s.scan(ctx, now, only, func(tenant, user string, cells []bigtable.ReadItem) {
		for _, it := range cells {
			name, _, _ := strings.Cut(strings.TrimPrefix(it.Column, Family+":"), ".")
			switch {
			case name == colUpTo && len(it.Value) == 8:
				l.add(tenant, user, erased{upTo: int64(binary.BigEndian.Uint64(it.Value))})
			case name == colBelow:
				if m, err := ms.decode(it.Value); err == nil {
					// Joined with the user's up_to (math.MinInt64: it
					// erases by the mark alone).
					l.add(tenant, user, erased{upTo: math.MinInt64, below: m})
				}
			}
		}
	})
	if err != nil {
		return nil, ignored, err
	}
	return l, ignored, nil
}

// scan reads the record rows (not the journal's), handing f the cells of
// each record still in force at now; filter, when set, narrows the cells
// read.
func (s *Store) scan(ctx context.Context, now time.Time, filter bigtable.Filter, f func(tenant, user string, cells []bigtable.ReadItem)) (ignored int, _ error) {
	filters := bigtable.Filter(bigtable.FamilyFilter("^" + Family + "$"))
	if filter != nil {
		filters = bigtable.ChainFilters(filters, filter)
	}
	nowTS := bigtable.Time(now)
	// Every key but the journal's, which all start with '#'.
	ranges := bigtable.RowRangeList{bigtable.NewRange("", "#"), bigtable.InfiniteRange("$")}
	var cells []bigtable.ReadItem
	err := s.tbl.ReadRows(ctx, ranges, func(row bigtable.Row) bool {
		tenant, user, ok := parseRecordKey(row.Key())
		if !ok {
			ignored++
			return true
		}
		// Expired cells are left out here, not by a filter: GC takes all
		// but a few, and the filter would cost every read.
		cells = cells[:0]
		for _, it := range row[Family] {
			if it.Timestamp > nowTS {
				cells = append(cells, it)
			}
		}
		if len(cells) > 0 {
			f(tenant, user, cells)
		}
		return true
	}, bigtable.RowFilter(filters))
	if status.Code(err) == codes.NotFound {
		return 0, fmt.Errorf("read %s: %w", s.name, ErrMissing)
	}
	if err != nil {
		return 0, fmt.Errorf("read the erasure ledger %s: %w", s.name, err)
	}
	return ignored, nil
}

// entry is a journal row: one record, as a refresh needs it.
type entry struct {
	tenant, user string
	erased
	expires int64 // Unix milliseconds; 0: never
}

// loadSince reads the journal rows of the records recorded at or after
// since (by the recording host's clock).
func (s *Store) loadSince(ctx context.Context, since time.Time) ([]entry, error) {
	var out []entry
	known := marks{}
	from := fmt.Sprintf("%s%013d", journalPrefix, max(0, since.UnixMilli()))
	rng := bigtable.NewRange(from, rowkey.PrefixEnd(journalPrefix))
	err := s.tbl.ReadRows(ctx, rng, func(row bigtable.Row) bool {
		rest := strings.TrimPrefix(row.Key(), journalPrefix)
		ms, key, ok := strings.Cut(rest, string(rowkey.Sep))
		tenant, user, ok2 := parseRecordKey(key)
		if _, err := strconv.ParseInt(ms, 10, 64); err != nil || !ok || !ok2 {
			return true
		}
		e := entry{tenant: tenant, user: user, erased: erased{upTo: math.MinInt64}}
		for _, it := range row[Family] {
			switch {
			case it.Column == Family+":"+colUpTo && len(it.Value) == 8:
				e.upTo = int64(binary.BigEndian.Uint64(it.Value))
				if it.Timestamp != never {
					e.expires = it.Timestamp.Time().UnixMilli()
				}
			case it.Column == Family+":"+colBelow:
				e.below, _ = known.decode(it.Value)
			}
		}
		if e.upTo != math.MinInt64 {
			out = append(out, e)
		}
		return true
	}, bigtable.RowFilter(bigtable.FamilyFilter("^"+Family+"$")))
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("read %s: %w", s.name, ErrMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("read the erasure journal of %s: %w", s.name, err)
	}
	return out, nil
}

func millis(t time.Time) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixMilli()))
	return b[:]
}

func fromMillis(b []byte) time.Time {
	if len(b) != 8 {
		return time.Time{}
	}
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b))).UTC()
}
