package retention

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/duration"
)

// MaxReplicatedStep is how much a GC max-age may grow in one change on a
// replicated table.
const MaxReplicatedStep = 90 * 24 * time.Hour

// Step is one step of a migration: a GC rule change, or a re-timing.
type Step struct {
	// MaxAge, when non-zero, is the family's new GC max-age.
	MaxAge time.Duration `json:"gc_max_age,omitempty"`
	// Retime re-times the rows of Tenants (every row when nil) to the new
	// file, reading the rows not yet moved as written under the old.
	Retime bool `json:"retime,omitempty"`
	// Purge deletes the rows of Tenants already expired under the old
	// file, before a step after which they would read as live again.
	Purge   bool     `json:"purge,omitempty"`
	Tenants []string `json:"tenants,omitempty"`
	Why     string   `json:"why"`
}

func (s Step) String() string {
	if s.Purge {
		return "delete the rows already expired under the old file: " + s.Why
	}
	if !s.Retime {
		return fmt.Sprintf("set the GC rule to max-age %s: %s", duration.Format(s.MaxAge), s.Why)
	}
	who := "every row"
	if s.Tenants != nil {
		who = fmt.Sprintf("the rows of %v", s.Tenants)
	}
	return fmt.Sprintf("re-time %s to the new file: %s", who, s.Why)
}

// LosesForeignRows reports whether a migration from old to new deletes
// the cells of rows outside cellttl's layout: a switch to one-second, whose
// 1 s max-age collects every cell whose timestamp is not an expiry ahead.
// worker migrate counts such rows first, and refuses without --force.
func LosesForeignRows(old, new *expiry.Policy) bool {
	return new.Strategy == expiry.OneSecond && old.Strategy != expiry.OneSecond
}

// PlanMigration orders the steps that take a table written under old to
// new so that GC never deletes a cell before the earlier of its old and new
// expiry: a GC max-age that grows changes before the cells move (to
// earlier timestamps, which the old rule would collect early), one that
// shrinks after them (the old cells would be collected early under it).
// On a replicated table a growth is split into steps of at most 90 days.
func PlanMigration(old, new *expiry.Policy, replicated bool) []Step {
	mOld, mNew := old.GCMaxAge(), new.GCMaxAge()
	var retime *Step
	switch {
	case old.Strategy != new.Strategy:
		retime = &Step{Retime: true, Why: "the strategy changes what a timestamp means, for every cell"}
	case old.Strategy == expiry.DefaultExpiration && old.DefaultTTL != new.DefaultTTL:
		// An unlisted tenant's cells sit at the event time whatever the
		// default, but not those of its events that gave their own TTL
		// (--ttl-from): they sit at that TTL less default_ttl, like a
		// listed tenant's. Every row is read; the others stay.
		retime = &Step{Retime: true, Why: "a listed tenant's timestamp, and that of an event with its own TTL, is its TTL less default_ttl"}
	case !samePolicy(old, new):
		retime = &Step{Retime: true, Why: "TTLs change"}
		// New default bounds move unlisted tenants' events with their own
		// TTL, wherever they are: every row.
		if old.DefaultTTL == new.DefaultTTL && old.DefaultBounds == new.DefaultBounds {
			retime.Tenants = changedTenants(old, new)
		}
	}
	var gc []Step
	if mNew > mOld {
		for at := mOld; at < mNew; {
			next := mNew
			if replicated && next-at > MaxReplicatedStep {
				next = at + MaxReplicatedStep
			}
			gc = append(gc, Step{MaxAge: next, Why: "a longer max-age first: no cell is collected before its time, old or new"})
			at = next
		}
	} else if mNew < mOld {
		gc = []Step{{MaxAge: mNew, Why: "a shorter max-age last, once no cell sits where it would be collected early"}}
	}
	var steps []Step
	if mNew > mOld {
		if retime != nil {
			// After the longer max-age, readers move to the new file,
			// which reads a cell not yet moved as expiring later: one
			// already expired would show again until it is re-timed.
			steps = append(steps, Step{Purge: true, Tenants: retime.Tenants, Why: "the new file would read them as live until they are re-timed"})
		}
		steps = append(steps, gc...)
	}
	if retime != nil {
		steps = append(steps, *retime)
	}
	if mNew < mOld {
		steps = append(steps, gc...)
	}
	return steps
}

func listed(ps ...*expiry.Policy) []string {
	set := map[string]bool{}
	for _, p := range ps {
		for id := range p.Tenants {
			set[id] = true
		}
	}
	return sortedKeys(set)
}

func changedTenants(old, new *expiry.Policy) []string {
	set := map[string]bool{}
	for _, id := range listed(old, new) {
		ob, _ := old.TenantBounds(id)
		nb, _ := new.TenantBounds(id)
		// New bounds move the rows whose own TTL they clamp differently.
		if old.TTL(id) != new.TTL(id) || ob != nb {
			set[id] = true
		}
	}
	return sortedKeys(set)
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func samePolicy(a, b *expiry.Policy) bool {
	if a.Strategy != b.Strategy || a.DefaultTTL != b.DefaultTTL || len(a.Tenants) != len(b.Tenants) || a.DefaultBounds != b.DefaultBounds {
		return false
	}
	for id, ttl := range a.Tenants {
		ab, _ := a.TenantBounds(id)
		bb, _ := b.TenantBounds(id)
		if b.Tenants[id] != ttl || ab != bb {
			return false
		}
	}
	return true
}

// PendingSteps drops from a plan the GC steps a previous run already
// applied, which the family's current max-age tells (every step before the
// one that set it is done: steps run in order); nil when the current
// max-age is on no step's path.
func PendingSteps(steps []Step, from, current time.Duration) []Step {
	if current == from {
		return steps
	}
	for i, st := range steps {
		if !st.Retime && !st.Purge && st.MaxAge == current {
			return steps[i+1:]
		}
	}
	return nil
}

// ErrOffPath is StepsToRun's error for a family whose max-age is neither
// the old file's nor a step towards the new one's.
var ErrOffPath = errors.New("the family's GC rule is on no step of the plan")

// StepsToRun picks from plan what one run does: step only (from 1) alone,
// or, when only is 0, every step the family's current max-age leaves
// (PendingSteps). Shards share re-timing and purge steps: a sharded run
// must name one. Errors about the choice name the flag; ErrOffPath is for
// the family's rule.
func StepsToRun(plan []Step, from, current time.Duration, only int, shard Shard) ([]Step, error) {
	sharded := shard.Count > 1
	switch {
	case only < 0 || only > len(plan):
		return nil, fmt.Errorf("--step %d: the plan has steps 1 to %d", only, len(plan))
	case only == 0 && sharded:
		return nil, errors.New("--shard needs --step: the GC rule changes once, between the re-timing steps every shard runs")
	case only > 0 && sharded && !plan[only-1].Retime && !plan[only-1].Purge:
		return nil, fmt.Errorf("--step %d changes the GC rule: run it once, without --shard", only)
	case only > 0:
		return []Step{plan[only-1]}, nil
	}
	steps := PendingSteps(plan, from, current)
	if steps == nil {
		return nil, ErrOffPath
	}
	return steps, nil
}

// ErrNotMaxAge is PlanRun's error for a family whose GC rule is no
// max-age: no plan starts from it.
var ErrNotMaxAge = errors.New("want a max-age GC rule")

// MigrationRun is a migration's plan and the steps one run takes of it.
type MigrationRun struct {
	Plan, Steps []Step
	// Only is --step: the one step this run takes (from 1), 0 for every
	// step left.
	Only int
}

// PlanRun plans the migration of a family from old to new (PlanMigration)
// and picks what this run takes (StepsToRun), the family's GC rule being a
// max-age of current (isMaxAge false: it is none), named rule in errors.
// ErrNotMaxAge and ErrOffPath are about the family; any other error is
// about the choice of only and shard, and names the flag.
func PlanRun(old, new *expiry.Policy, current time.Duration, isMaxAge bool, rule string, replicated bool, only int, shard Shard) (MigrationRun, error) {
	if !isMaxAge {
		return MigrationRun{}, fmt.Errorf("%w, found %s", ErrNotMaxAge, rule)
	}
	run := MigrationRun{Plan: PlanMigration(old, new, replicated), Only: only}
	var err error
	run.Steps, err = StepsToRun(run.Plan, old.GCMaxAge(), current, only, shard)
	if errors.Is(err, ErrOffPath) {
		return MigrationRun{}, fmt.Errorf("%w: GC rule %s is neither the old file's (%s) nor a step towards the new one's (%s)",
			err, rule, duration.Format(old.GCMaxAge()), duration.Format(new.GCMaxAge()))
	}
	return run, err
}

// Done reports whether step i (from 0) of the plan was done by an
// earlier run: a run of every step left takes a suffix of the plan
// (PendingSteps).
func (r MigrationRun) Done(i int) bool { return r.Only == 0 && i < len(r.Plan)-len(r.Steps) }

// ThisRun reports whether step i (from 0) is the one step this run takes.
func (r MigrationRun) ThisRun(i int) bool { return r.Only == i+1 }

// ForeignRowsAtRisk counts the rows outside cellttl's layout whose cells a
// migration from old to new deletes (LosesForeignRows), by an audit of
// tbl; 0, with no read, when it deletes none.
func ForeignRowsAtRisk(ctx context.Context, tbl Table, family string, old, new *expiry.Policy, tracers trace.TracerProvider) (int64, error) {
	if !LosesForeignRows(old, new) {
		return 0, nil
	}
	a, err := Audit(ctx, tbl, family, old, AuditOptions{Tracers: tracers})
	if err != nil {
		return 0, err
	}
	return a.Foreign, nil
}

// GCSetter changes the family's GC rule: the admin client's SetGCPolicy.
type GCSetter func(ctx context.Context, maxAge time.Duration) error

// Migrate runs the steps, in order. Re-timing steps take o (checkpoint,
// rate, progress) with the old policy as WrittenUnder; onStep, when set,
// is told before each step starts and after it ends.
func Migrate(ctx context.Context, tbl Table, family string, old, new *expiry.Policy, steps []Step, setGC GCSetter, o RetimeOptions, onStep func(i int, s Step, done bool)) (Report, error) {
	var total Report
	for i, st := range steps {
		if onStep != nil {
			onStep(i, st, false)
		}
		ctx, span := tracerOf(o.Tracers).Start(ctx, "cellttl.migrate.step")
		var err error
		if st.Purge {
			ro := o
			ro.Tenants, ro.WrittenUnder, ro.Passes = st.Tenants, old, 1
			ro.Job.Step = st.String()
			var r Report
			// Rows follow the old file: only the expired ones change. The
			// rest is counted by the re-timing step.
			r, err = Retime(ctx, tbl, family, old, ro)
			total.Deleted += r.Deleted
		} else if st.Retime {
			ro := o
			ro.Tenants, ro.WrittenUnder = st.Tenants, old
			ro.Job.Step = st.String()
			var r Report
			r, err = Retime(ctx, tbl, family, new, ro)
			total.add(r)
		} else {
			err = setGC(ctx, st.MaxAge)
		}
		endSpan(span, total, err)
		if err != nil {
			return total, fmt.Errorf("step %d (%s): %w", i+1, st, err)
		}
		if onStep != nil {
			onStep(i, st, true)
		}
	}
	return total, nil
}
