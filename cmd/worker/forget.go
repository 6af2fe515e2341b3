package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"time"

	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/retention"
)

// runForget is worker forget: erase one user's rows now.
func runForget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := defaultTableOptions()
	var fo retention.ForgetOptions
	var before, format string
	f := envflag.New("worker forget", "worker forget: delete a user's rows now, expired or not, and log who asked.\n"+
		"Exit status: 0 done, 2 bad flags, 1 other errors.", stderr)
	o.register(f)
	f.String(&fo.Tenant, "tenant", "", "", "the user's tenant (required)")
	f.String(&fo.User, "user", "", "", "the user whose rows to delete (required)")
	f.String(&before, "before", "", "", "only events before: RFC 3339, or a duration ago such as 30d")
	f.Bool(&fo.DryRun, "dry-run", "", false, "count the rows and delete nothing")
	f.String(&format, "format", "", "text", "output: text or json")
	if err := parse(f, args); err != nil {
		return err
	}
	if fo.Tenant == "" || fo.User == "" {
		return usageError(errors.New("--tenant and --user are required"))
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	var err error
	if fo.Before, err = parseWhen("--before", before, time.Now()); err != nil {
		return usageError(err)
	}
	s, log, done, err := o.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	rep, err := retention.Forget(ctx, s.dc.Open(o.table.Table), fo)
	if err != nil {
		return err
	}
	// The audit trail: who asked, what went, when. The log outlives every
	// TTL, so it names the user by a hash of the id (the receipt on stdout
	// says the id to the operator who gave it).
	log.Info("forget", "operator", operator(), "user", retention.UserRef(fo.Tenant, fo.User), "before", before, "dry_run", fo.DryRun,
		"rows", rep.Rows, "bytes", rep.Bytes, "table", o.table.Target().String())
	if format == "json" {
		return json.NewEncoder(stdout).Encode(struct {
			DryRun bool   `json:"dry_run"`
			Tenant string `json:"tenant"`
			User   string `json:"user"`
			retention.ForgetReport
		}{fo.DryRun, fo.Tenant, fo.User, rep})
	}
	verb := "deleted"
	if fo.DryRun {
		verb = "would delete"
	}
	fmt.Fprintf(stdout, "%s %d rows (%d bytes) of user %s of tenant %s\n", verb, rep.Rows, rep.Bytes, fo.User, fo.Tenant)
	return nil
}

// operator names who runs the command, for the audit trail.
func operator() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}
