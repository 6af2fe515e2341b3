package main

import (
	"context"
	"fmt"
	"io"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/sink"
)

// setupOptions are the flags of worker setup.
type setupOptions struct {
	tableOptions
	setup sink.SetupOptions
}

func (o *setupOptions) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker setup", "worker setup: create the table and column family with the GC rule the strategy needs.", out)
	o.register(f)
	// Flags only: an environment variable shared by accident (a stray
	// FORCE=true) must not be able to change or wipe a table.
	f.Section("Setup")
	f.Bool(&o.setup.UpdateGCPolicy, "update-gc-policy", "", false, "replace the family's GC rule when it differs (a flag only: no environment variable)")
	f.Bool(&o.setup.Force, "force", "", false, "allow the one-second strategy's 1s max-age on a family that already holds cells, which deletes them (a flag only: no environment variable)")
	return f
}

// runSetup is worker setup: the table and family with the GC rule the
// tenants file's strategy needs.
func runSetup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := setupOptions{tableOptions: defaultTableOptions()}
	if err := parse(o.flags(stderr), args); err != nil {
		return err
	}
	opts := o.setup
	s, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg, target := s.cfg, o.table.Target()
	want := cfg.Policy.GCMaxAge()
	res, err := sink.Setup(ctx, s.ac, s.dc, target, want, opts)
	if err != nil {
		return fmt.Errorf("setup for %s: %w", describePolicy(cfg.Policy), err)
	}
	rule := sink.DescribeGC(bigtable.MaxAgePolicy(want))
	switch {
	case res.CreatedFamily:
		fmt.Fprintf(stdout, "created family %s (table created: %t) with GC rule %q for %s\n", target, res.CreatedTable, rule, describePolicy(cfg.Policy))
	case res.UpdatedRule:
		fmt.Fprintf(stdout, "changed GC rule of %s from %q to %q for %s\n", target, res.OldRule, rule, describePolicy(cfg.Policy))
	default:
		fmt.Fprintf(stdout, "family %s already has GC rule %q for %s; nothing to do\n", target, rule, describePolicy(cfg.Policy))
	}
	return setupLedger(ctx, s, o.table.ErasureTable(), stdout)
}

// setupLedger creates the erasure ledger's table and family. Its rule never
// changes with the tenants file (each record carries its own expiry as its
// timestamp), so a family found with another rule is reported for a person
// to look at, never replaced.
func setupLedger(ctx context.Context, s *session, table string, stdout io.Writer) error {
	target := sink.Target{Table: table, Family: erasure.Family}
	res, err := sink.Setup(ctx, s.ac, s.dc, target, erasure.GCMaxAge, sink.SetupOptions{})
	if err != nil {
		return fmt.Errorf("setup of the erasure ledger: %w", err)
	}
	rule := sink.DescribeGC(bigtable.MaxAgePolicy(erasure.GCMaxAge))
	if res.CreatedFamily {
		fmt.Fprintf(stdout, "created erasure ledger %s (table created: %t) with GC rule %q: each record expires at its own timestamp\n", target, res.CreatedTable, rule)
	} else {
		fmt.Fprintf(stdout, "erasure ledger %s already has GC rule %q; nothing to do\n", target, rule)
	}
	return nil
}
