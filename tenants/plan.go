package tenants

import (
	"sort"
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
	Tenant    string        `json:"tenant"`
	OldTTL    time.Duration `json:"old_ttl"`
	NewTTL    time.Duration `json:"new_ttl"`
	OldListed bool          `json:"old_listed"`
	NewListed bool          `json:"new_listed"`
}

// String says the change in a few words: "acme 1h→2h", "newco added 30m",
// "wonka removed, default 2d".
func (c TenantChange) String() string {
	switch {
	case !c.OldListed:
		return c.Tenant + " added " + duration.Format(c.NewTTL)
	case !c.NewListed:
		return c.Tenant + " removed, default " + duration.Format(c.NewTTL)
	}
	return c.Tenant + " " + duration.Format(c.OldTTL) + "→" + duration.Format(c.NewTTL)
}

// Plan is what an edit of tenants.yaml changes.
type Plan struct {
	Old, New *expiry.Policy `json:"-"`
	// Tenants lists every listed tenant whose TTL differs, in id order.
	// Added and removed tenants are here too (see OldListed, NewListed).
	Tenants []TenantChange `json:"tenants"`
	// GCRuleChange is set when the family's GC rule must change: a new
	// strategy, or a new default_ttl under default-expiration. Such an edit
	// is never applied at runtime.
	GCRuleChange bool `json:"gc_rule_change"`
	// ExpiryShift is how far the effective expiry of every cell already
	// written moves once the GC rule changes (positive: later). For
	// tenants at the default TTL that is the intended new default; for the
	// others it breaks the TTL they were promised.
	ExpiryShift time.Duration `json:"expiry_shift"`
	// ReplicatedSteps is set when the GC max-age grows by more than
	// MaxReplicatedGCIncrease: on a replicated table it must be raised in
	// steps.
	ReplicatedSteps bool `json:"replicated_steps"`
}

// Compare returns the plan of replacing old by new.
func Compare(old, new *expiry.Policy) Plan {
	p := Plan{Old: old, New: new}
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
		if c.OldTTL != c.NewTTL || ol != nl {
			p.Tenants = append(p.Tenants, c)
		}
	}
	sort.Slice(p.Tenants, func(i, j int) bool { return p.Tenants[i].Tenant < p.Tenants[j].Tenant })

	p.GCRuleChange = old.Strategy != new.Strategy || old.GCMaxAge() != new.GCMaxAge()
	if p.GCRuleChange && old.Strategy == new.Strategy {
		// Same strategy, new max-age: expiry = timestamp + max-age.
		p.ExpiryShift = new.GCMaxAge() - old.GCMaxAge()
	}
	p.ReplicatedSteps = new.GCMaxAge()-old.GCMaxAge() > MaxReplicatedGCIncrease
	return p
}

// SafeAtRuntime reports whether the edit can be applied by a running worker:
// it changes only which timestamps new events get, never the GC rule nor
// the expiry of anything written.
func (p Plan) SafeAtRuntime() bool { return !p.GCRuleChange }

// Empty reports whether the edit changes nothing the worker computes.
func (p Plan) Empty() bool {
	return len(p.Tenants) == 0 && !p.GCRuleChange && p.Old.Strategy == p.New.Strategy &&
		p.Old.DefaultTTL == p.New.DefaultTTL && p.Old.RecordRealTimestamp == p.New.RecordRealTimestamp
}
