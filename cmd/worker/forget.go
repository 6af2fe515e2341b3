package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/rowkey"
)

// exitNothingFound is forget's exit status when a user had no row and no
// erasure was recorded for it: most often a mistyped id.
const exitNothingFound = 3

// forgetOptions are forget's own flags; it takes the worker's too.
type forgetOptions struct {
	tenant      string
	users       userList
	usersFrom   string
	before      string
	requestedBy string
	dryRun      bool
	allowEmpty  bool
	secondPass  time.Duration
	backups     time.Duration
	format      string
}

// userList is --user, which may be given several times.
type userList []string

func (u *userList) String() string     { return strings.Join(*u, ",") }
func (u *userList) Set(v string) error { *u = append(*u, v); return nil }

// runForget is worker forget: erase users' rows, and record the erasure in
// the ledger every worker obeys, so that no replay brings them back.
func runForget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := defaultRunOptions()
	var fo forgetOptions
	f := envflag.New("worker forget", "worker forget: erase users of a tenant. It records each erasure in the erasure ledger (which every worker obeys: "+
		"no event of the user at or before erased_up_to is written again, from a backlog, a replay or a redrive), deletes the rows, waits for the workers' "+
		"bound, deletes again, and prints a receipt. It takes the worker's flags and environment (the bound and the topics' retention come from them).\n"+
		"Exit status: 0 done, 1 an error, 2 bad flags, 3 a user had no row and nothing was recorded for it (see --allow-empty).", stderr)
	o.register(f)
	f.String(&fo.tenant, "tenant", "", "", "the users' tenant (required)")
	f.Value(&fo.users, "user", "", "a user to erase, matched exactly as the row key holds it; may be given several times")
	f.String(&fo.usersFrom, "users-from", "", "", "a file of users to erase, one per line (blank lines and lines starting with # are skipped)")
	f.String(&fo.before, "before", "", "", "erase only events before: RFC 3339, or a duration ago such as 30d (default: every event, and erased_up_to is now + --max-clock-skew)")
	f.String(&fo.requestedBy, "requested-by", "", "", "who asked for the erasure, for the audit log and the ledger (required; a ticket or a name, never the user's id)")
	f.Bool(&fo.dryRun, "dry-run", "", false, "count the rows; record and delete nothing")
	f.Bool(&fo.allowEmpty, "allow-empty", "", false, "record the erasure of a user even when no row matches (a user whose events may still be on their way); exit 0")
	f.Duration(&fo.secondPass, "second-pass-after", "", 0, fmt.Sprintf("wait between the two deletions (default: the workers' bound, %d × --erasure-refresh + --write-timeout)", erasure.StaleAfter))
	f.Duration(&fo.backups, "backup-retention", "BACKUP_RETENTION", 0, "the longest a backup of the table is kept, when backups are taken: listed on the receipt, and the ledger record lives at least as long")
	f.String(&fo.format, "format", "", "text", "output: text or json")
	if err := parse(f, args); err != nil {
		return err
	}
	users, err := fo.userIDs()
	if err != nil {
		return usageError(err)
	}
	if err := errors.Join(checkFormat(fo.format), o.kafka.Validate(), o.dlq.Validate(o.kafka.Topic)); err != nil {
		return usageError(err)
	}
	if fo.requestedBy == "" {
		return usageError(errors.New("--requested-by is required: the audit log names who asked"))
	}
	if fo.secondPass == 0 {
		fo.secondPass = erasure.StaleAfter*o.erasureRefresh + o.writer.AttemptTimeout
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	// An event produced before now may carry a time up to --max-clock-skew
	// ahead of it (its occurred_at is kept up to that far past the record's
	// time): erased too, or a replay would bring it back as if the user
	// had come back.
	upTo := now.Add(o.pipe.Decoder.MaxClockSkew)
	if fo.before != "" {
		before, err := parseWhen("--before", fo.before, now)
		if err != nil {
			return usageError(err)
		}
		if before.After(now) || before.UnixMilli() <= 0 {
			// A mistyped year would erase the user's events to come.
			return usageError(fmt.Errorf("--before %s: must lie between 1970 and now", fo.before))
		}
		// --before is exclusive: the last millisecond wholly before it.
		upTo = before.Add(-time.Nanosecond).Truncate(time.Millisecond)
	}
	s, log, done, err := o.openJob(ctx, stderr)
	if err != nil {
		return err
	}
	defer done()
	facts, err := gatherFacts(ctx, &o, s.cfg, s)
	if err != nil {
		return fmt.Errorf("read how long the topics keep copies (the ledger record must live as long): %w", err)
	}
	e := &eraser{o: &o, fo: &fo, log: log, tbl: s.dc.Open(o.table.Table), store: erasure.NewStore(s.dc, o.table.ErasureTable()),
		rc: receipt{Tenant: fo.tenant, DryRun: fo.dryRun, RequestedBy: fo.requestedBy, ErasedUpTo: upTo, SecondPassAfter: fo.secondPass.String(),
			Table: o.table.Target().String(), Ledger: o.table.ErasureTable()}}
	e.rc.Unreachable, e.keep = unreachable(facts, fo.backups, s.cfg.Policy.LongestTTL(fo.tenant))
	// Who is erased already: a forget run again after it was interrupted
	// finds no row left, and must still record and make both passes.
	if e.ledger, _, err = e.store.LoadLedger(ctx, now); err != nil {
		return err
	}
	err = e.run(ctx, users, now)
	if perr := e.print(stdout); perr != nil && err == nil {
		err = perr
	}
	if err == nil && e.rc.NotFound > 0 {
		return &exitError{code: exitNothingFound, quiet: fo.format == "json",
			err: fmt.Errorf("%d of %d users had no row, and nothing was recorded for them: check the ids, or pass --allow-empty", e.rc.NotFound, len(users))}
	}
	return err
}

// userIDs gathers --user and --users-from, checked as row keys hold ids.
// Errors name the line, never the id: they reach logs.
func (fo *forgetOptions) userIDs() ([]string, error) {
	var errs []error
	if fo.tenant == "" {
		errs = append(errs, errors.New("--tenant is required"))
	} else if err := rowkey.ValidateID("--tenant", fo.tenant); err != nil {
		errs = append(errs, err)
	}
	users := append([]string(nil), fo.users...)
	for i, u := range fo.users {
		if p := rowkey.IDProblem(u); p != "" {
			errs = append(errs, fmt.Errorf("--user number %d: the user id %s", i+1, p))
		}
	}
	if fo.usersFrom != "" {
		fromFile, err := readUsers(fo.usersFrom)
		if err != nil {
			errs = append(errs, err)
		}
		users = append(users, fromFile...)
	}
	if len(users) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("--user or --users-from is required"))
	}
	seen := map[string]bool{}
	out := users[:0]
	for _, u := range users {
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out, errors.Join(errs...)
}

// readUsers reads a --users-from file: one id per line, exactly as given
// (only the line end is taken off: ids may hold spaces).
func readUsers(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--users-from: %w", err)
	}
	defer f.Close()
	var users []string
	var errs []error
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if n == 1 {
			line = strings.TrimPrefix(line, "\ufeff") // a byte order mark, not part of the id
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if p := rowkey.IDProblem(line); p != "" {
			errs = append(errs, fmt.Errorf("--users-from %s line %d: the user id %s", path, n, p))
			continue
		}
		users = append(users, line)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("--users-from %s: %w", path, err))
	}
	return users, errors.Join(errs...)
}

// receipt is what forget did, for the operator who asked: one object with
// --format json.
type receipt struct {
	Tenant      string    `json:"tenant"`
	RequestedBy string    `json:"requested_by"`
	DryRun      bool      `json:"dry_run"`
	ErasedUpTo  time.Time `json:"erased_up_to"`
	Table       string    `json:"table"`
	Ledger      string    `json:"ledger_table"`
	// SecondPassAfter is the wait between the passes.
	SecondPassAfter string        `json:"second_pass_after"`
	Users           []userReceipt `json:"users"`
	NotFound        int           `json:"not_found"`
	// Unreachable are the stores forget cannot erase from, and the
	// longest a copy of the users' events can remain in each.
	Unreachable []retention.StoreLife `json:"unreachable_stores"`
}

type userReceipt struct {
	User string `json:"user"` // as given
	// Rows deleted by each pass (counted, for a dry run).
	RowsPerPass []int64 `json:"rows_per_pass"`
	Bytes       int64   `json:"bytes"`
	// Record is the ledger record written, nil when none was (a dry run,
	// or no row and no --allow-empty).
	Record *erasure.Record `json:"ledger_record"`
}

// eraser runs one forget.
type eraser struct {
	o      *runOptions
	fo     *forgetOptions
	log    *slog.Logger
	tbl    *bigtable.Table
	store  *erasure.Store
	ledger *erasure.Ledger // as it stood when forget began
	keep   time.Duration   // how long a ledger record lives; <0 forever
	rc     receipt
}

// run records, deletes, waits and deletes again.
//
// The first pass deletes every row of the user (with --before, those
// before it), events stamped later than now included; the second, the rows
// up to erased_up_to, which a batch in flight may have written: not the
// user's events after it, written since by right.
func (e *eraser) run(ctx context.Context, users []string, now time.Time) error {
	var first time.Time // every row
	if e.fo.before != "" {
		first = e.rc.ErasedUpTo.Add(time.Millisecond)
	}
	second := e.rc.ErasedUpTo.Add(time.Millisecond)
	// Count first: a user with no row is most often a typo, and gets no
	// record unless --allow-empty, or erased before (a run again).
	for _, u := range users {
		rep, err := retention.Forget(ctx, e.tbl, retention.ForgetOptions{Tenant: e.fo.tenant, User: u, Before: first, DryRun: true})
		if err != nil {
			return err
		}
		ur := userReceipt{User: u, Bytes: rep.Bytes, RowsPerPass: []int64{rep.Rows}}
		_, erasedBefore := e.ledger.UpTo(e.fo.tenant, u)
		if rep.Rows == 0 && !e.fo.allowEmpty && !erasedBefore {
			e.rc.NotFound++
			ur.RowsPerPass = []int64{0}
		} else if !e.fo.dryRun {
			rec := erasure.Record{Tenant: e.fo.tenant, User: u, UpTo: e.rc.ErasedUpTo, RecordedAt: now, RequestedBy: e.fo.requestedBy}
			if e.keep >= 0 {
				rec.Expires = now.Add(e.keep)
			}
			// The record before the rows: a crash between the two leaves
			// the user erased to the workers, and running again deletes.
			if err := e.store.Put(ctx, rec); err != nil {
				return err
			}
			ur.Record, ur.RowsPerPass = &rec, nil
		}
		e.rc.Users = append(e.rc.Users, ur)
	}
	if e.fo.dryRun {
		e.audit()
		return nil
	}
	if err := e.pass(ctx, first); err != nil {
		return err
	}
	// Rows written by batches decided before the workers loaded the
	// records: gone once every worker is past its bound.
	if e.recorded() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted before the second pass (run the same forget again: the users are in the ledger): %w", ctx.Err())
		case <-time.After(e.fo.secondPass):
		}
		if err := e.pass(ctx, second); err != nil {
			return err
		}
	}
	e.audit()
	return nil
}

// pass deletes the rows of every recorded user.
func (e *eraser) pass(ctx context.Context, before time.Time) error {
	for i := range e.rc.Users {
		ur := &e.rc.Users[i]
		if ur.Record == nil {
			continue
		}
		rep, err := retention.Forget(ctx, e.tbl, retention.ForgetOptions{Tenant: e.fo.tenant, User: ur.User, Before: before})
		if err != nil {
			return err
		}
		ur.RowsPerPass = append(ur.RowsPerPass, rep.Rows)
	}
	return nil
}

func (e *eraser) recorded() int {
	n := 0
	for _, u := range e.rc.Users {
		if u.Record != nil {
			n++
		}
	}
	return n
}

// audit logs one line per user: who asked, a hash of the user id (the log
// outlives every TTL), what went.
func (e *eraser) audit() {
	for _, u := range e.rc.Users {
		e.log.Info("forget", "requested_by", e.fo.requestedBy, "operator", operator(), "user", retention.UserRef(e.fo.tenant, u.User),
			"erased_up_to", e.rc.ErasedUpTo, "rows_per_pass", u.RowsPerPass, "recorded", u.Record != nil, "dry_run", e.fo.dryRun,
			"table", e.rc.Table, "ledger", e.rc.Ledger)
	}
}

// print writes the receipt.
func (e *eraser) print(w io.Writer) error {
	if e.fo.format == "json" {
		return json.NewEncoder(w).Encode(e.rc)
	}
	rc := e.rc
	verb := "erased"
	if rc.DryRun {
		verb = "would erase (dry run)"
	}
	fmt.Fprintf(w, "%s users of tenant %s up to %s, requested by %s\n", verb, rc.Tenant, rc.ErasedUpTo.Format(time.RFC3339Nano), rc.RequestedBy)
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
	fmt.Fprintln(w, "not erased by this command (copies can remain up to):")
	for _, s := range rc.Unreachable {
		fmt.Fprintf(w, "  %s: %s (%s)\n", s.Store, s.Longest, s.DecidedBy)
	}
	return nil
}

// unreachable lists the stores forget cannot erase from, with the longest
// a copy can remain there from now, and returns how long a ledger record
// must live: as long as any of them, and as long as the tenant's TTL (past
// it, every event the record covers has expired, and is never written
// whatever its source). Forever (-1) when a store keeps copies forever or cannot be
// read.
func unreachable(f retention.Facts, backups, longestTTL time.Duration) ([]retention.StoreLife, time.Duration) {
	keep := longestTTL
	var out []retention.StoreLife
	add := func(store string, k retention.TopicKeep) {
		line := retention.StoreLife{Store: store + " " + k.Topic, DecidedBy: k.Settings}
		switch {
		case k.Missing:
			line.Longest, line.DecidedBy = "0", "the topic does not exist"
		case k.Unknown != "":
			line.Longest, line.DecidedBy, keep = "unknown", k.Unknown, retention.Forever
		case k.Keeps == retention.Forever:
			line.Longest, keep = "forever", retention.Forever
		default:
			line.Longest = duration.Format(k.Keeps)
			if keep >= 0 {
				keep = max(keep, k.Keeps)
			}
		}
		out = append(out, line)
	}
	add("input topic", f.Input)
	for _, d := range f.DeadLetters {
		add("dead-letter topic", d)
	}
	if backups > 0 {
		out = append(out, retention.StoreLife{Store: "backups of the table", Longest: duration.Format(backups), DecidedBy: "--backup-retention"})
		if keep >= 0 {
			keep = max(keep, backups)
		}
	}
	return out, keep
}

// operator names who runs the command, for the audit trail.
func operator() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}
