package erasure

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/rowkey"
)

// The ledger table holds one row per erased user (key tenant#user) in
// family Family. A record's cells carry, as their timestamp, the time the
// record expires, and the family's GC rule is a max-age of GCMaxAge: the
// one-second strategy of the event table, so each record expires on its
// own time (the copies it must suppress differ per erasure), and Bigtable
// collects it after. Until then the readers leave expired records out.
//
// Each record is written in three rows; the journal's and the index's
// keys start with the separator, which no record row's can (a tenant id
// is never empty):
//
//   - the record row, tenant#user: every column, for forget, audit and
//     the retention statement;
//   - a journal row, keyed by the time it was written
//     (#j#<Unix ms, 13 digits>#tenant#user): a refresh reads the journal
//     rows of the last few minutes, a key range, so it costs what was
//     recorded since, not the size of the ledger;
//   - a cell in an expiry index row, a row of the records that expire in
//     the same hour (see indexKey): a worker starting reads the key range
//     from now on, the records in force, whatever the ledger held
//     before, and reads it again every RereadEvery.
//
// Journal rows and index cells expire with their record. Workers only read the
// table; forget writes the three rows, and worker setup writes the index
// rows of records an earlier release wrote (Index), then the marker row
// that says the index is whole (#m#indexed).
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
	colAtLeast     = "at_least"     // Erasure.AtLeastUntil, Unix milliseconds, 8 bytes big-endian

	journalPrefix = "#j#"
	indexPrefix   = "#x#"

	// colHasIndex, in a journal row, says its record has its index cell
	// (an earlier release's forget wrote none: see Index); colExpires,
	// when the record expires (Unix ms, 8 bytes big-endian; MaxMillis:
	// never), which the row's own cells need not carry (JournalLife).
	colHasIndex = "x"
	colExpires  = "expires"

	// JournalLife is the longest a journal row lives: a worker reads the
	// journal of the last minutes only (journalFrom), and the records in
	// force from the index. A record that never expires, or not for
	// years, leaves no journal row behind it for that long: retired
	// (Retire), it is gone from the ledger with its record row.
	JournalLife = 24 * time.Hour

	// indexedKey is the marker row: present, every record in force has
	// its index cell (written by worker setup, Index).
	indexedKey   = "#m#indexed"
	colIndexed   = "indexed"    // the index's version, as text
	colIndexedAt = "indexed_at" // when setup last indexed, Unix milliseconds, 8 bytes big-endian
	indexVersion = "1"
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
	tbl  *btwait.Table
	name string
	// clock keys the journal rows Put writes: the time of the write, not
	// the record's RecordedAt (when forget began, minutes before its last
	// record when it erases many users).
	clock func() time.Time
	// CompactAbove is how many records that never expire a read of the
	// records in force holds exactly; the rest it holds compact (see
	// compact). Zero is DefaultCompactAbove.
	CompactAbove int
	// LookupAttempt bounds one lookup of a user held compact; zero is
	// DefaultLookupAttempt.
	LookupAttempt time.Duration
	// compacted is how many the last read held compact: the next sizes
	// its filter by it.
	compacted atomic.Int64
	// lookups is how the compact part's lookups fare.
	lookups lookups
}

// NewStore returns the store of the ledger table named table.
func NewStore(c *bigtable.Client, table string) *Store {
	return &Store{tbl: btwait.Open(c, table), name: table, clock: time.Now}
}

// compactAbove is CompactAbove, defaulted.
func (s *Store) compactAbove() int {
	if s.CompactAbove > 0 {
		return s.CompactAbove
	}
	return DefaultCompactAbove
}

// SetClock sets the clock Put keys journal rows by: the host's that runs
// forget, which forget holds within ClockTolerance of Bigtable's.
func (s *Store) SetClock(now func() time.Time) { s.clock = now }

// Table is the ledger table's name.
func (s *Store) Table() string { return s.name }

// Put writes r: its record row, its journal row (keyed by the time of the
// write), then its index cell. Each is one row mutation, all there or not
// at all; a failure between two leaves a record some reader misses, and
// Put fails: forget deletes nothing, and run again writes all three. Put again with the same
// RecordedAt, it writes the same cells again: so forget adds the mark to a
// record it has written (see Mark).
func (s *Store) Put(ctx context.Context, r Erasure) error {
	keys, muts, err := Rows(r, s.clock())
	if err != nil {
		return err
	}
	for i, key := range keys {
		if err := s.tbl.Apply(ctx, key, muts[i]); err != nil {
			if status.Code(err) == codes.NotFound {
				return fmt.Errorf("record the erasure in %s: %w", s.name, ErrMissing)
			}
			return fmt.Errorf("record the erasure in %s: %w", s.name, err)
		}
	}
	return nil
}

// Rows is r's rows: its record row, its journal row (keyed by written) and
// its index cell's row, in the order Put writes them; the ledger bench
// writes them in bulk (loadtest ledger).
func Rows(r Erasure, written time.Time) (keys []string, muts []*bigtable.Mutation, _ error) {
	if err := rowkey.ValidateID("tenant", r.Tenant); err != nil {
		return nil, nil, err
	}
	switch {
	case r.Offboard && r.User != "":
		return nil, nil, errors.New("an offboarding's record names no user")
	case !r.Offboard:
		if p := rowkey.IDProblem(r.User); p != "" {
			return nil, nil, fmt.Errorf("the user id %s", p)
		}
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
	jts := min(ts, bigtable.Time(written.Add(JournalLife).Truncate(time.Millisecond)))
	expires := int64(ts) / 1000
	j.Set(Family, colUpTo, jts, millis(r.UpTo))
	j.Set(Family, colHasIndex, jts, nil)
	j.Set(Family, colExpires, jts, binary.BigEndian.AppendUint64(nil, uint64(expires)))
	// When it was recorded, which orders a tenant's records (see left);
	// an earlier release's row has none, and its key's time stands in.
	j.Set(Family, colRecordedAt, jts, millis(r.RecordedAt))
	// The index cell holds what a worker needs: erased_up_to and the
	// mark, in a row of the records that expire in the same hour.
	x := bigtable.NewMutation()
	var below []byte
	if r.Below != nil {
		below = r.Below.encode()
		m.Set(Family, colBelow+at, ts, below)
		j.Set(Family, colBelow, jts, below)
	}
	if !r.AtLeastUntil.IsZero() {
		m.Set(Family, colAtLeast+at, ts, millis(r.AtLeastUntil))
	}
	recorded := max(0, r.RecordedAt.UnixMilli())
	x.Set(Family, indexColumn(r.Tenant, r.User, recorded), ts, append(millis(r.UpTo), below...))
	keys = []string{recordKey(r.Tenant, r.User), journalKey(written, r.Tenant, r.User), indexKey(ts, r.Tenant, r.User, recorded)}
	return keys, []*bigtable.Mutation{m, j, x}, nil
}

// journalKey is the journal row of a record written at written.
func journalKey(written time.Time, tenant, user string) string {
	return fmt.Sprintf("%s%013d%c%s", journalPrefix, max(0, written.UnixMilli()), rowkey.Sep, recordKey(tenant, user))
}

// Load reads every record in force at now: expired records are left out
// (GC is lazy). ignored counts rows whose key names no user (not written
// by forget; they can suppress nothing, and must not stop the workers).
func (s *Store) Load(ctx context.Context, now time.Time) (_ []Erasure, ignored int, _ error) {
	var out []Erasure
	ms := marks{}
	_, ignored, err := s.read(ctx, "read", recordRanges, nil, now, parseRecordKey, func(tenant, user string, cells []bigtable.ReadItem) {
		out = append(out, records(tenant, user, cells, ms)...)
	})
	return out, ignored, err
}

// records are the records of one record row's cells in force: a user's row
// holds the cells of each forget, named by when it recorded (see colUpTo).
func records(tenant, user string, cells []bigtable.ReadItem, ms marks) []Erasure {
	byAt := map[string]*Erasure{}
	var out []Erasure
	for _, it := range cells {
		name, at, _ := strings.Cut(strings.TrimPrefix(it.Column, Family+":"), ".")
		r := byAt[at]
		if r == nil {
			r = &Erasure{Tenant: tenant, User: user, Offboard: user == ""}
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
		case colAtLeast:
			r.AtLeastUntil = fromMillis(it.Value)
		}
	}
	for _, r := range byAt {
		out = append(out, *r)
	}
	return out
}

// LoadUsers reads the records in force at now of the users of tenant
// (their record rows alone): what forget needs to know of who is erased
// already, whatever the size of the ledger.
func (s *Store) LoadUsers(ctx context.Context, tenant string, users []string, now time.Time) (*Ledger, error) {
	keys := make(bigtable.RowList, 0, len(users))
	for _, u := range users {
		keys = append(keys, recordKey(tenant, u))
	}
	ld := newLoader()
	_, _, err := s.read(ctx, "read", keys, ledgerColumns, now, parseRecordKey, ld.cells)
	if err != nil {
		return nil, err
	}
	return ld.l, nil
}

// loaded is what one read of the ledger found.
type loaded struct {
	l *Ledger
	// rows counts the rows read (the index's: its cells, a record each);
	// ignored, those that name no user.
	rows, ignored int
}

// loadAll reads every record row in force at now, as the workers need
// it: erased_up_to and the mark alone, no Erasure built. A worker does so
// only at its first start on a ledger worker setup has not indexed.
func (s *Store) loadAll(ctx context.Context, now time.Time) (loaded, error) {
	ld := newLoader()
	rows, ignored, err := s.read(ctx, "read", recordRanges, ledgerColumns, now, parseRecordKey, ld.cells)
	if err != nil {
		return loaded{}, err
	}
	return loaded{l: ld.l, rows: rows, ignored: ignored}, nil
}

// recordRanges are the record rows: every key but the journal's, the
// index's and the marker's, which all start with '#'.
var recordRanges = bigtable.RowRangeList{bigtable.NewRange("", "#"), bigtable.InfiniteRange("$")}

// ledgerColumns are the columns a worker needs of a record row.
var ledgerColumns = bigtable.ColumnFilter("^(" + colUpTo + "|" + colBelow + `)\..*`)

// loader builds a ledger from the cells of record rows, or index cells.
type loader struct {
	l  *Ledger
	ms marks
	// compact, when set, takes the records that never expire past the
	// first compactAbove (exactForever counts those held exactly).
	compact                    *compact
	compactAbove, exactForever int
}

func newLoader() *loader {
	return &loader{l: &Ledger{users: map[string]map[string]erased{}}, ms: marks{}}
}

// cells adds the erasures of one user's cells: each up_to and each mark
// with its expiry, the cell's timestamp.
func (ld *loader) cells(tenant, user string, cells []bigtable.ReadItem) {
	for _, it := range cells {
		name, at, _ := strings.Cut(strings.TrimPrefix(it.Column, Family+":"), ".")
		e := erased{upTo: math.MinInt64, expires: forever}
		if it.Timestamp != never {
			e.expires = int64(it.Timestamp) / 1000
		}
		switch {
		case name == colUpTo && len(it.Value) == 8:
			e.upTo = int64(binary.BigEndian.Uint64(it.Value))
		case name == colBelow:
			m, err := ld.ms.decode(it.Value)
			if err != nil {
				continue
			}
			// Joined with the user's up_to (math.MinInt64: it erases by
			// the mark alone).
			e.below = m
		default:
			continue
		}
		recorded, _ := strconv.ParseInt(at, 10, 64)
		ld.put(tenant, user, e, recorded)
	}
}

// put adds a record read (user "": a tenant's offboarding, ordered by when
// it was recorded).
func (ld *loader) put(tenant, user string, e erased, recorded int64) {
	if user == "" {
		ld.l.addTenant(tenant, left{e, recorded})
		return
	}
	ld.l.add(tenant, user, e)
}

// read reads the rows of rs whose key names a user (key; the others are
// counted as ignored), handing f the cells of family Family of each still
// in force at now; filter, when set, narrows the cells read (nil reads
// every cell). what says what for, in errors.
func (s *Store) read(ctx context.Context, what string, rs bigtable.RowSet, filter bigtable.Filter, now time.Time,
	key func(string) (tenant, user string, ok bool), f func(tenant, user string, cells []bigtable.ReadItem)) (rows, ignored int, _ error) {
	var opts []bigtable.ReadOption
	if filter != nil {
		opts = append(opts, bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("^"+Family+"$"), filter)))
	}
	nowTS := bigtable.Time(now)
	var cells []bigtable.ReadItem
	err := s.tbl.ReadRows(ctx, rs, func(row bigtable.Row) bool {
		rows++
		tenant, user, ok := key(row.Key())
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
	}, opts...)
	if status.Code(err) == codes.NotFound {
		return 0, 0, fmt.Errorf("%s %s: %w", what, s.name, ErrMissing)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s the erasure ledger %s: %w", what, s.name, err)
	}
	return rows, ignored, nil
}

// loadSince reads the journal rows of the records written at or after
// since (by the writing host's clock). newest is the latest time a row
// read carries up to upTo (zero when none did): the journal's own clock,
// which forget holds within ClockTolerance of Bigtable's; beyond is the
// latest time past upTo, zero when no row lies past it.
func (s *Store) loadSince(ctx context.Context, since, upTo time.Time) (_ []entry, rows int, newest, beyond time.Time, _ error) {
	var out []entry
	var newestMs, beyondMs int64
	upToMs := upTo.UnixMilli()
	known := marks{}
	from := fmt.Sprintf("%s%013d", journalPrefix, max(0, since.UnixMilli()))
	rng := bigtable.NewRange(from, rowkey.PrefixEnd(journalPrefix))
	err := s.tbl.ReadRows(ctx, rng, func(row bigtable.Row) bool {
		rows++
		rest := strings.TrimPrefix(row.Key(), journalPrefix)
		at, key, ok := strings.Cut(rest, string(rowkey.Sep))
		tenant, user, ok2 := parseRecordKey(key)
		ms, err := strconv.ParseInt(at, 10, 64)
		if err != nil || !ok || !ok2 {
			return true
		}
		if ms <= upToMs {
			newestMs = max(newestMs, ms)
		} else {
			beyondMs = max(beyondMs, ms)
		}
		e := entry{tenant: tenant, user: user, erased: erased{upTo: math.MinInt64, expires: forever}, recorded: ms}
		expires := int64(0) // the colExpires cell's, when the row has one
		for _, it := range row[Family] {
			switch {
			case it.Column == Family+":"+colUpTo && len(it.Value) == 8:
				e.upTo = int64(binary.BigEndian.Uint64(it.Value))
				if it.Timestamp != never {
					e.expires = int64(it.Timestamp) / 1000
				}
			case it.Column == Family+":"+colExpires && len(it.Value) == 8:
				expires = int64(binary.BigEndian.Uint64(it.Value))
			case it.Column == Family+":"+colRecordedAt && len(it.Value) == 8:
				e.recorded = int64(binary.BigEndian.Uint64(it.Value))
			case it.Column == Family+":"+colBelow:
				e.below, _ = known.decode(it.Value)
			}
		}
		// A row that lives JournalLife says when its record expires; one
		// of an earlier release carries it as its cells' timestamp.
		switch {
		case expires >= rowkey.MaxMillis:
			e.expires = forever
		case expires > 0:
			e.expires = expires
		}
		if e.upTo != math.MinInt64 {
			out = append(out, e)
		}
		return true
	}, bigtable.RowFilter(bigtable.FamilyFilter("^"+Family+"$")))
	if status.Code(err) == codes.NotFound {
		return nil, 0, time.Time{}, time.Time{}, fmt.Errorf("read %s: %w", s.name, ErrMissing)
	}
	if err != nil {
		return nil, 0, time.Time{}, time.Time{}, fmt.Errorf("read the erasure journal of %s: %w", s.name, err)
	}
	if newestMs > 0 {
		newest = time.UnixMilli(newestMs)
	}
	if beyondMs > 0 {
		beyond = time.UnixMilli(beyondMs)
	}
	return out, rows, newest, beyond, nil
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
