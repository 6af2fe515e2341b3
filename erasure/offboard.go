package erasure

import (
	"context"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/rowkey"
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

// left is what the ledger holds of a tenant's offboarding: the record in
// force recorded last. Unlike a user's records, which join, a tenant's
// replace each other: a rejoin (worker offboard --rejoin), recorded after
// the offboarding it ends, erases only what the tenant had before, and an
// offboarding again after it erases everything again.
type left struct {
	erased
	recorded int64
}

// Offboarded reports whether o erases every event of its tenant (an
// offboarding not ended by a rejoin).
func (o left) whole() bool { return o.upTo >= rowkey.MaxMillis }

// addTenant holds o as tenant's offboarding unless the one held was
// recorded later; two of the same time join.
func (l *Ledger) addTenant(tenant string, o left) {
	if l.tenants == nil {
		l.tenants = map[string]left{}
	}
	old, ok := l.tenants[tenant]
	switch {
	case !ok || o.recorded > old.recorded:
		l.tenants[tenant] = o
	case o.recorded == old.recorded && !old.contains(o.erased):
		l.tenants[tenant] = left{old.merge(o.erased), o.recorded}
	}
}

// Offboarded reports whether tenant has left and not rejoined: every
// event of the tenant is erased.
func (l *Ledger) Offboarded(tenant string) bool {
	if l == nil || l.tenants == nil {
		return false
	}
	o, ok := l.tenants[tenant]
	return ok && o.whole()
}

// takes reports whether e changes what o (held when ok) holds for its
// tenant (see addTenant), and whether it erases something o does not.
func (o left) takes(ok bool, e entry) (changes, erasesMore bool) {
	switch {
	case !ok:
		return true, true
	case e.recorded > o.recorded:
		// It replaces o, if only to move the time later: next must own
		// its map then (addTenant writes it), never share l's, which
		// workers read.
		return true, !o.erasesAll(e.erased)
	case e.recorded == o.recorded:
		return !o.contains(e.erased), !o.erasesAll(e.erased)
	}
	return false, false
}

// TenantRecords reads the records in force at now of tenant's own row:
// its offboardings and rejoins, in the order they were recorded.
func (s *Store) TenantRecords(ctx context.Context, tenant string, now time.Time) ([]Erasure, error) {
	var out []Erasure
	_, _, err := s.read(ctx, "read", bigtable.RowList{recordKey(tenant, "")}, nil, now, parseRecordKey, func(tenant, user string, cells []bigtable.ReadItem) {
		out = append(out, records(tenant, user, cells, marks{})...)
	})
	slices.SortFunc(out, func(a, b Erasure) int { return a.RecordedAt.Compare(b.RecordedAt) })
	return out, err
}

// Offboarding reads tenant's offboarding in force at now: its record
// recorded last, when that is one that erases every event of the tenant
// (nil: the tenant has not left, or has rejoined since).
func (s *Store) Offboarding(ctx context.Context, tenant string, now time.Time) (*Erasure, error) {
	recs, err := s.TenantRecords(ctx, tenant, now)
	if err != nil || len(recs) == 0 || !recs[len(recs)-1].Whole() {
		return nil, err
	}
	return &recs[len(recs)-1], nil
}

// Whole reports whether r is an offboarding not ended: it erases every
// event of its tenant.
func (r Erasure) Whole() bool { return r.Offboard && !r.UpTo.Before(Whole) }
