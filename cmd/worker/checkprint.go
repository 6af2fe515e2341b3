package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/tenants"
)

// printCheck writes worker check's findings as text: validity, the GC
// rule against the table's, and what an edit changes.
func printCheck(w io.Writer, rep *checkReport) {
	if !rep.Valid {
		fmt.Fprintf(w, "%s is not valid:\n", rep.File)
		for _, e := range rep.Errors {
			fmt.Fprintf(w, "  %s\n", e)
		}
		fmt.Fprintf(w, "\n%s\n", rep.Verdict)
		return
	}
	fmt.Fprintf(w, "%s is valid (version %s): strategy %s, default_ttl %s, %d tenants listed.\n", rep.File, rep.Version, rep.Strategy, rep.Default, rep.Tenants)
	if rep.Unlisted == string(tenants.UnlistedDeadLetter) {
		fmt.Fprintf(w, "Events of tenants it does not list are dead-lettered (unlisted_tenants: dead-letter, reason unlisted_tenant).\n")
	} else {
		fmt.Fprintf(w, "Events of tenants it does not list live default_ttl, %s (unlisted_tenants: default_ttl).\n", rep.Default)
	}
	for _, warn := range rep.Warnings {
		fmt.Fprintf(w, "Warning: %s.\n", warn)
	}
	if o := rep.OwnTTLs; o != nil {
		fmt.Fprintf(w, "With --ttl-from, an event's own TTL is clamped to its tenant's min_ttl..max_ttl (unlisted tenants: %s).", o.Unlisted)
		if len(o.Longer) == 0 {
			fmt.Fprintf(w, " No event outlives its tenant's TTL.\n")
		} else {
			fmt.Fprintf(w, " Events may outlive their tenant's TTL for: %s.\n", listSome(o.Longer))
		}
		if len(o.Shorter) > 0 {
			fmt.Fprintf(w, "Events may not be kept shorter than: %s.\n", listSome(o.Shorter))
		}
	}
	if rep.TableNote != "" {
		fmt.Fprintf(w, "\nTable: %s.\n", rep.TableNote)
	}
	if t := rep.Table; t != nil {
		switch {
		case t.Error != "":
			fmt.Fprintf(w, "\nTable %s: could not be read: %s\n", t.Target, t.Error)
		case !t.Exists:
			fmt.Fprintf(w, "\nTable %s: does not exist yet; `worker setup` creates it with GC rule %q.\n", t.Target, t.Wanted)
		case t.Matches:
			fmt.Fprintf(w, "\nTable %s: GC rule %q matches.\n", t.Target, t.Rule)
		default:
			fmt.Fprintf(w, "\nTable %s: GC rule %q, this file needs %q.\n", t.Target, t.Rule, t.Wanted)
		}
		if t.Granularity != "" {
			fmt.Fprintf(w, "Timestamp granularity %s: %s.\n", t.Granularity, t.Means)
		}
	}
	if a := rep.Against; a != nil {
		fmt.Fprintf(w, "\nCompared with %s (version %s):\n", a.File, a.Version)
		if len(a.Tenants) == 0 && !a.GCRuleChange && len(a.Notes) == 0 {
			fmt.Fprintln(w, "  no change to any TTL.")
		}
		for _, c := range a.Tenants {
			switch c.Kind() {
			case "added":
				fmt.Fprintf(w, "  %-16s added:   %s (was the default, %s)\n", c.Tenant, duration.Format(c.NewTTL), duration.Format(c.OldTTL))
			case "removed":
				fmt.Fprintf(w, "  %-16s removed: %s → the default, %s\n", c.Tenant, duration.Format(c.OldTTL), duration.Format(c.NewTTL))
			case "offboarded":
				fmt.Fprintf(w, "  %-16s offboarded: %s → none of its events written\n", c.Tenant, duration.Format(c.OldTTL))
			default:
				fmt.Fprintf(w, "  %-16s %s → %s", c.Tenant, duration.Format(c.OldTTL), duration.Format(c.NewTTL))
				if c.BoundsSaid() {
					fmt.Fprintf(w, ", own TTLs %s → %s", tenants.FormatBounds(c.OldBounds), tenants.FormatBounds(c.NewBounds))
				}
				fmt.Fprintln(w)
			}
		}
		for _, n := range a.Notes {
			fmt.Fprintf(w, "  Note: %s.\n", n)
		}
		if a.GCRuleChange {
			fmt.Fprintf(w, "  The family's GC rule must change, which moves the expiry of every cell already written.\n")
			if sh := a.ExpiryShift; sh != 0 {
				fmt.Fprintf(w, "  Cells already written expire %s %s: right for unlisted tenants, which follow the default, but the cells of", sh.Size(), sh.Direction())
				fmt.Fprintf(w, " every listed tenant (%s) then expire %s %s than their TTL promised, until they age out.\n", strings.Join(a.ShiftedTenants, ", "), sh.Size(), sh.Direction())
			} else {
				fmt.Fprintf(w, "  The strategy changes: cells written under the old one no longer mean what they did; plan a migration.\n")
			}
			if a.ReplicatedSteps {
				fmt.Fprintf(w, "  On a replicated table the GC max-age can grow by at most 90 days at a time: raise it in steps.\n")
			}
		}
	}
	fmt.Fprintf(w, "\n%s\n", rep.Verdict)
}
