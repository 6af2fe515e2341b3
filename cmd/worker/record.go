package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/tablemeta"
)

// The event table's record of how its rows are written (package
// tablemeta): the commands' side of it.

// setupRecord adds the record's family to the event table (worker setup).
func setupRecord(ctx context.Context, ac *bigtable.AdminClient, table string, stdout io.Writer) error {
	created, err := tablemeta.Setup(ctx, ac, table)
	if err != nil {
		return fmt.Errorf("setup of the workers' record: %w", err)
	}
	if created {
		fmt.Fprintf(stdout, "created family %s, where the workers record the --ttl-from and tenants file version they run (GC rule: the newest cell of each column)\n", tablemeta.Target(table))
	} else {
		fmt.Fprintf(stdout, "family %s (the workers' record) already exists; nothing to do\n", tablemeta.Target(table))
	}
	return nil
}

// claimTTLFrom checks the command's --ttl-from against the setting the
// table's rows are written with, and records it when none is (the first
// worker), or when change (--ttl-from-change) says so; a dry run records
// nothing. A different setting without change is refused: a replay or a
// redrive under it would write longer-lived versions of rows already
// written.
func claimTTLFrom(ctx context.Context, dc *bigtable.Client, table, ttlFrom string, change, dryRun bool, by string, log *slog.Logger) error {
	host, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	set, recorded, err := tablemeta.NewStore(dc, table).ClaimTTLFrom(ctx, tablemeta.Claim{TTLFrom: ttlFrom, Change: change, By: by, Host: host, Now: time.Now(), DryRun: dryRun})
	var mm *tablemeta.MismatchError
	switch {
	case errors.As(err, &mm):
		return fmt.Errorf("refusing to start: %w", err)
	case err != nil:
		return err
	case dryRun && set.Since.IsZero():
		log.Info("--ttl-from not recorded: a dry run", "ttl_from", set.Describe())
	case recorded && !set.Change:
		log.Info("recorded the --ttl-from setting the table's rows are written with: the first writer", "ttl_from", set.Describe(), "table", table)
	case recorded:
		log.Warn("recorded a new --ttl-from setting for the table: rows written before keep the setting they were written with (worker audit reports a row that outlives its own TTL); remove "+tablemeta.ChangeFlag+" once the change has rolled out",
			"ttl_from", set.Describe(), "table", table)
	case change:
		log.Warn(tablemeta.ChangeFlag+" given, and the table's setting is already this one: remove the flag, which would let the next change through unchecked", "ttl_from", set.Describe())
	default:
		log.Info("--ttl-from agrees with the table's record", "ttl_from", set.Describe(), "since", set.Since, "recorded_by", set.By)
	}
	return nil
}

// versionFlag lets worker forget erase with a tenants file other than the
// workers'.
const versionFlag = "--allow-tenants-version-mismatch"

// checkTenantsVersion checks forget's tenants file against the version
// the workers recorded last (tablemeta.CheckVersion), and refuses another
// unless allow: forget sets how long a ledger record lives from the
// tenant's longest TTL in its own file. Nothing recorded (workers of an
// earlier release) is said, not refused: an erasure must not wait for an
// upgrade.
func checkTenantsVersion(ctx context.Context, dc *bigtable.Client, table, version string, allow bool, log *slog.Logger) (*tablemeta.VersionCheck, error) {
	rec, err := tablemeta.NewStore(dc, table).Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the tenants file version the workers run: %w", err)
	}
	c := tablemeta.CheckVersion(rec, version, time.Now())
	switch {
	case c.Outcome == tablemeta.Differs && !allow:
		return nil, usageError(fmt.Errorf("refusing to erase: %s. forget sets how long each ledger record lives from the tenant's longest TTL in its own tenants file: "+
			"from a file other than the workers' (a TTL lengthened since), a record can expire while copies it must suppress can still be written. "+
			"Run forget with the workers' tenants file, or pass %s (a flag only)", c, versionFlag))
	case c.Outcome == tablemeta.Differs:
		c.Overridden = true
		log.Warn("erasing with a tenants file other than the workers' ("+versionFlag+")", "check", c.String())
	case c.Outcome == tablemeta.NotRecorded:
		log.Warn("tenants file not checked against the workers'", "check", c.String())
	}
	return &c, nil
}
