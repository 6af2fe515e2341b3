package pipeline

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cellttl/cellttl/tenants"
)

// MaxTenantsTracked caps the tenants counted one by one; the rest share the
// OtherTenants row. Only tenants the tenants file lists are counted by id
// (the others under UnlistedTenants or OtherTenants), so the rows grow with
// the files a process has run, not with what producers send; the cap is a
// guard, above any file's. Which of them are metric series of their own is
// the file's to say (tenants.Config.Labelled, EachSeries).
const MaxTenantsTracked = 1 << 20

// OtherTenants is the stats row of tenants beyond MaxTenantsTracked and of
// events too broken to name a tenant.
const OtherTenants = "_other"

// UnlistedTenants is the stats row of every tenant tenants.yaml does not
// list: their ids are the producers' choice, and a value a producer chose
// never becomes a metric label. Unlisted counts them one by one, bounded,
// for /status.
const UnlistedTenants = "_unlisted"

// TenantStats counts one tenant's events.
type TenantStats struct {
	Consumed     atomic.Int64
	Written      atomic.Int64
	Expired      atomic.Int64 // skipped: already expired when processed
	DeadLettered atomic.Int64
	Clamped      atomic.Int64 // occurred_at clamped for clock skew
	Erased       atomic.Int64 // skipped: the erasure ledger covers its user and time
	// An event's own TTL (--ttl-from) clamped to the tenant's min_ttl or
	// max_ttl.
	TTLClampedMin, TTLClampedMax atomic.Int64
}

// Stats counts events per tenant. Lookups of a known tenant take no lock.
type Stats struct {
	tenants sync.Map // string -> *TenantStats
	n       atomic.Int64
	other   TenantStats
	// unlistedRow counts the events of every unlisted tenant together.
	unlistedRow TenantStats

	// Events of tenants tenants.yaml does not list: all counted, the first
	// MaxUnlistedTracked ids one by one (a producer sending random ids
	// must not grow the map without bound).
	unlistedTotal atomic.Int64
	umu           sync.Mutex
	unlisted      map[string]int64
	// ahead counts records stamped further ahead of the clock than
	// --max-clock-skew.
	ahead atomic.Int64
}

// TimestampsAhead is the number of records stamped further ahead of the
// worker's clock than --max-clock-skew when they were processed.
func (s *Stats) TimestampsAhead() int64 { return s.ahead.Load() }

// MaxUnlistedTracked bounds the unlisted tenant ids counted one by one.
const MaxUnlistedTracked = 100

// Unlisted counts an event of a tenant tenants.yaml does not list.
func (s *Stats) Unlisted(id string) {
	s.unlistedTotal.Add(1)
	s.umu.Lock()
	defer s.umu.Unlock()
	if s.unlisted == nil {
		s.unlisted = map[string]int64{}
	}
	if _, ok := s.unlisted[id]; ok {
		s.unlisted[id]++
	} else if len(s.unlisted) < MaxUnlistedTracked {
		s.unlisted[strings.Clone(id)] = 1 // id may alias a message's value
	}
}

// UnlistedTotal is the number of events of unlisted tenants.
func (s *Stats) UnlistedTotal() int64 { return s.unlistedTotal.Load() }

// UnlistedCount is an unlisted tenant id and its events.
type UnlistedCount struct {
	// Tenant is the id; on /status (Named), only when it lies near a
	// listed tenant, Near.
	Tenant string `json:"tenant,omitempty"`
	Near   string `json:"near,omitempty"`
	Bytes  int    `json:"bytes"`
	Events int64  `json:"count"`
}

// Named is top as /status shows it: an id within two edits of a listed
// tenant (near names it, "" for any other) keeps its name, with that
// tenant: a misspelt tenant id, which is what the list is for. Any other
// id is a producer's own string (an email, a user id) that no page may
// show: only its length is.
func Named(top []UnlistedCount, near func(id string) string) []UnlistedCount {
	out := make([]UnlistedCount, len(top))
	for i, u := range top {
		out[i] = UnlistedCount{Bytes: len(u.Tenant), Events: u.Events}
		if n := near(u.Tenant); n != "" {
			out[i].Tenant, out[i].Near = u.Tenant, n
		}
	}
	return out
}

// TopUnlisted returns the n most frequent unlisted tenant ids of those
// tracked, most frequent first.
func (s *Stats) TopUnlisted(n int) []UnlistedCount {
	s.umu.Lock()
	out := make([]UnlistedCount, 0, len(s.unlisted))
	for id, c := range s.unlisted {
		out = append(out, UnlistedCount{Tenant: id, Bytes: len(id), Events: c})
	}
	s.umu.Unlock()
	slices.SortFunc(out, func(a, b UnlistedCount) int {
		if a.Events != b.Events {
			return cmp.Compare(b.Events, a.Events)
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	return out[:min(n, len(out))]
}

// Tenant returns the counters of a tenant.
func (s *Stats) Tenant(id string) *TenantStats {
	if v, ok := s.tenants.Load(id); ok {
		return v.(*TenantStats)
	}
	if id == UnlistedTenants {
		return &s.unlistedRow
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
// callers fill maps and metrics; /status polls it), UnlistedTenants and
// OtherTenants last.
func (s *Stats) Each(f func(tenant string, t *TenantStats)) {
	s.tenants.Range(func(k, v any) bool {
		f(k.(string), v.(*TenantStats))
		return true
	})
	if s.unlistedRow.Consumed.Load() > 0 {
		f(UnlistedTenants, &s.unlistedRow)
	}
	if s.other.Consumed.Load() > 0 {
		f(OtherTenants, &s.other)
	}
}

// Totals sums every tenant's counters.
type Totals struct {
	Consumed, Written, Expired, DeadLettered, Clamped, Erased int64
	// TTLClamped: events whose own TTL was clamped to their tenant's
	// bounds (either bound).
	TTLClamped int64
}

// Totals returns the sums over all tenants.
func (s *Stats) Totals() Totals {
	var c Counts
	s.Each(func(_ string, ts *TenantStats) { c.add(ts) })
	return Totals{Consumed: c.Consumed, Written: c.Written, Expired: c.Expired, DeadLettered: c.DeadLettered,
		Clamped: c.Clamped, Erased: c.Erased, TTLClamped: c.TTLClampedMin + c.TTLClampedMax}
}

// Counts is a snapshot of TenantStats, or of several summed.
type Counts struct {
	Consumed, Written, Expired, DeadLettered, Clamped, Erased int64
	TTLClampedMin, TTLClampedMax                              int64
}

func (c *Counts) add(t *TenantStats) {
	c.Consumed += t.Consumed.Load()
	c.Written += t.Written.Load()
	c.Expired += t.Expired.Load()
	c.DeadLettered += t.DeadLettered.Load()
	c.Clamped += t.Clamped.Load()
	c.Erased += t.Erased.Load()
	c.TTLClampedMin += t.TTLClampedMin.Load()
	c.TTLClampedMax += t.TTLClampedMax.Load()
}

// EachSeries calls f for each metric series of the counts: every tenant
// cfg labels (tenants.Config.Labelled) under its id, UnlistedTenants and
// OtherTenants under theirs, and every other tenant summed under
// tenants.RestTenants. So the series are bounded by the file, whatever the
// events carry: at most tenants.MaxMetricTenants + 3 a counter. An edit of
// the file that moves a tenant in or out of the labelled ones moves its
// counts between series: rate() sees a reset of RestTenants.
func (s *Stats) EachSeries(cfg *tenants.Config, f func(label string, c *Counts)) {
	var rest Counts
	restSeen := false
	s.Each(func(tenant string, t *TenantStats) {
		if tenant == UnlistedTenants || tenant == OtherTenants || cfg != nil && cfg.Labelled(tenant) {
			var c Counts
			c.add(t)
			f(tenant, &c)
			return
		}
		rest.add(t)
		restSeen = true
	})
	if restSeen {
		f(tenants.RestTenants, &rest)
	}
}
