package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/waitfor"
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
	File     string   `json:"file"`
	Valid    bool     `json:"valid"`
	Errors   []string `json:"errors,omitempty"`
	Version  string   `json:"version,omitempty"`
	Strategy string   `json:"strategy,omitempty"`
	Default  string   `json:"default_ttl,omitempty"`
	Tenants  int      `json:"tenants"`
	// Unlisted is the unlisted_tenants policy.
	Unlisted string `json:"unlisted_tenants,omitempty"`
	// OwnTTLs says what an event's own TTL (--ttl-from) is clamped to.
	OwnTTLs *ownTTLs    `json:"own_ttls,omitempty"`
	Table   *tableCheck `json:"table,omitempty"`
	// TableNote says why the table was not read, when it was not.
	TableNote string      `json:"table_note,omitempty"`
	Against   *comparison `json:"against,omitempty"`
	// Warnings are what is valid but soon will not be (a file near a
	// ConfigMap's size).
	Warnings []string `json:"warnings,omitempty"`
	Exit     int      `json:"exit"`
	Verdict  string   `json:"verdict"`
}

// ownTTLs are the bounds of the TTLs events may give themselves.
type ownTTLs struct {
	// Unlisted are the bounds of unlisted tenants (the top-level min_ttl
	// and max_ttl around default_ttl).
	Unlisted string `json:"unlisted"`
	// Longer are the tenants whose events may outlive the tenant's TTL
	// (max_ttl above ttl), Shorter those with a min_ttl above 0, each
	// with its bounds, in id order.
	Longer  []string `json:"longer"`
	Shorter []string `json:"min_above_zero"`
}

func ownTTLsOf(p *expiry.Policy) *ownTTLs {
	o := &ownTTLs{Unlisted: tenants.FormatBounds(p.DefaultBounds), Longer: []string{}, Shorter: []string{}}
	for _, id := range slices.Sorted(maps.Keys(p.Tenants)) {
		b, _ := p.TenantBounds(id)
		if b.Max > p.Tenants[id] {
			o.Longer = append(o.Longer, id+" "+duration.Format(p.Tenants[id])+" up to "+duration.Format(b.Max))
		}
		if b.Min > 0 {
			o.Shorter = append(o.Shorter, id+" at least "+duration.Format(b.Min))
		}
	}
	return o
}

// listSome lists the first ten items of a list that can be as long as the
// tenants file, and how many more (the JSON form has them all).
func listSome(items []string) string {
	const most = 10
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:most], ", "), len(items)-most)
}

// comparison is what --against found: the plan of the edit, and notes for
// the operator.
type comparison struct {
	File    string `json:"file"`
	Version string `json:"version"`
	tenants.Plan
	Notes []string `json:"notes"`
}

// checkCmd is worker check: validate a tenants file, and explain what
// loading it changes, against the table's GC rule and an earlier file.
type checkCmd struct {
	tableOptions
	against, format string
	offline         bool
	wait            waitfor.Config
}

func (o *checkCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker check", "worker check: validate a tenants file and explain what loading it would change.\n"+
		"Exit status: 0 valid and safe to reload, 1 valid but needs `worker setup --update-gc-policy` and a restart, 2 invalid, 3 valid but the table could not be read (or did not answer within --service-timeout).", out)
	o.register(f)
	o.wait.RegisterFlags(f, checkWait)
	f.Section("Check")
	f.String(&o.against, "against", "TENANTS_AGAINST", "", "the previous tenants file, to list what the edit changes")
	f.String(&o.format, "format", "CHECK_FORMAT", "text", "output: text or json")
	f.Bool(&o.offline, "offline", "CHECK_OFFLINE", false, "do not read the table's GC rule")
	return f
}

// run checks the file and prints the findings; the exit status is the
// verdict.
func (o *checkCmd) run(ctx context.Context, stdout, _ io.Writer) error {
	against, format, offline := o.against, o.format, o.offline
	if err := checkFormat(format); err != nil {
		return err
	}
	rep := checkReport{File: o.tenants.Path}
	cfg, err := tenants.Load(o.tenants.Path)
	switch {
	case err != nil:
		rep.Errors = strings.Split(err.Error(), "\n")
	default:
		rep.Valid, rep.Version = true, cfg.Version
		rep.Strategy, rep.Default, rep.Tenants = cfg.Policy.Strategy.String(), duration.Format(cfg.Policy.DefaultTTL), len(cfg.Policy.Tenants)
		rep.Unlisted = string(cfg.Unlisted)
		rep.OwnTTLs = ownTTLsOf(cfg.Policy)
		rep.Warnings = tenants.SizeWarnings(o.tenants.Path)
		if against != "" {
			old, err := tenants.Load(against)
			if err != nil {
				return &exitError{code: checkInvalid, err: fmt.Errorf("--against: %w", err)}
			}
			rep.Against = compare(against, old, cfg)
		}
		switch {
		case offline:
			rep.TableNote = "not checked (--offline)"
		case !o.table.Configured():
			// Checking a file needs no Bigtable: compare with the table
			// only when one is named.
			rep.TableNote = "not checked: no Bigtable given (--project and --instance, or BIGTABLE_EMULATOR_HOST, to compare its GC rule)"
		default:
			if err := o.resolve(); err != nil {
				return err
			}
			rep.Table = checkTable(ctx, o.table, cfg)
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

// compare is --against: the plan of replacing old by cfg, and its notes.
func compare(path string, old, cfg *tenants.Config) *comparison {
	plan := tenants.CompareConfigs(old, cfg)
	notes := append(plan.Notes(old.Unlisted, cfg.Unlisted), tenants.Leaving(old, cfg)...)
	if old.WriteRate != cfg.WriteRate {
		notes = append(notes, fmt.Sprintf("max_write_rate %s → %s per worker applies at the next write after the reload (the group's share is the number of workers times the cap)", writeRate(old.WriteRate), writeRate(cfg.WriteRate)))
	}
	return &comparison{File: path, Version: old.Version, Plan: plan, Notes: notes}
}

func writeRate(rowsPerSecond float64) string {
	if rowsPerSecond == 0 {
		return "no cap"
	}
	return fmt.Sprintf("%.0f rows/s", rowsPerSecond)
}

func verdict(rep *checkReport) (int, string) {
	switch {
	case !rep.Valid:
		return checkInvalid, "invalid: the worker refuses this file (at start-up, and keeps the last good config when it is edited in)"
	case rep.Table != nil && rep.Table.Record != "":
		return checkNeedsGC, "a worker refuses to start on the table: " + rep.Table.Record
	case rep.Against != nil && rep.Against.GCRuleChange,
		rep.Table != nil && rep.Table.Error == "" && rep.Table.Exists && !rep.Table.Matches:
		return checkNeedsGC, fmt.Sprintf("needs the family's GC rule changed: run `worker setup --update-gc-policy --tenants %s`, then restart the workers (a running worker refuses this edit)", rep.File)
	case rep.Table != nil && rep.Table.Error != "":
		return checkUnchecked, "valid, but the table's GC rule could not be read: " + rep.Table.Error
	}
	return checkSafe, "valid and safe: a running worker loads it once it has read it unchanged for --tenants-reload-interval, or at once on SIGHUP"
}
