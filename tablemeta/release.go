package tablemeta

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/release"
)

// colOldestWriter holds the oldest release that may write the table (see
// release.OldestWriter). Its cell's timestamp orders the releases (see
// releaseTime), so the newest cell is the newest rule whatever order the
// setups of two releases ran in, and a setup never lowers it.
const colOldestWriter = "oldest_writer"

// releaseTime is the cell timestamp of a release: MAJOR, MINOR and PATCH
// as the digits of a millisecond count (a cell timestamp is in
// milliseconds), far from any clock's.
func releaseTime(v string) (bigtable.Timestamp, error) {
	p, err := release.Parse(v)
	if err != nil {
		return 0, err
	}
	return bigtable.Timestamp((int64(p[0])*1_000_000 + int64(p[1])*1_000 + int64(p[2])) * 1000), nil
}

// RecordOldestWriter records oldest as the oldest release that may write
// the table, unless a newer one is recorded (worker setup).
func (s *Store) RecordOldestWriter(ctx context.Context, oldest string) error {
	ts, err := releaseTime(oldest)
	if err != nil {
		return err
	}
	m := bigtable.NewMutation()
	m.Set(Family, colOldestWriter, ts, []byte(oldest))
	if err := s.tbl.Apply(ctx, Key, m); err != nil {
		return fmt.Errorf("record the oldest release that may write %s: %w", s.name, err)
	}
	return nil
}

// ErrTooOld is the error of a writer older than the table's record allows.
var ErrTooOld = errors.New("a release too old for the table")

// CheckWriter refuses a writer of release self on a table whose record
// names a newer oldest writer: it would write what the newer release reads
// wrongly. A record it cannot read is refused too. A -dev build counts as
// the release it is the making of (release.Core): the build that raises
// the rule writes as that release will.
func (r State) CheckWriter(table, self string) error {
	if r.OldestWriter == "" {
		return nil // set up before the rule: any release writes it
	}
	c, err := release.Compare(r.OldestWriter, release.Core(self))
	if err == nil && r.oldestWriterStamp != 0 {
		err = fmt.Errorf("its cell (%s:%s of row %q) has the timestamp %d, not the one worker setup gives it: written by hand? Delete the column, then run worker setup",
			Family, colOldestWriter, Key, r.oldestWriterStamp)
	}
	if err != nil {
		return fmt.Errorf("the record of %s names the oldest release that may write it as %q: %w", table, r.OldestWriter, err)
	}
	if c > 0 {
		return fmt.Errorf("%w: table %s is written by release %s or newer (recorded by that release's worker setup); this is release %s, which would write what those releases read wrongly: run release %s or newer (the CHANGELOG's rollback note of the release that raised it says what a rollback takes)",
			ErrTooOld, table, r.OldestWriter, self, r.OldestWriter)
	}
	return nil
}
