package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/internal/waitfor"
	"github.com/cellttl/cellttl/internal/waitfor/btwait"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/retention/forget"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/tablemeta"
)

// exitNothingFound is forget's exit status when a user had no row and no
// erasure was recorded for it: most often a mistyped id.
const exitNothingFound = 3

// forgetCmd is worker forget: erase users' rows, and record the erasure in
// the ledger every worker obeys, so that no replay brings them back. Its
// flags: its own, and the worker's it needs (the topics whose retention a
// ledger record must outlive, how far ahead an event's time may lie, the
// workers' bound).
type forgetCmd struct {
	tableOptions
	topics      topicOptions
	bound       erasureBound
	tenant      string
	users       userList
	usersFrom   string
	before      string
	requestedBy string
	dryRun      bool
	allowEmpty  bool
	// allowVersion erases with a tenants file other than the workers'.
	allowVersion bool
	secondPass   time.Duration
	backups      time.Duration
	format       string
	// replication is how forget accounts for a replicated instance:
	// replicationWait or replicationSingle.
	replication string
	// pseudonymKey is the file of the key that names users in the log.
	pseudonymKey string
	wait         waitfor.Config
}

// userList is --user, which may be given several times.
type userList []string

func (u *userList) String() string     { return strings.Join(*u, ",") }
func (u *userList) Set(v string) error { *u = append(*u, v); return nil }

func newForgetCmd() *forgetCmd {
	return &forgetCmd{tableOptions: defaultTableOptions(), topics: defaultTopicOptions(), bound: defaultErasureBound()}
}

func (fo *forgetCmd) flags(out io.Writer) *envflag.FlagSet {
	f := envflag.New("worker forget", "worker forget: erase users of a tenant. It records each erasure in the erasure ledger (which every worker obeys: "+
		"no event of the user at or before erased_up_to is written again, from a backlog, a replay or a redrive), deletes the rows, waits for the workers' "+
		"bound, deletes again, and prints a receipt. It takes the worker's settings that decide the bound and the topics' retention, from the same flags and environment.\n"+
		"Exit status: 0 done, 1 an error, 2 bad flags (or a tenants file that is not the version the workers run: see --allow-tenants-version-mismatch), 3 a user had no row and nothing was recorded for it (see --allow-empty), 5 Bigtable or Kafka did not answer within --service-timeout (run it again).", out)
	f.Section("Erasure")
	f.String(&fo.tenant, "tenant", "", "", "the users' tenant (required)")
	f.Value(&fo.users, "user", "", "a user to erase, matched exactly as the row key holds it; may be given several times")
	f.String(&fo.usersFrom, "users-from", "", "", "a file of users to erase, one per line (blank lines and lines starting with # are skipped)")
	f.String(&fo.before, "before", "", "", "erase only events before: RFC 3339, or a duration ago such as 30d (default: every event, and erased_up_to is now + --max-clock-skew)")
	f.String(&fo.requestedBy, "requested-by", "", "", "who asked for the erasure, for the audit log and the ledger (required; a ticket or a name, never the user's id)")
	f.Bool(&fo.dryRun, "dry-run", "", false, "count the rows; record and delete nothing")
	f.Bool(&fo.allowEmpty, "allow-empty", "", false, "record the erasure of a user even when no row matches (a user whose events may still be on their way); exit 0")
	f.Bool(&fo.allowVersion, tablemeta.AllowVersionFlag[2:], "", false, "erase although this tenants file is not the version the workers recorded last: the ledger records' life then follows this file's longest TTL, not the workers' (a flag only: no environment variable)")
	f.Duration(&fo.secondPass, "second-pass-after", "", 0, fmt.Sprintf("wait between the two deletions (default: the workers' bound, %d × --erasure-refresh + --write-timeout)", erasure.StaleAfter))
	f.Duration(&fo.backups, "backup-retention", "BACKUP_RETENTION", 0, "the longest a backup of the table is kept, when backups are taken: listed on the receipt, and the ledger record lives at least as long")
	f.String(&fo.format, "format", "", "text", "output: text or json")
	f.String(&fo.replication, "replication", "", replicationWait, "how forget accounts for a replicated instance, where its writes reach the other clusters later: "+
		"wait (for consistency after recording and around the second pass; needs bigtable.tables.generateConsistencyToken and bigtable.tables.checkConsistency on both tables) or "+
		"single-cluster (forget and every worker route to one cluster; forget checks its own app profile when it may read it)")
	f.String(&fo.pseudonymKey, "log-pseudonym-key-file", envflag.Env, "", "file of the key (base64, at least 32 bytes) under which the audit log names each user, by an HMAC of tenant and id; without it the log names no user, only the tenant")
	fo.tableOptions.register(f)
	fo.topics.register(f)
	fo.bound.register(f)
	fo.wait.RegisterFlags(f, jobWait)
	return f
}

// run checks the request, reads how long the topics keep copies, and runs
// the erasure protocol (retention/forget); the receipt goes to stdout.
func (fo *forgetCmd) run(ctx context.Context, stdout, stderr io.Writer) error {
	input := fo.topics.conn.Input()
	users, err := fo.userIDs()
	if err != nil {
		return usageError(err)
	}
	if err := errors.Join(checkFormat(fo.format), checkReplication(fo.replication), fo.topics.validate()); err != nil {
		return usageError(err)
	}
	if fo.requestedBy == "" {
		return usageError(errors.New("--requested-by is required: the audit log names who asked"))
	}
	var names *retention.Pseudonyms
	if fo.pseudonymKey != "" {
		if names, err = retention.LoadPseudonyms(fo.pseudonymKey); err != nil {
			return usageError(err)
		}
	}
	now := wallClock().UTC().Truncate(time.Millisecond)
	var before time.Time
	if fo.before != "" {
		if before, err = parseWhen("--before", fo.before, now); err != nil {
			return usageError(err)
		}
		if before.After(now) || before.UnixMilli() <= 0 {
			// A mistyped year would erase the user's events to come.
			return usageError(fmt.Errorf("--before %s: must lie between 1970 and now", fo.before))
		}
	}
	s, log, done, err := fo.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	versionCheck, err := tablemeta.NewStore(s.dc, fo.table.Table).CheckTenantsVersion(ctx, s.cfg.Version, fo.allowVersion, log)
	if errors.Is(err, tablemeta.ErrVersionDiffers) {
		return usageError(err)
	}
	if err != nil {
		return err
	}
	facts, err := retention.Gather(ctx, fo.topics.sources(s, fo.table), wallClock())
	if err != nil {
		return fmt.Errorf("read how long the topics keep copies (the ledger record must live as long): %w", err)
	}
	repl, err := replicationOf(ctx, fo.replication, &fo.tableOptions, s, log)
	if err != nil {
		return err
	}
	ledger := erasure.NewStore(s.dc, fo.table.ErasureTable())
	ledger.SetClock(wallClock)
	rc, err := forget.Forget(ctx, btwait.Open(s.dc, fo.table.Table), ledger, forget.Request{
		Tenant: fo.tenant, Users: users, RequestedBy: fo.requestedBy, Operator: operator(),
		Now: now, Before: before, MaxClockSkew: fo.topics.maxClockSkew,
		DryRun: fo.dryRun, AllowEmpty: fo.allowEmpty,
		SecondPassAfter: fo.secondPass, Refresh: fo.bound.refresh, WriteTimeout: fo.bound.writer.AttemptTimeout,
		Table: fo.table.Target().String(), Facts: facts, LongestTTL: s.cfg.Policy.LongestTTL(fo.tenant),
		Backups: fo.backups, BackupsDecidedBy: "--backup-retention", Tracers: s.tracers,
		Pseudonyms: names, TenantsVersion: versionCheck, Replication: repl,
		EndOffsets: input.EndOffsets, TopicID: input.ID, LogStarts: input.LogStarts,
	}, log)
	if !rc.Begun() {
		return err
	}
	if perr := printReceipt(stdout, rc, fo.format); perr != nil && err == nil {
		err = perr
	}
	if err == nil && rc.NotFound > 0 {
		return &exitError{code: exitNothingFound, quiet: fo.format == "json",
			err: fmt.Errorf("%d of %d users had no row, and nothing was recorded for them: check the ids, or pass --allow-empty", rc.NotFound, len(users))}
	}
	return err
}

// userIDs checks --tenant and gathers the users of --user and
// --users-from (forget.Users).
func (fo *forgetCmd) userIDs() ([]string, error) {
	var errs []error
	if fo.tenant == "" {
		errs = append(errs, errors.New("--tenant is required"))
	} else if err := rowkey.ValidateID("--tenant", fo.tenant); err != nil {
		errs = append(errs, err)
	}
	users, err := forget.Users(fo.users, fo.usersFrom)
	return users, errors.Join(append(errs, err)...)
}

// printReceipt writes the receipt, as text or json.
func printReceipt(w io.Writer, rc forget.Receipt, format string) error {
	if format == "json" {
		return json.NewEncoder(w).Encode(rc)
	}
	rc.WriteText(w)
	return nil
}
