package erasure

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
)

// A tenant's records: an offboarding (worker offboard) erases every event
// of the tenant while it is in force, which is forever; a rejoin
// (worker offboard --rejoin) ends it, erasing then only what the tenant
// had before it: events whose time is at or before its erased_up_to (when
// the tenant left, and the skew an event may carry), and every event
// appended to the input topic before the rejoin (its mark). A tenant's
// records do not join as a user's do: the one recorded last is in force
// (see left).

// LeftAt reports when tenant left, as the record in force says, while it
// has not rejoined.
func (l *Ledger) LeftAt(tenant string) (time.Time, bool) {
	if l == nil || l.tenants == nil {
		return time.Time{}, false
	}
	o, ok := l.tenants[tenant]
	if !ok || !o.whole() {
		return time.Time{}, false
	}
	return time.UnixMilli(o.recorded).UTC(), true
}

// Rejoin records rec, a tenant's rejoin (Offboard, with a bounded UpTo,
// recorded after every offboarding it ends), then ends those offboardings
// in the table: their record cells take the expiry now, and their index
// cells go, so that no later read finds them. A worker takes the rejoin
// at its next refresh, since it was recorded last; it is refused when an
// offboarding in force was recorded at or after it.
func (s *Store) Rejoin(ctx context.Context, rec Erasure, now time.Time) (ended int, _ error) {
	if !rec.Offboard || !rec.UpTo.Before(Whole) {
		return 0, fmt.Errorf("a rejoin of %s must be a tenant's record with an erased_up_to", rec.Tenant)
	}
	var whole []int64
	_, _, err := s.read(ctx, "read", bigtable.RowList{recordKey(rec.Tenant, "")}, nil, now, parseRecordKey, func(_, _ string, cells []bigtable.ReadItem) {
		for _, r := range records(rec.Tenant, "", cells, marks{}) {
			if r.Expires.IsZero() && !r.UpTo.Before(Whole) {
				whole = append(whole, r.RecordedAt.UnixMilli())
			}
		}
	})
	if err != nil {
		return 0, err
	}
	for _, at := range whole {
		if at >= rec.RecordedAt.UnixMilli() {
			return 0, fmt.Errorf("tenant %s has an offboarding recorded at %s, not before this rejoin's %s: run it again later",
				rec.Tenant, time.UnixMilli(at).UTC().Format(time.RFC3339Nano), rec.RecordedAt.Format(time.RFC3339Nano))
		}
	}
	// The rejoin first: a failure after it leaves the tenant rejoined to
	// every worker, and an offboarding in the table a run again ends.
	if err := s.Put(ctx, rec); err != nil {
		return 0, err
	}
	for _, at := range whole {
		c := marked{row: indexKey(never, rec.Tenant, "", at), column: indexColumn(rec.Tenant, "", at), tenant: rec.Tenant, recorded: at}
		if err := s.retire(ctx, c, now, now); err != nil {
			return ended, fmt.Errorf("end the offboarding of %s recorded at %s (the rejoin is recorded: run it again): %w", rec.Tenant, time.UnixMilli(at).UTC().Format(time.RFC3339Nano), err)
		}
		ended++
	}
	return ended, nil
}
