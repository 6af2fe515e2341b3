package erasure

import (
	"context"
	"fmt"
	"time"
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

// EndOffboardings ends, in the table, tenant's offboardings recorded
// before a rejoin recorded at rejoined: their record cells take the expiry
// now, and their index cells go, so that no later read finds them. Run
// only once every worker holds the rejoin (it was recorded last, and wins
// over them meanwhile), and once no reread that began before the rejoin's
// index cell was written can still be reading (RereadTimeout): such a
// read, passing the rejoin's row before its cell and an offboarding's
// after its deletion, would hold neither.
func (s *Store) EndOffboardings(ctx context.Context, tenant string, rejoined, now time.Time) (ended int, _ error) {
	recs, err := s.TenantRecords(ctx, tenant, now)
	if err != nil {
		return 0, err
	}
	for _, r := range recs {
		if !r.Whole() || !r.RecordedAt.Before(rejoined) || !r.Expires.IsZero() {
			continue
		}
		at := r.RecordedAt.UnixMilli()
		c := marked{row: indexKey(never, tenant, "", at), column: indexColumn(tenant, "", at), tenant: tenant, recorded: at}
		if err := s.retire(ctx, c, now, now); err != nil {
			return ended, fmt.Errorf("end the offboarding of %s recorded at %s (the rejoin is recorded: run it again): %w", tenant, r.RecordedAt.Format(time.RFC3339Nano), err)
		}
		ended++
	}
	return ended, nil
}
