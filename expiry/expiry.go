// Package expiry holds the one rule cellttl exists for: the cell timestamp
// that makes Bigtable's own garbage collection expire each tenant's cells on
// time, although GC rules are set per column family and never per cell.
//
// It is pure: a Policy and an event time in, a timestamp out. No I/O, no
// clock, no locks; a Policy is immutable once built, so any number of
// goroutines may read it while a newer one is swapped in elsewhere.
package expiry

import (
	"fmt"
	"time"
)

// Strategy says how per-tenant TTLs are mapped onto one family-wide GC rule.
type Strategy int

const (
	// DefaultExpiration sets the family's max-age to the default TTL and shifts
	// each cell's timestamp by (tenant TTL - default TTL). Writers that know
	// nothing of cellttl still get the default TTL.
	DefaultExpiration Strategy = iota
	// OneSecond sets the family's max-age to 1s and writes the expiry time
	// itself as the timestamp. Every writer of the family must follow the rule.
	OneSecond
)

// OneSecondMaxAge is the family GC max-age under the OneSecond strategy.
const OneSecondMaxAge = time.Second

func (s Strategy) String() string {
	switch s {
	case DefaultExpiration:
		return "default-expiration"
	case OneSecond:
		return "one-second"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// ParseStrategy accepts the names String returns.
func ParseStrategy(s string) (Strategy, error) {
	switch s {
	case "default-expiration":
		return DefaultExpiration, nil
	case "one-second":
		return OneSecond, nil
	}
	return 0, fmt.Errorf("unknown strategy %q (want default-expiration or one-second)", s)
}

// Policy is a validated, immutable retention configuration.
type Policy struct {
	Strategy            Strategy
	DefaultTTL          time.Duration
	RecordRealTimestamp bool
	// Tenants maps tenant id to TTL; a tenant not listed gets DefaultTTL.
	// Callers must not modify it after the Policy is in use.
	Tenants map[string]time.Duration
	// Bounds are the TTLs an event of a listed tenant may ask for itself
	// (--ttl-from); a tenant missing here, listed or not, has
	// DefaultBounds (see TenantBounds).
	Bounds        map[string]Bounds
	DefaultBounds Bounds
}

// Bounds limit the TTL an event may ask for: a request outside them is
// clamped to them. Min <= the tenant's TTL <= Max always holds (tenants.yaml
// refuses anything else), so an event without a request keeps its tenant's.
type Bounds struct {
	Min, Max time.Duration
}

// Clamp says where a requested TTL fell: within the bounds, or below or
// above them (and was clamped).
type Clamp int8

const (
	InBounds Clamp = iota
	BelowMin
	AboveMax
)

func (c Clamp) String() string {
	switch c {
	case BelowMin:
		return "min"
	case AboveMax:
		return "max"
	}
	return "none"
}

// Clamp returns the TTL an event that asked for requested gets: requested
// itself when Min <= requested <= Max, the bound it passed otherwise.
func (b Bounds) Clamp(requested time.Duration) (time.Duration, Clamp) {
	switch {
	case requested < b.Min:
		return b.Min, BelowMin
	case requested > b.Max:
		return b.Max, AboveMax
	}
	return requested, InBounds
}

// TenantBounds returns the bounds of a tenant's per-event TTLs, and
// whether the tenant has bounds of its own. A tenant without gets
// DefaultBounds, a zero Max standing for its TTL, always widened to hold
// its TTL (tenants.yaml refuses bounds that do not; a Policy built in code
// may leave them out).
func (p *Policy) TenantBounds(tenant string) (Bounds, bool) {
	if b, ok := p.Bounds[tenant]; ok {
		return b, true
	}
	ttl, b := p.TTL(tenant), p.DefaultBounds
	if b.Max == 0 {
		b.Max = ttl
	}
	return Bounds{Min: min(b.Min, ttl), Max: max(b.Max, ttl)}, false
}

// EventTTL is the TTL of an event of tenant that asked for requested: the
// request clamped to the tenant's bounds.
func (p *Policy) EventTTL(tenant string, requested time.Duration) (time.Duration, Clamp) {
	b, _ := p.TenantBounds(tenant)
	return b.Clamp(requested)
}

// LongestTTL is the longest any event of tenant may live: its bounds' Max
// (its own TTL when events may not ask for longer).
func (p *Policy) LongestTTL(tenant string) time.Duration {
	b, _ := p.TenantBounds(tenant)
	return max(b.Max, p.TTL(tenant))
}

// TTL returns the retention of a tenant's events.
func (p *Policy) TTL(tenant string) time.Duration {
	if ttl, ok := p.Tenants[tenant]; ok {
		return ttl
	}
	return p.DefaultTTL
}

// GCMaxAge is the max-age GC rule the column family must carry for this
// policy's timestamps to expire cells on time.
func (p *Policy) GCMaxAge() time.Duration {
	if p.Strategy == OneSecond {
		return OneSecondMaxAge
	}
	return p.DefaultTTL
}

// Cell is where an event's cells go in time.
type Cell struct {
	// Timestamp is the Bigtable cell timestamp in microseconds since the Unix
	// epoch, always a multiple of 1000: Bigtable tables use millisecond
	// granularity and reject anything finer.
	Timestamp int64
	// Expiry is the instant from which reads must no longer return the cell.
	// GC removes it lazily some time after.
	Expiry time.Time
}

// Cell computes the cell timestamp for an event of tenant whose TTL counts
// from base. Base is truncated to the millisecond first, so the same event
// always maps to the same timestamp and a redelivered event overwrites its
// own cell instead of adding a version.
func (p *Policy) Cell(tenant string, base time.Time) Cell {
	return p.CellTTL(p.TTL(tenant), base)
}

// CellTTL is Cell for a TTL already looked up.
func (p *Policy) CellTTL(ttl time.Duration, base time.Time) Cell {
	expiry := TruncMillis(base.UnixMicro()) + ttl.Microseconds()
	return Cell{Timestamp: expiry - p.lead(), Expiry: time.UnixMicro(expiry).UTC()}
}

// lead is how far, in microseconds, a cell's expiry lies after its
// timestamp. Bigtable deletes a cell once timestamp + max-age has passed, so
// under DefaultExpiration timestamp + DefaultTTL == base + ttl; under
// OneSecond the timestamp is the expiry itself (GC's extra second only
// delays collection, reads never see the cell after its timestamp).
func (p *Policy) lead() int64 {
	if p.Strategy == OneSecond {
		return 0
	}
	return p.DefaultTTL.Microseconds()
}

// ExpiryOf returns when a cell with the given timestamp expires under p,
// whatever tenant wrote it: the inverse of Cell that a reader needs.
func (p *Policy) ExpiryOf(timestamp int64) time.Time {
	return time.UnixMicro(timestamp + p.lead()).UTC()
}

// Expired reports whether a cell expiring at expiry must be hidden at now.
// A cell is live strictly before its expiry.
func Expired(expiry, now time.Time) bool {
	return !expiry.After(now)
}

// ReadFrom is the lowest cell timestamp still live at now: a read that keeps
// timestamps in [ReadFrom(now), ∞) returns exactly the cells that are not
// Expired, whatever GC has or has not collected yet. Expiries are whole
// milliseconds, so the first live one is the millisecond after now's.
func (p *Policy) ReadFrom(now time.Time) int64 {
	return TruncMillis(now.UnixMicro()) + 1000 - p.lead()
}

// TruncMillis truncates a microsecond timestamp to the millisecond, towards
// negative infinity so that times before 1970 truncate consistently too.
func TruncMillis(micros int64) int64 {
	r := micros % 1000
	if r < 0 {
		r += 1000
	}
	return micros - r
}
