package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// Exit codes of worker check.
const (
	checkSafe      = 0 // valid, and a running worker can load it
	checkNeedsGC   = 1 // valid, but needs setup --update-gc-policy and a restart
	checkInvalid   = 2 // not a valid tenants file
	checkUnchecked = 3 // valid, but the table could not be read
)

// checkReport is the JSON form of worker check's findings.
type checkReport struct {
	File     string      `json:"file"`
	Valid    bool        `json:"valid"`
	Errors   []string    `json:"errors,omitempty"`
	Version  string      `json:"version,omitempty"`
	Strategy string      `json:"strategy,omitempty"`
	Default  string      `json:"default_ttl,omitempty"`
	Tenants  int         `json:"tenants"`
	Table    *tableCheck `json:"table,omitempty"`
	Against  *editPlan   `json:"against,omitempty"`
	Exit     int         `json:"exit"`
	Verdict  string      `json:"verdict"`
}

type tableCheck struct {
	Target  string `json:"target"`
	Exists  bool   `json:"exists"`
	Rule    string `json:"rule,omitempty"`
	Wanted  string `json:"wanted"`
	Matches bool   `json:"matches"`
	Error   string `json:"error,omitempty"`
}

type editPlan struct {
	File            string         `json:"file"`
	Version         string         `json:"version"`
	Tenants         []tenantChange `json:"tenants"`
	GCRuleChange    bool           `json:"gc_rule_change"`
	ExpiryShift     string         `json:"expiry_shift,omitempty"`
	ShiftedTenants  []string       `json:"shifted_tenants,omitempty"`
	ReplicatedSteps bool           `json:"replicated_steps"`
	Notes           []string       `json:"notes"`
}

type tenantChange struct {
	Tenant string `json:"tenant"`
	Change string `json:"change"` // changed, added, removed
	Old    string `json:"old_ttl"`
	New    string `json:"new_ttl"`
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var against, format string
	var offline bool
	f := newFlags("worker check", "worker check: validate a tenants file and explain what loading it would change.\n"+
		"Exit status: 0 valid and safe to reload, 1 valid but needs `worker setup --update-gc-policy` and a restart, 2 invalid, 3 valid but the table could not be read.", stderr)
	c.register(f)
	f.String(&against, "against", "TENANTS_AGAINST", "", "the previous tenants file, to list what the edit changes")
	f.String(&format, "format", "CHECK_FORMAT", "text", "output: text or json")
	f.Bool(&offline, "offline", "CHECK_OFFLINE", false, "do not read the table's GC rule")
	if err := parse(f, args); err != nil {
		return err
	}
	if format != "text" && format != "json" {
		return &exitError{code: 2, err: fmt.Errorf("--format %q: want text or json", format)}
	}
	rep := checkReport{File: c.tenantsFile}
	cfg, err := tenants.Load(c.tenantsFile)
	switch {
	case err != nil:
		rep.Errors = strings.Split(err.Error(), "\n")
	default:
		rep.Valid, rep.Version = true, cfg.Version
		rep.Strategy, rep.Default, rep.Tenants = cfg.Policy.Strategy.String(), duration.Format(cfg.Policy.DefaultTTL), len(cfg.Policy.Tenants)
		if against != "" {
			old, err := tenants.Load(against)
			if err != nil {
				return &exitError{code: checkInvalid, err: fmt.Errorf("--against: %w", err)}
			}
			rep.Against = planOf(against, old, cfg)
		}
		if !offline {
			if err := c.resolve(); err != nil {
				return err
			}
			rep.Table = checkTable(ctx, &c, cfg)
		}
	}
	rep.Exit, rep.Verdict = verdict(&rep)
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printCheck(stdout, &rep)
	}
	if rep.Exit != checkSafe {
		return &exitError{code: rep.Exit, err: errors.New(rep.Verdict), quiet: true}
	}
	return nil
}

func checkTable(ctx context.Context, c *common, cfg *tenants.Config) *tableCheck {
	want := cfg.Policy.GCMaxAge()
	tc := &tableCheck{Target: c.target().String(), Wanted: sink.DescribeGC(bigtable.MaxAgePolicy(want))}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	dc, ac, err := c.bigtableClients(ctx)
	if err != nil {
		tc.Error = err.Error()
		return tc
	}
	defer dc.Close()
	defer ac.Close()
	rule, ok, err := sink.FamilyGC(ctx, ac, c.target())
	if err != nil {
		tc.Error = err.Error()
		return tc
	}
	tc.Exists = ok
	if ok {
		tc.Rule = sink.DescribeGC(rule)
		d, isMaxAge := sink.MaxAge(rule)
		tc.Matches = isMaxAge && d == want
	}
	return tc
}

func planOf(path string, old, cfg *tenants.Config) *editPlan {
	p := tenants.Compare(old.Policy, cfg.Policy)
	ep := &editPlan{File: path, Version: old.Version, GCRuleChange: p.GCRuleChange, ReplicatedSteps: p.ReplicatedSteps, Tenants: []tenantChange{}}
	for _, tc := range p.Tenants {
		kind := "changed"
		switch {
		case !tc.OldListed:
			kind = "added"
		case !tc.NewListed:
			kind = "removed"
		}
		ep.Tenants = append(ep.Tenants, tenantChange{Tenant: tc.Tenant, Change: kind, Old: duration.Format(tc.OldTTL), New: duration.Format(tc.NewTTL)})
	}
	if len(p.Tenants) > 0 {
		ep.Notes = append(ep.Notes, "per-tenant edits apply to events processed after the reload; cells already written keep the expiry they were written with")
	}
	if old.Policy.RecordRealTimestamp != cfg.Policy.RecordRealTimestamp {
		ep.Notes = append(ep.Notes, fmt.Sprintf("record_real_timestamp %t → %t applies to events processed after the reload", old.Policy.RecordRealTimestamp, cfg.Policy.RecordRealTimestamp))
	}
	if p.GCRuleChange {
		if p.ExpiryShift != 0 {
			ep.ExpiryShift = signed(p.ExpiryShift)
			for id := range old.Policy.Tenants {
				ep.ShiftedTenants = append(ep.ShiftedTenants, id)
			}
			sort.Strings(ep.ShiftedTenants)
		}
	}
	if ep.Notes == nil {
		ep.Notes = []string{}
	}
	return ep
}

func signed(d time.Duration) string {
	if d < 0 {
		return "-" + duration.Format(-d)
	}
	return "+" + duration.Format(d)
}

func verdict(rep *checkReport) (int, string) {
	switch {
	case !rep.Valid:
		return checkInvalid, "invalid: the worker refuses this file (at start-up, and keeps the last good config when it is edited in)"
	case rep.Against != nil && rep.Against.GCRuleChange,
		rep.Table != nil && rep.Table.Error == "" && !rep.Table.Matches:
		return checkNeedsGC, fmt.Sprintf("needs the family's GC rule changed: run `worker setup --update-gc-policy --tenants %s`, then restart the workers (a running worker refuses this edit)", rep.File)
	case rep.Table != nil && rep.Table.Error != "":
		return checkUnchecked, "valid, but the table's GC rule could not be read: " + rep.Table.Error
	}
	return checkSafe, "valid and safe: a running worker loads it once it has read it unchanged for --tenants-reload-interval, or at once on SIGHUP"
}

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
	}
	if a := rep.Against; a != nil {
		fmt.Fprintf(w, "\nCompared with %s (version %s):\n", a.File, a.Version)
		if len(a.Tenants) == 0 && !a.GCRuleChange && len(a.Notes) == 0 {
			fmt.Fprintln(w, "  no change to any TTL.")
		}
		for _, c := range a.Tenants {
			switch c.Change {
			case "added":
				fmt.Fprintf(w, "  %-16s added:   %s (was the default, %s)\n", c.Tenant, c.New, c.Old)
			case "removed":
				fmt.Fprintf(w, "  %-16s removed: %s → the default, %s\n", c.Tenant, c.Old, c.New)
			default:
				fmt.Fprintf(w, "  %-16s %s → %s\n", c.Tenant, c.Old, c.New)
			}
		}
		for _, n := range a.Notes {
			fmt.Fprintf(w, "  Note: %s.\n", n)
		}
		if a.GCRuleChange {
			fmt.Fprintf(w, "  The family's GC rule must change, which moves the expiry of every cell already written.\n")
			if a.ExpiryShift != "" {
				fmt.Fprintf(w, "  Cells already written expire %s %s: right for unlisted tenants, which follow the default, but the cells of", strings.TrimLeft(a.ExpiryShift, "+-"), laterOrEarlier(a.ExpiryShift))
				fmt.Fprintf(w, " every listed tenant (%s) then expire %s %s than their TTL promised, until they age out.\n", strings.Join(a.ShiftedTenants, ", "), strings.TrimLeft(a.ExpiryShift, "+-"), laterOrEarlier(a.ExpiryShift))
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

func laterOrEarlier(shift string) string {
	if strings.HasPrefix(shift, "-") {
		return "earlier"
	}
	return "later"
}
