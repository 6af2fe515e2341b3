package tenants

import (
	"cmp"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/duration"
)

// MaxReplicatedGCIncrease is how much a GC max-age may grow in one change on
// a replicated Bigtable table.
const MaxReplicatedGCIncrease = 90 * 24 * time.Hour

// TenantChange is one tenant's TTL before and after an edit. A tenant not
// listed on one side has that side's default TTL, and Listed says so.
type TenantChange struct {
	Tenant    string
	OldTTL    time.Duration
	NewTTL    time.Duration
	OldListed bool
	NewListed bool
	// Offboarded: the new file lists the tenant as offboarded (see
	// CompareConfigs), which writes none of its events.
	Offboarded bool
	// The bounds of the TTLs its events may give themselves (--ttl-from).
	OldBounds, NewBounds expiry.Bounds
}

// BoundsChanged reports whether the edit changes what an event's own TTL
// is clamped to.
func (c TenantChange) BoundsChanged() bool { return c.OldBounds != c.NewBounds }

// BoundsSaid reports whether the bounds change in a way the TTL change does
// not say already: a max_ttl left to default follows the TTL.
func (c TenantChange) BoundsSaid() bool {
	follows := c.OldBounds.Min == c.NewBounds.Min && c.OldBounds.Max == c.OldTTL && c.NewBounds.Max == c.NewTTL
	return c.BoundsChanged() && !follows
}

// FormatBounds writes bounds as "10m..3h".
func FormatBounds(b expiry.Bounds) string {
	return duration.Format(b.Min) + ".." + duration.Format(b.Max)
}

// parseBounds reads what FormatBounds writes.
func parseBounds(s string) (expiry.Bounds, error) {
	lo, hi, ok := strings.Cut(s, "..")
	if !ok {
		return expiry.Bounds{}, fmt.Errorf("bounds %q: want MIN..MAX", s)
	}
	min, err := duration.Parse(lo)
	if err != nil {
		return expiry.Bounds{}, err
	}
	max, err := duration.Parse(hi)
	return expiry.Bounds{Min: min, Max: max}, err
}

// Kind is "added", "removed", "offboarded" or "changed".
func (c TenantChange) Kind() string {
	switch {
	case c.Offboarded:
		return "offboarded"
	case !c.OldListed:
		return "added"
	case !c.NewListed:
		return "removed"
	}
	return "changed"
}

// String says the change in a few words: "acme 1h→2h", "newco added 30m",
// "wonka removed, default 2d".
func (c TenantChange) String() string {
	switch c.Kind() {
	case "added":
		return c.Tenant + " added " + duration.Format(c.NewTTL)
	case "removed":
		return c.Tenant + " removed, default " + duration.Format(c.NewTTL)
	case "offboarded":
		return c.Tenant + " offboarded"
	}
	s := c.Tenant + " " + duration.Format(c.OldTTL) + "→" + duration.Format(c.NewTTL)
	if c.BoundsSaid() {
		s += ", own TTLs " + FormatBounds(c.OldBounds) + "→" + FormatBounds(c.NewBounds)
	}
	return s
}

// tenantChangeJSON is TenantChange as worker check prints it.
type tenantChangeJSON struct {
	Tenant string `json:"tenant"`
	Change string `json:"change"` // added, removed, offboarded, changed
	OldTTL string `json:"old_ttl"`
	NewTTL string `json:"new_ttl"`
	// The bounds of the events' own TTLs, MIN..MAX.
	OldBounds string `json:"old_bounds"`
	NewBounds string `json:"new_bounds"`
}

// MarshalJSON writes the TTLs as durations people read ("2d").
func (c TenantChange) MarshalJSON() ([]byte, error) {
	return json.Marshal(tenantChangeJSON{Tenant: c.Tenant, Change: c.Kind(), OldTTL: duration.Format(c.OldTTL), NewTTL: duration.Format(c.NewTTL),
		OldBounds: FormatBounds(c.OldBounds), NewBounds: FormatBounds(c.NewBounds)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *TenantChange) UnmarshalJSON(b []byte) error {
	var j tenantChangeJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	o, err := duration.Parse(j.OldTTL)
	if err != nil {
		return fmt.Errorf("old_ttl: %w", err)
	}
	n, err := duration.Parse(j.NewTTL)
	if err != nil {
		return fmt.Errorf("new_ttl: %w", err)
	}
	*c = TenantChange{Tenant: j.Tenant, OldTTL: o, NewTTL: n, OldListed: j.Change != "added", NewListed: j.Change != "removed" && j.Change != "offboarded",
		Offboarded: j.Change == "offboarded"}
	// Bounds are absent from what a version before them wrote.
	if j.OldBounds != "" {
		if c.OldBounds, err = parseBounds(j.OldBounds); err != nil {
			return fmt.Errorf("old_bounds: %w", err)
		}
	}
	if j.NewBounds != "" {
		if c.NewBounds, err = parseBounds(j.NewBounds); err != nil {
			return fmt.Errorf("new_bounds: %w", err)
		}
	}
	return nil
}

// Shift is how far an expiry moves: positive later, negative earlier.
type Shift time.Duration

// String is the signed shift: "+1d", "-12h".
func (s Shift) String() string {
	if s < 0 {
		return "-" + s.Size()
	}
	return "+" + s.Size()
}

// Size is the shift without its sign: "1d".
func (s Shift) Size() string { return duration.Format(time.Duration(max(s, -s))) }

// Direction is "later" or "earlier".
func (s Shift) Direction() string {
	if s < 0 {
		return "earlier"
	}
	return "later"
}

// MarshalJSON writes the signed shift as a string.
func (s Shift) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Shift) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return err
	}
	neg := strings.HasPrefix(str, "-")
	d, err := duration.Parse(strings.TrimLeft(str, "+-"))
	if err != nil {
		return fmt.Errorf("expiry shift: %w", err)
	}
	if neg {
		d = -d
	}
	*s = Shift(d)
	return nil
}

// Plan is what an edit of tenants.yaml changes.
type Plan struct {
	Old, New *expiry.Policy `json:"-"`
	// Tenants lists every listed tenant whose TTL or bounds differ, in id
	// order. Added and removed tenants are here too (see OldListed,
	// NewListed).
	Tenants []TenantChange `json:"tenants"`
	// GCRuleChange is set when the family's GC rule must change: a new
	// strategy, or a new default_ttl under default-expiration. Such an edit
	// is never applied at runtime.
	GCRuleChange bool `json:"gc_rule_change"`
	// ExpiryShift is how far the effective expiry of every cell already
	// written moves once the GC rule changes (positive: later). For
	// tenants at the default TTL that is the intended new default; for the
	// others it breaks the TTL they were promised.
	ExpiryShift Shift `json:"expiry_shift,omitempty"`
	// ShiftedTenants are the listed tenants whose cells ExpiryShift moves
	// away from their TTL, in id order.
	ShiftedTenants []string `json:"shifted_tenants,omitempty"`
	// ReplicatedSteps is set when the GC max-age grows by more than
	// MaxReplicatedGCIncrease: on a replicated table it must be raised in
	// steps.
	ReplicatedSteps bool `json:"replicated_steps"`
}

// Compare returns the plan of replacing old by new.
func Compare(old, new *expiry.Policy) Plan {
	p := Plan{Old: old, New: new, Tenants: []TenantChange{}}
	ids := map[string]bool{}
	for id := range old.Tenants {
		ids[id] = true
	}
	for id := range new.Tenants {
		ids[id] = true
	}
	for id := range ids {
		_, ol := old.Tenants[id]
		_, nl := new.Tenants[id]
		c := TenantChange{Tenant: id, OldTTL: old.TTL(id), NewTTL: new.TTL(id), OldListed: ol, NewListed: nl}
		c.OldBounds, _ = old.TenantBounds(id)
		c.NewBounds, _ = new.TenantBounds(id)
		if c.OldTTL != c.NewTTL || ol != nl || c.BoundsChanged() {
			p.Tenants = append(p.Tenants, c)
		}
	}
	sort.Slice(p.Tenants, func(i, j int) bool { return p.Tenants[i].Tenant < p.Tenants[j].Tenant })

	p.GCRuleChange = old.Strategy != new.Strategy || old.GCMaxAge() != new.GCMaxAge()
	if p.GCRuleChange && old.Strategy == new.Strategy {
		// Same strategy, new max-age: expiry = timestamp + max-age.
		p.ExpiryShift = Shift(new.GCMaxAge() - old.GCMaxAge())
	}
	if p.ExpiryShift != 0 {
		for id := range old.Tenants {
			p.ShiftedTenants = append(p.ShiftedTenants, id)
		}
		sort.Strings(p.ShiftedTenants)
	}
	p.ReplicatedSteps = new.GCMaxAge()-old.GCMaxAge() > MaxReplicatedGCIncrease
	return p
}

// CompareConfigs is Compare of two tenants files, which also says which
// tenants the new one lists as offboarded.
func CompareConfigs(old, new *Config) Plan {
	p := Compare(old.Policy, new.Policy)
	for i := range p.Tenants {
		p.Tenants[i].Offboarded = new.Offboarded[p.Tenants[i].Tenant]
	}
	return p
}

// Leaving explains what an edit does to the tenants it removes, lists as
// offboarded, or lists again: the words `worker check --against` prints.
func Leaving(old, new *Config) []string {
	var notes []string
	var removed, offboarded, back []string
	for id := range old.Policy.Tenants {
		_, listed := new.Policy.Tenants[id]
		switch {
		case new.Offboarded[id]:
			offboarded = append(offboarded, id)
		case !listed:
			removed = append(removed, id)
		}
	}
	for id := range new.Policy.Tenants {
		if old.Offboarded[id] {
			back = append(back, id)
		}
	}
	sort.Strings(removed)
	sort.Strings(offboarded)
	sort.Strings(back)
	if len(removed) > 0 {
		policy := "written with default_ttl " + duration.Format(new.Policy.DefaultTTL)
		if new.Unlisted == UnlistedDeadLetter {
			policy = "dead-lettered"
		}
		notes = append(notes, fmt.Sprintf("a tenant removed (%s) is only unlisted: its events are %s after the reload, and its rows stay until they expire. "+
			"A tenant that leaves is offboarded (`worker offboard --tenant ID`): its rows are dropped, and none of its events is written or dead-lettered again", strings.Join(removed, ", "), policy))
	}
	if len(offboarded) > 0 {
		notes = append(notes, fmt.Sprintf("offboarded (%s): none of their events is written or dead-lettered after the reload; their rows stay until `worker offboard --tenant ID` drops them", strings.Join(offboarded, ", ")))
	}
	if len(back) > 0 {
		notes = append(notes, fmt.Sprintf("listed again after they were offboarded (%s): a worker refuses the edit while its erasure ledger holds the offboarding; `worker offboard --rejoin --tenant ID` ends it", strings.Join(back, ", ")))
	}
	return notes
}

// Notes explain to an operator what the edit does once a worker reloads
// it, beyond the TTLs the plan lists: the rules of a reload, in the words
// `worker check --against` prints. oldUnlisted and newUnlisted are the
// unlisted_tenants of the two files. Never nil.
func (p Plan) Notes(oldUnlisted, newUnlisted Unlisted) []string {
	notes := []string{}
	if len(p.Tenants) > 0 {
		notes = append(notes, "per-tenant edits apply to events processed after the reload; cells already written keep the expiry they were written with")
	}
	for _, ch := range p.Tenants {
		if ch.BoundsSaid() && ch.OldListed && ch.NewListed {
			notes = append(notes, "new bounds clamp the own TTLs (--ttl-from) of events processed after the reload; rows already written keep theirs until `worker retime --tenant ID` clamps the TTL each asked for to the new bounds (rows within both are left alone)")
			break
		}
	}
	if o, n := p.Old.DefaultBounds, p.New.DefaultBounds; o != n {
		notes = append(notes, fmt.Sprintf("the own TTLs of unlisted tenants' events are clamped to %s instead of %s after the reload", FormatBounds(n), FormatBounds(o)))
	}
	if newUnlisted == UnlistedDeadLetter {
		var removed []string
		for _, ch := range p.Tenants {
			if ch.Kind() == "removed" {
				removed = append(removed, ch.Tenant)
			}
		}
		if len(removed) > 0 {
			notes = append(notes, fmt.Sprintf("unlisted_tenants is dead-letter: the events of the tenants removed (%s) are dead-lettered after the reload, not written with the default", strings.Join(removed, ", ")))
		}
	}
	if oldUnlisted != newUnlisted {
		notes = append(notes, fmt.Sprintf("unlisted_tenants %s → %s applies to events processed after the reload", cmp.Or(oldUnlisted, UnlistedDefaultTTL), cmp.Or(newUnlisted, UnlistedDefaultTTL)))
	}
	if p.Old.RecordRealTimestamp != p.New.RecordRealTimestamp {
		notes = append(notes, fmt.Sprintf("record_real_timestamp %t → %t applies to events processed after the reload", p.Old.RecordRealTimestamp, p.New.RecordRealTimestamp))
	}
	return notes
}

// SafeAtRuntime reports whether the edit can be applied by a running worker:
// it changes only which timestamps new events get, never the GC rule nor
// the expiry of anything written.
func (p Plan) SafeAtRuntime() bool { return !p.GCRuleChange }

// Empty reports whether the edit changes nothing the worker computes.
func (p Plan) Empty() bool {
	return len(p.Tenants) == 0 && !p.GCRuleChange && p.Old.Strategy == p.New.Strategy &&
		p.Old.DefaultTTL == p.New.DefaultTTL && p.Old.RecordRealTimestamp == p.New.RecordRealTimestamp &&
		p.Old.DefaultBounds == p.New.DefaultBounds
}
