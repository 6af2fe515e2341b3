package forget

import (
	"fmt"
	"io"
	"time"

	"github.com/cellttl/cellttl/tablemeta"
)

// WriteText writes the receipt for the operator who asked, in words.
func (rc Receipt) WriteText(w io.Writer) {
	verb := "erased"
	if rc.DryRun {
		verb = "would erase (dry run)"
	}
	fmt.Fprintf(w, "%s users of tenant %s up to %s, requested by %s\n", verb, rc.Tenant, rc.ErasedUpTo.Format(time.RFC3339Nano), rc.RequestedBy)
	fmt.Fprintf(w, "covers: %s\n", rc.Bound)
	for _, u := range rc.Users {
		switch {
		case u.Record != nil:
			exp := "never"
			if !u.Record.Expires.IsZero() {
				exp = u.Record.Expires.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "  %s: rows deleted per pass %v; ledger record in %s expires %s\n", u.User, u.RowsPerPass, rc.Ledger, exp)
		case rc.DryRun:
			fmt.Fprintf(w, "  %s: %d rows\n", u.User, u.RowsPerPass[0])
		default:
			fmt.Fprintf(w, "  %s: no row, nothing recorded\n", u.User)
		}
	}
	if !rc.DryRun {
		fmt.Fprintf(w, "second pass after %s\n", rc.SecondPassAfter)
	}
	if c := rc.TenantsVersion; c != nil {
		fmt.Fprintf(w, "checked: %s", c)
		if c.Overridden {
			fmt.Fprintf(w, " (erased anyway: %s)", tablemeta.AllowVersionFlag)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "replication: %s\n", rc.Replication.Summary)
	if r := rc.Retired; r != nil {
		fmt.Fprintf(w, "erasures kept forever for the input topic: %d retired, %d still in force (one retires once the topic's log start offsets pass its mark; it then expires with its other copies)\n",
			r.Records, r.Kept)
		for _, u := range r.Unread {
			fmt.Fprintf(w, "  log start offsets unread, its records stay in force: %s\n", u)
		}
	}
	fmt.Fprintln(w, "not erased by this command (copies can remain up to):")
	for _, s := range rc.Unreachable {
		fmt.Fprintf(w, "  %s: %s (%s)\n", s.Store, s.Longest, s.DecidedBy)
	}
}
