package pipeline

import (
	"strings"
	"sync"
	"sync/atomic"
)

// MaxTenantsTracked caps the tenants counted one by one; the rest share the
// OtherTenants row. Tenant ids come from input, and input must not be able
// to grow memory or metric cardinality without bound.
const MaxTenantsTracked = 1000

// OtherTenants is the stats row of tenants beyond MaxTenantsTracked and of
// events too broken to name a tenant.
const OtherTenants = "_other"

// TenantStats counts one tenant's events.
type TenantStats struct {
	Consumed     atomic.Int64
	Written      atomic.Int64
	Expired      atomic.Int64 // skipped: already expired when processed
	DeadLettered atomic.Int64
	Clamped      atomic.Int64 // occurred_at clamped for clock skew

}

// Stats counts events per tenant. Lookups of a known tenant take no lock.
type Stats struct {
	tenants sync.Map // string -> *TenantStats
	n       atomic.Int64
	other   TenantStats
}

// Tenant returns the counters of a tenant.
func (s *Stats) Tenant(id string) *TenantStats {
	if v, ok := s.tenants.Load(id); ok {
		return v.(*TenantStats)
	}
	if id == "" || id == OtherTenants || s.n.Load() >= MaxTenantsTracked {
		return &s.other
	}
	// The id may alias a message's value (the decoder does not copy): a key
	// kept for the life of the process must own its bytes, or it pins the
	// whole value, up to --max-event-bytes per tenant.
	v, loaded := s.tenants.LoadOrStore(strings.Clone(id), &TenantStats{})
	if !loaded {
		s.n.Add(1)
	}
	return v.(*TenantStats)
}

// Each calls f for every tenant counted, in no particular order (its
// callers fill maps and metrics; /status polls it), OtherTenants last.
func (s *Stats) Each(f func(tenant string, t *TenantStats)) {
	s.tenants.Range(func(k, v any) bool {
		f(k.(string), v.(*TenantStats))
		return true
	})
	if s.other.Consumed.Load() > 0 {
		f(OtherTenants, &s.other)
	}
}

// Totals sums every tenant's counters.
type Totals struct {
	Consumed, Written, Expired, DeadLettered, Clamped int64
}

// Totals returns the sums over all tenants.
func (s *Stats) Totals() Totals {
	var t Totals
	s.Each(func(_ string, ts *TenantStats) {
		t.Consumed += ts.Consumed.Load()
		t.Written += ts.Written.Load()
		t.Expired += ts.Expired.Load()
		t.DeadLettered += ts.DeadLettered.Load()
		t.Clamped += ts.Clamped.Load()
	})
	return t
}
