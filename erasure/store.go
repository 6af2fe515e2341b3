package erasure

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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
const (
	Family   = "e"
	GCMaxAge = time.Second

	colUpTo        = "up_to"        // erased_up_to, Unix milliseconds, 8 bytes big-endian
	colRecordedAt  = "recorded_at"  // Unix milliseconds, 8 bytes big-endian
	colRequestedBy = "requested_by" // who asked, as --requested-by gave it
)

// never is the cell timestamp of a record that must never expire: the
// largest timestamp Bigtable takes at millisecond granularity.
const never = bigtable.Timestamp(rowkey.MaxMillis * 1000)

// ErrMissing is Load's error for a ledger table that does not exist:
// worker setup has not been run since the ledger came in.
var ErrMissing = errors.New("the erasure ledger table does not exist; run worker setup")

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

// Put writes r. One row mutation: the record is all there or not at all.
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
	m := bigtable.NewMutation()
	m.Set(Family, colUpTo, ts, millis(r.UpTo))
	m.Set(Family, colRecordedAt, ts, millis(r.RecordedAt))
	m.Set(Family, colRequestedBy, ts, []byte(r.RequestedBy))
	if err := s.tbl.Apply(ctx, recordKey(r.Tenant, r.User), m); err != nil {
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("record the erasure in %s: %w", s.name, ErrMissing)
		}
		return fmt.Errorf("record the erasure in %s: %w", s.name, err)
	}
	return nil
}

// Load reads every record in force at now: expired records are left out
// (GC is lazy). ignored counts rows whose key names no user (not written
// by forget; they can suppress nothing, and must not stop the workers).
func (s *Store) Load(ctx context.Context, now time.Time) (_ []Record, ignored int, _ error) {
	var out []Record
	err := s.tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(row bigtable.Row) bool {
		tenant, user, ok := parseRecordKey(row.Key())
		if !ok {
			ignored++
			return true
		}
		// A user's row holds one cell per column per forget; cells of one
		// forget share a timestamp. Each still in force is a record.
		byTS := map[bigtable.Timestamp]*Record{}
		for _, it := range row[Family] {
			r := byTS[it.Timestamp]
			if r == nil {
				r = &Record{Tenant: tenant, User: user}
				if it.Timestamp != never {
					r.Expires = it.Timestamp.Time().UTC()
				}
				byTS[it.Timestamp] = r
			}
			switch it.Column {
			case Family + ":" + colUpTo:
				r.UpTo = fromMillis(it.Value)
			case Family + ":" + colRecordedAt:
				r.RecordedAt = fromMillis(it.Value)
			case Family + ":" + colRequestedBy:
				r.RequestedBy = string(it.Value)
			}
		}
		for _, r := range byTS {
			if r.Expires.IsZero() || r.Expires.After(now) {
				out = append(out, *r)
			}
		}
		return true
	}, bigtable.RowFilter(bigtable.FamilyFilter("^"+Family+"$")))
	if status.Code(err) == codes.NotFound {
		return nil, 0, fmt.Errorf("read %s: %w", s.name, ErrMissing)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read the erasure ledger %s: %w", s.name, err)
	}
	return out, ignored, nil
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
