// Package tablemeta is the event table's record of how its rows are
// written: the --ttl-from setting the workers write with (each setting
// since when, and who recorded it: a history), and the tenants file
// versions the workers run (when a worker last started running each, and
// when one last said it still does).
//
// Where the record lives, and why there. Bigtable has no table metadata a
// program may write freely, so the record is a row of the event table, in
// a column family of its own (Family), under a key no event row can have
// (Key: a tenant id is never empty, so no event key starts with the
// separator).
//   - The event table, not the erasure ledger: the workers already write
//     the event table, and may only read the ledger, which a worker able to
//     write could use to undo an erasure. Recording here asks for no
//     permission the workers do not hold (a conditional mutation is a
//     MutateRows permission, as writes are).
//   - A family of its own, not the event family: every scan of the events
//     (audit, retime, migrate, read, forget, the reader) filters on the
//     event family, so the record is none of their rows; the event family's
//     GC rule (a max-age of default_ttl, or 1s) would collect the record,
//     and `worker migrate` changes that rule; and no writer with another
//     timestamp rule enters the event family.
//
// The cost: `worker setup` must add the family to a table set up before
// (a worker cannot: it has no admin permission), and a worker refuses to
// start until it is there. A worker can write the record as it can write
// any row: the record guards against a mistake (a rollout or a replay
// without the flag), not against a hostile writer of the table.
package tablemeta

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/sink"
)

const (
	// Family holds the record, in the event table.
	Family = "m"
	// Key is the record's row: no event row's key starts with '#'.
	Key = "#cellttl#writers"

	// The record's columns. A --ttl-from setting is a column of its own,
	// named by the Unix millisecond it was recorded (13 digits, so that
	// columns sort by time), written once: the history. A tenants file
	// version has two, whose cell timestamps are the times: when a worker
	// last started running it (at its start or a reload to it), and when
	// one last recorded it (that, or a heartbeat).
	colTTLFrom = "ttl_from."
	colStarted = "started."
	colSeen    = "seen."
)

// GCRule is the family's: the newest cell of each column. A setting's
// column is written once; a version's are written again at every start,
// reload and heartbeat, and only the newest matters.
var GCRule = bigtable.MaxVersionsPolicy(1)

// ErrNotSetUp is the error of a table without the family.
var ErrNotSetUp = errors.New("run `worker setup`, which adds it (the workers cannot: they have no admin permission)")

// Target is the family of the record in table.
func Target(table string) sink.Target { return sink.Target{Table: table, Family: Family} }

// SetupDone is what Setup did.
type SetupDone int

const (
	Found    SetupDone = iota // the family was there, with a rule that keeps the record
	Created                   // the family was added
	Restored                  // the family's rule, which collected by age, was set back
)

// Setup adds the family to table when it is missing. A family found with
// a rule that collects cells by age is set back to GCRule when update is
// set (worker setup --update-gc-policy), and refused otherwise; any other
// rule is left alone: it keeps each column's newest cell, all the record
// needs.
func Setup(ctx context.Context, ac *bigtable.AdminClient, table string, update bool) (SetupDone, error) {
	fam, err := sink.ReadFamily(ctx, ac, Target(table))
	switch {
	case err != nil:
		return Found, err
	case fam.Exists && collectsByAge(fam.Rule) && update:
		if err := waitfor.Do(ctx, waitfor.Bigtable, "admin: set the GC rule of "+Target(table).String(), func() error {
			return ac.UpdateFamily(ctx, table, Family, bigtable.Family{GCPolicy: GCRule})
		}); err != nil {
			return Found, fmt.Errorf("set the GC rule of %s back: %w", Target(table), err)
		}
		return Restored, nil
	case fam.Exists:
		return Found, checkRule(table, fam.Rule)
	case !fam.TableExists:
		return Found, fmt.Errorf("table %q does not exist", table)
	}
	if err := waitfor.Do(ctx, waitfor.Bigtable, "admin: create family "+Target(table).String(), func() error {
		return ac.CreateColumnFamilyWithConfig(ctx, table, Family, bigtable.Family{GCPolicy: GCRule})
	}); err != nil {
		return Found, fmt.Errorf("create family %s: %w", Target(table), err)
	}
	return Created, nil
}

// CheckFamily verifies that table has the family, with a rule that keeps
// the record: the error wraps ErrNotSetUp when it has not the family,
// ErrRuleCollects when its rule collects by age.
func CheckFamily(ctx context.Context, ac *bigtable.AdminClient, table string) error {
	fam, err := sink.ReadFamily(ctx, ac, Target(table))
	switch {
	case err != nil:
		return err
	case !fam.Exists:
		return fmt.Errorf("family %s, where the workers record their --ttl-from and tenants file version, does not exist; %w", Target(table), ErrNotSetUp)
	}
	return checkRule(table, fam.Rule)
}

// ErrRuleCollects is the error of a family whose GC rule collects cells by
// age. The record's cells are written once and must outlive any age: the
// oldest release that may write the table is a cell stamped in 1970 (its
// timestamp encodes the release), and a --ttl-from setting's cell is
// stamped when it was recorded. Collected, an older release would write
// the table again, and replays would lose the setting their cells follow.
var ErrRuleCollects = errors.New("it would collect the workers' record (the oldest release that may write the table, the --ttl-from history): run worker setup --update-gc-policy with the tenants file the workers run (it sets the event family's rule for that file too), which sets it back to the newest cell of each column")

// Unfit reports whether err, CheckFamily's, is the table's own state (the
// family missing, or its rule collecting by age), which no retry mends,
// rather than a read that failed.
func Unfit(err error) bool {
	return errors.Is(err, ErrRuleCollects) || errors.Is(err, ErrNotSetUp)
}

func checkRule(table string, rule bigtable.GCPolicy) error {
	if collectsByAge(rule) {
		return fmt.Errorf("family %s has the GC rule %s: %w", Target(table), sink.DescribeGC(rule), ErrRuleCollects)
	}
	return nil
}

// collectsByAge reports whether rule collects a column's newest cell once
// it is old enough: a max-age, in a union or alone. An intersection
// collects only where each of its rules does, and a number of versions
// keeps the newest.
func collectsByAge(rule bigtable.GCPolicy) bool {
	switch r := rule.(type) {
	case bigtable.MaxAgeGCPolicy:
		return true
	case bigtable.UnionGCPolicy:
		return slices.ContainsFunc(r.Children, collectsByAge)
	case bigtable.IntersectionGCPolicy:
		return len(r.Children) > 0 && !slices.ContainsFunc(r.Children, func(c bigtable.GCPolicy) bool { return !collectsByAge(c) })
	}
	return false
}

// Store reads and writes the record of one event table.
type Store struct {
	tbl  *btwait.Table
	name string
}

// NewStore returns the store of the record in table.
func NewStore(c *bigtable.Client, table string) *Store {
	return &Store{tbl: btwait.Open(c, table), name: table}
}

// State is the record as read.
type State struct {
	// TTLFrom are the settings recorded, oldest first; the last is in
	// force.
	TTLFrom []Setting `json:"ttl_from"`
	// Versions are the tenants file versions recorded, by Started.
	Versions []Version `json:"tenants_versions"`
	// OldestWriter is the oldest release that may write the table, as
	// the newest worker setup recorded it; empty for a table set up
	// before releases recorded it.
	OldestWriter string `json:"oldest_writer,omitempty"`
	// oldestWriterStamp is set when the cell's timestamp is not its
	// release's (see Read).
	oldestWriterStamp bigtable.Timestamp
}

// Current is the setting in force, ok false when none was recorded.
func (r State) Current() (s Setting, ok bool) {
	if len(r.TTLFrom) == 0 {
		return Setting{}, false
	}
	return r.TTLFrom[len(r.TTLFrom)-1], true
}

// Read reads the record. A table without the family has none: the record
// is empty (CheckFamily tells the two apart).
func (s *Store) Read(ctx context.Context) (State, error) {
	filter := bigtable.ChainFilters(bigtable.FamilyFilter("^"+regexp.QuoteMeta(Family)+"$"), bigtable.LatestNFilter(1))
	row, err := s.tbl.ReadRow(ctx, Key, bigtable.RowFilter(filter))
	if err != nil {
		return State{}, fmt.Errorf("read the record of %s: %w", s.name, err)
	}
	var rec State
	versions := map[string]*Version{}
	version := func(v string) *Version {
		if versions[v] == nil {
			versions[v] = &Version{Version: v}
		}
		return versions[v]
	}
	for _, it := range row[Family] {
		col := strings.TrimPrefix(it.Column, Family+":")
		at := it.Timestamp.Time().UTC()
		switch {
		case strings.HasPrefix(col, colTTLFrom):
			set, err := parseSetting(col, it.Value)
			if err != nil {
				return State{}, fmt.Errorf("the record of %s, column %s: %w", s.name, col, err)
			}
			rec.TTLFrom = append(rec.TTLFrom, set)
		case strings.HasPrefix(col, colStarted):
			version(strings.TrimPrefix(col, colStarted)).Started = at
		case strings.HasPrefix(col, colSeen):
			version(strings.TrimPrefix(col, colSeen)).Seen = at
		case col == colOldestWriter:
			rec.OldestWriter = string(it.Value)
			// Setup stamps the cell with its release (releaseTime): one
			// stamped otherwise was written by hand, and its timestamp,
			// not its value, decides which cell is newest.
			if ts, err := releaseTime(rec.OldestWriter); err != nil || ts != it.Timestamp {
				rec.oldestWriterStamp = it.Timestamp
			}
		}
	}
	slices.SortStableFunc(rec.TTLFrom, func(a, b Setting) int { return a.Since.Compare(b.Since) })
	for _, v := range versions {
		rec.Versions = append(rec.Versions, *v)
	}
	slices.SortFunc(rec.Versions, func(a, b Version) int {
		return cmp.Or(a.Started.Compare(b.Started), strings.Compare(a.Version, b.Version))
	})
	return rec, nil
}

// settingColumn is the column of a setting recorded at the millisecond ms.
func settingColumn(ms int64) string { return fmt.Sprintf("%s%013d", colTTLFrom, max(0, ms)) }

// stored is a setting's cell value; its time is the column's.
type stored struct {
	TTLFrom string `json:"ttl_from"`
	By      string `json:"by"`
	Host    string `json:"host,omitempty"`
	Change  bool   `json:"change,omitempty"`
}

func parseSetting(col string, value []byte) (Setting, error) {
	ms, err := strconv.ParseInt(strings.TrimPrefix(col, colTTLFrom), 10, 64)
	if err != nil {
		return Setting{}, fmt.Errorf("not a setting's column: %w", err)
	}
	var v stored
	if err := json.Unmarshal(value, &v); err != nil {
		return Setting{}, fmt.Errorf("unreadable setting: %w", err)
	}
	return Setting{TTLFrom: v.TTLFrom, Since: time.UnixMilli(ms).UTC(), By: v.By, Host: v.Host, Change: v.Change, column: col}, nil
}

// at is t as a cell timestamp, to the millisecond (Bigtable's granularity).
func at(t time.Time) bigtable.Timestamp { return bigtable.Time(t.Truncate(time.Millisecond)) }
