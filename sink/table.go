package sink

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/rowkey"
)

// Target names the family cellttl writes.
type Target struct {
	Table, Family string
}

func (t Target) String() string { return t.Table + ":" + t.Family }

// SetupOptions say which changes Setup may make to an existing family.
type SetupOptions struct {
	// UpdateGCPolicy allows replacing a family's different GC rule.
	UpdateGCPolicy bool
	// Force allows a 1s max-age on a family that holds cells: GC would
	// delete every cell not written under the one-second rule.
	Force bool
	// Granularity is the timestamp granularity of a table Setup creates,
	// Millis when empty; Tables creates one of Micros.
	Granularity Granularity
	Tables      *TableAdmin
}

// SetupResult says what Setup did.
type SetupResult struct {
	CreatedTable, CreatedFamily, UpdatedRule bool
	// OldRule is the family's rule before an update.
	OldRule string
}

// GCRuleMismatchError reports a family whose GC rule is not the one wanted.
type GCRuleMismatchError struct {
	Target    Target
	Have      string
	Want      string
	HoldCells bool
}

func (e *GCRuleMismatchError) Error() string {
	return fmt.Sprintf("family %s has GC rule %q, the configuration needs %q", e.Target, e.Have, e.Want)
}

// Setup creates the table and family when missing, with the GC rule
// max-age maxAge. A family that exists with another rule is left alone
// unless opts.UpdateGCPolicy, and never given a 1s max-age while it holds
// cells unless opts.Force.
func Setup(ctx context.Context, ac *bigtable.AdminClient, c *bigtable.Client, t Target, maxAge time.Duration, opts SetupOptions) (SetupResult, error) {
	var res SetupResult
	want := bigtable.MaxAgePolicy(maxAge)
	fam, err := ReadFamily(ctx, ac, t)
	if err != nil {
		return res, err
	}
	if !fam.TableExists {
		create := func() error { return ac.CreateTable(ctx, t.Table) }
		if opts.Granularity == Micros {
			if opts.Tables == nil {
				return res, fmt.Errorf("create table %q of microsecond granularity: no table admin API to create it with", t.Table)
			}
			create = func() error { return opts.Tables.CreateTable(ctx, t.Table, opts.Granularity) }
		}
		err := waitfor.Do(ctx, waitfor.Bigtable, "admin: create table "+t.Table, create)
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return res, fmt.Errorf("create table %q: %w", t.Table, err)
		}
		res.CreatedTable = true
		if fam, err = ReadFamily(ctx, ac, t); err != nil {
			return res, err
		}
	}
	if !fam.Exists {
		// One ModifyColumnFamilies call with the rule inline: there is no
		// moment at which the family exists without its GC rule.
		if err := waitfor.Do(ctx, waitfor.Bigtable, "admin: create family "+t.String(), func() error {
			return ac.CreateColumnFamilyWithConfig(ctx, t.Table, t.Family, bigtable.Family{GCPolicy: want})
		}); err != nil {
			return res, fmt.Errorf("create family %s: %w", t, err)
		}
		res.CreatedFamily = true
		return res, nil
	}
	if fam.Matches(maxAge) {
		return res, nil
	}
	mismatch := &GCRuleMismatchError{Target: t, Have: DescribeGC(fam.Rule), Want: DescribeGC(want)}
	if !opts.UpdateGCPolicy {
		return res, fmt.Errorf("%w; pass --update-gc-policy to replace it", mismatch)
	}
	if maxAge <= time.Second && !opts.Force {
		has, err := HoldsCells(ctx, c, t)
		if err != nil {
			return res, err
		}
		if has {
			mismatch.HoldCells = true
			return res, fmt.Errorf("%w; the family holds cells, which a 1s max-age would delete at the next compaction; pass --force to do it anyway", mismatch)
		}
	}
	if err := waitfor.Do(ctx, waitfor.Bigtable, "admin: set the GC rule of "+t.String(), func() error { return ac.SetGCPolicy(ctx, t.Table, t.Family, want) }); err != nil {
		return res, fmt.Errorf("set GC rule of %s: %w", t, err)
	}
	res.UpdatedRule, res.OldRule = true, mismatch.Have
	return res, nil
}

// ErrNotSetUp is CheckGC's error for a table or family that does not exist.
var ErrNotSetUp = errors.New("run worker setup")

// CheckGC verifies that the family exists with GC rule max-age maxAge.
func CheckGC(ctx context.Context, ac *bigtable.AdminClient, t Target, maxAge time.Duration) error {
	fam, err := ReadFamily(ctx, ac, t)
	switch {
	case err != nil:
		return err
	case !fam.TableExists:
		return fmt.Errorf("table %q does not exist; %w", t.Table, ErrNotSetUp)
	case !fam.Exists:
		return fmt.Errorf("family %s does not exist; %w", t, ErrNotSetUp)
	case !fam.Matches(maxAge):
		return &GCRuleMismatchError{Target: t, Have: DescribeGC(fam.Rule), Want: DescribeGC(bigtable.MaxAgePolicy(maxAge))}
	}
	return nil
}

// HoldsEvents reports whether the table holds a row of cellttl's layout
// (tenant, then a bucket of four hex digits), in any family: rows written
// under an earlier --family count, and rows outside the layout (no tenant
// id starts with the separator) do not.
func HoldsEvents(ctx context.Context, c *bigtable.Client, table string) (bool, error) {
	found, sep := false, regexp.QuoteMeta(string(rowkey.Sep))
	filter := bigtable.ChainFilters(
		// A whole-key match (Bigtable's rule), any byte after the bucket.
		bigtable.RowKeyFilter(`[^`+sep+`]+`+sep+`[0-9a-f]{4}`+sep+`(?s:.*)`),
		bigtable.CellsPerRowLimitFilter(1),
		bigtable.StripValueFilter(),
	)
	err := btwait.Open(c, table).ReadRows(ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool {
		found = true
		return false
	}, bigtable.RowFilter(filter), bigtable.LimitRows(1))
	if err != nil {
		return false, fmt.Errorf("look for events in %s: %w", table, err)
	}
	return found, nil
}

// HoldsCells reports whether any row has a cell in the family.
func HoldsCells(ctx context.Context, c *bigtable.Client, t Target) (bool, error) {
	found := false
	filter := bigtable.ChainFilters(
		bigtable.FamilyFilter("^"+regexp.QuoteMeta(t.Family)+"$"),
		bigtable.CellsPerRowLimitFilter(1),
		bigtable.StripValueFilter(),
	)
	err := btwait.Open(c, t.Table).ReadRows(ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool {
		found = true
		return false
	}, bigtable.RowFilter(filter), bigtable.LimitRows(1))
	if err != nil {
		return false, fmt.Errorf("look for cells in %s: %w", t, err)
	}
	return found, nil
}

// DescribeGC prints a GC rule for people: "max-age 2d", "none".
func DescribeGC(p bigtable.GCPolicy) string {
	switch p := p.(type) {
	case nil:
		return "none"
	case bigtable.MaxAgeGCPolicy:
		return "max-age " + duration.Format(time.Duration(p))
	}
	if s := p.String(); s != "" {
		return s
	}
	return "none"
}

// IsMismatch reports whether err is a GC rule mismatch.
func IsMismatch(err error) bool {
	var m *GCRuleMismatchError
	return errors.As(err, &m)
}

// FamilyState is what the table says of the target family.
type FamilyState struct {
	TableExists bool
	Exists      bool              // the family exists
	Rule        bigtable.GCPolicy // its GC rule
}

// Matches reports whether the family's rule is a plain max-age of maxAge.
func (f FamilyState) Matches(maxAge time.Duration) bool {
	d, ok := MaxAge(f.Rule)
	return f.Exists && ok && d == maxAge
}

// ReadFamily reads the table's description once and finds the family.
func ReadFamily(ctx context.Context, ac *bigtable.AdminClient, t Target) (FamilyState, error) {
	p := waitfor.Begin(ctx, waitfor.Bigtable, "admin: read the families of "+t.Table)
	info, err := ac.TableInfo(ctx, t.Table)
	err = p.End(err)
	if status.Code(err) == codes.NotFound {
		return FamilyState{}, nil
	}
	if err != nil {
		return FamilyState{}, fmt.Errorf("read table %q: %w", t.Table, err)
	}
	st := FamilyState{TableExists: true}
	for _, f := range info.FamilyInfos {
		if f.Name == t.Family {
			st.Exists, st.Rule = true, f.FullGCPolicy
		}
	}
	return st, nil
}

// MaxAge returns the max-age of a plain max-age rule.
func MaxAge(p bigtable.GCPolicy) (time.Duration, bool) {
	ma, ok := p.(bigtable.MaxAgeGCPolicy)
	return time.Duration(ma), ok
}
