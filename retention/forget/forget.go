// Package forget is the erasure protocol that `worker forget` runs: count
// each user's rows, record the erasure in the ledger before any row goes,
// delete, wait for every worker to be past its bound, delete again, and
// say which stores it could not erase from and how long the ledger record
// must therefore live.
//
// It sits under retention, whose statement, row deletion and record life
// it uses: package erasure is the ledger alone (its records, its table, the
// watch the workers hold), which the hot path imports.
package forget

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/tablemeta"
)

// Request says whose events to erase, and what the protocol needs to know
// of the workers and of the stores it cannot reach.
type Request struct {
	Tenant string
	// Users are the ids, as row keys hold them, each once.
	Users []string
	// RequestedBy is who asked (the audit log and the ledger); Operator,
	// who runs the command (the audit log).
	RequestedBy, Operator string
	// Now is when forget began, to the millisecond.
	Now time.Time
	// Before, when set, erases only the events before it; zero erases
	// every event, up to Now + MaxClockSkew.
	Before       time.Time
	MaxClockSkew time.Duration
	// EndOffsets reads the input topic's end offsets, by partition, after
	// the erasures are recorded: the mark that erases whatever was
	// appended before them, whatever time it carries (erasure.Mark). Nil
	// erases by time alone, as does Before.
	EndOffsets func(context.Context) (topic string, ends []int64, err error)
	// TopicID reads a topic's id (its incarnation), "" when the broker
	// gives none: read before and after the end offsets, it goes into the
	// mark. Nil marks without an id.
	TopicID func(ctx context.Context, topic string) (string, error)
	// LogStarts reads a topic's log start offsets, by partition: forget
	// retires the records of earlier erasures whose marks cover nothing
	// the topic still holds (erasure.Store.Retire). Nil retires nothing.
	LogStarts erasure.LogStarts
	// DryRun counts the rows; it records and deletes nothing.
	DryRun bool
	// AllowEmpty records the erasure of a user even when no row matches.
	AllowEmpty bool
	// SecondPassAfter is the wait between the two deletions; zero waits
	// the workers' bound, erasure.Bound(Refresh, WriteTimeout).
	SecondPassAfter, Refresh, WriteTimeout time.Duration
	// Table names the events' table for the receipt.
	Table string
	// Facts say how long the topics keep copies; LongestTTL is the
	// tenant's longest TTL. Backups, when positive, is how long a backup
	// of the table is kept, set by BackupsDecidedBy.
	Facts            retention.Facts
	LongestTTL       time.Duration
	Backups          time.Duration
	BackupsDecidedBy string
	// Tracers records the spans of the deletions (nil: none).
	Tracers trace.TracerProvider
	// Pseudonyms name each user in the audit log and errors (nil: the
	// log names no user, only the tenant).
	Pseudonyms *retention.Pseudonyms
	// TenantsVersion is the check of the tenants file LongestTTL comes
	// from against the workers' (nil: not made), for the receipt.
	TenantsVersion *tablemeta.VersionCheck
	// Replication says how forget accounts for a replicated instance.
	Replication Replication
}

// Receipt is what forget did, for the operator who asked.
type Receipt struct {
	Tenant      string    `json:"tenant"`
	RequestedBy string    `json:"requested_by"`
	DryRun      bool      `json:"dry_run"`
	ErasedUpTo  time.Time `json:"erased_up_to"`
	// ErasedBelow is the mark of the records (nil: by time alone), and
	// Bound says in a sentence what the erasure covers.
	ErasedBelow *erasure.Mark `json:"erased_below,omitempty"`
	Bound       string        `json:"bound"`
	Table       string        `json:"table"`
	Ledger      string        `json:"ledger_table"`
	// SecondPassAfter is the wait between the passes.
	SecondPassAfter string        `json:"second_pass_after"`
	Users           []UserReceipt `json:"users"`
	// NotFound counts the users with no row and nothing recorded.
	NotFound int `json:"not_found"`
	// Unreachable are the stores forget cannot erase from, and the
	// longest a copy of the users' events can remain in each.
	Unreachable []retention.StoreLife `json:"unreachable_stores"`
	// TenantsVersion says what was checked of the tenants file that set
	// the records' life.
	TenantsVersion *tablemeta.VersionCheck `json:"tenants_version,omitempty"`
	// Replication says whether forget waited for its writes to reach
	// every cluster of the instance, or why it did not.
	Replication ReplicationReceipt `json:"replication"`
	// Retired is what forget did to the records of earlier erasures that
	// never expired (nil: nothing tried, as in a dry run).
	Retired *erasure.Retired `json:"retired,omitempty"`

	begun bool
}

// Begun reports whether forget got as far as counting the users: the
// receipt then says what it did, even when Forget returns an error.
func (rc Receipt) Begun() bool { return rc.begun }

// UserReceipt is what forget did for one user.
type UserReceipt struct {
	User string `json:"user"` // as given
	// Rows deleted by each pass (counted, for a dry run).
	RowsPerPass []int64 `json:"rows_per_pass"`
	Bytes       int64   `json:"bytes"`
	// Record is the ledger record written, nil when none was (a dry run,
	// or no row and no AllowEmpty).
	Record *erasure.Erasure `json:"ledger_record"`
}

// ErasedUpTo is the erased_up_to of a request. Without Before, an event
// produced before now may carry a time up to maxClockSkew ahead of it (its
// occurred_at is kept up to that far past the record's time): erased too,
// or a replay would bring it back as if the user had come back. Before is
// exclusive: the last millisecond wholly before it.
func ErasedUpTo(now, before time.Time, maxClockSkew time.Duration) time.Time {
	if before.IsZero() {
		return now.Add(maxClockSkew)
	}
	return before.Add(-time.Nanosecond).Truncate(time.Millisecond)
}

// Forget erases r's users from rows, recording each erasure in ledger
// first, and logs one audit line per user. The receipt says what was done
// even with an error, once it has begun (Receipt.Begun).
//
// The first pass deletes every row of the user (with Before, those before
// it), events stamped later than now included; the second, the rows a
// batch in flight may have written meanwhile. Without Before that is every
// row again: an event appended before the erasure may carry a time past
// erased_up_to, and its row does not say where its record was. So an event
// of the user appended after the erasure and written between the passes
// (at most the workers' bound) goes too: the erasure errs on its own side.
func Forget(ctx context.Context, rows retention.Table, ledger *erasure.Store, r Request, log *slog.Logger) (Receipt, error) {
	wait := r.SecondPassAfter
	if wait == 0 {
		wait = erasure.Bound(r.Refresh, r.WriteTimeout)
	}
	e := &eraser{r: &r, log: log, rows: rows, store: ledger,
		rc: Receipt{Tenant: r.Tenant, DryRun: r.DryRun, RequestedBy: r.RequestedBy, ErasedUpTo: ErasedUpTo(r.Now, r.Before, r.MaxClockSkew),
			SecondPassAfter: wait.String(), Table: r.Table, Ledger: ledger.Table(), TenantsVersion: r.TenantsVersion}}
	// An erasure --before a time lives as long as a whole one: its events
	// wait in the same copies, and a TTL lengthened later would have a
	// replay write them again once a record of the TTL's life had gone.
	// With no mark it is never retired.
	e.rc.Unreachable, e.keep = unreachable(r.Facts, r.Backups, r.BackupsDecidedBy, r.LongestTTL)
	if !r.DryRun {
		if err := checkClock(ctx, ledger, r.Now, log); err != nil {
			return Receipt{}, err
		}
	}
	// Who is erased already: a forget run again after it was interrupted
	// finds no row left, and must still record and make both passes.
	if err := e.probeReplication(ctx); err != nil {
		return Receipt{}, err
	}
	var err error
	if e.erased, err = ledger.LoadUsers(ctx, r.Tenant, r.Users, r.Now); err != nil {
		return Receipt{}, err
	}
	e.rc.begun = true
	if err = e.run(ctx, wait); err != nil && e.rc.Replication.Summary == "" {
		e.rc.Replication.Summary = fmt.Sprintf("stopped after %d waits for consistency, with the error", e.rc.Replication.waits)
	}
	if err == nil && !r.DryRun && r.LogStarts != nil {
		err = e.retire(ctx)
	}
	return e.rc, err
}

// retire gives a life to the records of earlier erasures (of every
// tenant) kept forever for records of the input topic that Kafka has
// deleted since: the life they would have had, counted from when they
// were recorded, without the input topic's keep, and never less than each
// record's own AtLeastUntil (the backups and the TTL of its own forget).
func (e *eraser) retire(ctx context.Context) error {
	f, backups := e.r.Facts, e.r.Backups
	life := func(tenant string, upTo, recorded time.Time) time.Time {
		if f.Policy == nil {
			return time.Time{} // no tenants file read: no life to give
		}
		longest := f.Policy.LongestTTL(tenant)
		return recordExpires(recorded, upTo, retention.LedgerRecordLifePastInput(f, backups, longest), longest)
	}
	done, err := e.store.Retire(ctx, time.Now(), e.r.LogStarts, life)
	e.rc.Retired = &done
	if err != nil {
		return fmt.Errorf("retire the records of earlier erasures (this one is complete): %w", err)
	}
	for _, u := range done.Unread {
		e.log.Warn("could not read a topic's log start offsets: the records whose marks name it stay in force", "topic", u)
	}
	return nil
}

// checkClock refuses to record when now, forget's clock, lies more than
// erasure.ClockTolerance from Bigtable's: the workers read the journal
// from the newest row they have read less erasure.JournalMargin, and a
// record whose journal row (keyed by this host's clock) carries a time
// further behind another forget's would reach them only at their next
// read of the records in force (erasure.RereadEvery); one further ahead
// would erase the users' events to come that much longer.
func checkClock(ctx context.Context, ledger *erasure.Store, now time.Time, log *slog.Logger) error {
	server, err := ledger.ServerTime(ctx)
	if err != nil {
		return fmt.Errorf("%w; nothing was recorded or deleted", err)
	}
	// now was read a moment before (seconds at most): well within the
	// tolerance.
	off := now.Sub(server)
	if off.Abs() > erasure.ClockTolerance {
		way := "ahead of"
		if off < 0 {
			way = "behind"
		}
		return fmt.Errorf("refusing to record: this host's clock (%s) is %s %s Bigtable's (%s), more than %s: "+
			"the workers would read the records late, or they would erase the users' events to come. Fix the host's clock (NTP); nothing was recorded or deleted",
			now.UTC().Format(time.RFC3339Nano), duration.Format(off.Abs().Round(time.Millisecond)), way, server.Format(time.RFC3339Nano), duration.Format(erasure.ClockTolerance))
	}
	if off.Abs() > erasure.ClockTolerance/4 {
		log.Warn("this host's clock lies off Bigtable's; forget refuses beyond the tolerance", "offset", off.Round(time.Millisecond), "tolerance", erasure.ClockTolerance)
	}
	return nil
}

// eraser runs one forget.
type eraser struct {
	r      *Request
	log    *slog.Logger
	rows   retention.Table
	store  *erasure.Store
	erased *erasure.Ledger // as it stood when forget began
	keep   time.Duration   // how long a ledger record lives; <0 forever
	rc     Receipt
}

// run records, deletes, waits and deletes again, waiting for replication
// where forget waits (see Replication).
func (e *eraser) run(ctx context.Context, wait time.Duration) error {
	var first time.Time // every row
	if !e.r.Before.IsZero() {
		first = e.rc.ErasedUpTo.Add(time.Millisecond)
	}
	second := first
	if err := e.record(ctx, first); err != nil {
		return err
	}
	if err := e.mark(ctx); err != nil {
		return err
	}
	if e.r.DryRun || e.recorded() == 0 {
		e.done() // nothing recorded: nothing to delete, nor to wait for
		return nil
	}
	// The workers' bound counts from when every cluster has the records.
	if err := e.replicated(ctx, e.store.Table(), "the ledger records, before the bound counts"); err != nil {
		return fmt.Errorf("%w (the users are in the ledger: run the same forget again)", err)
	}
	if err := e.pass(ctx, first); err != nil {
		return err
	}
	// Rows written by batches decided before the workers loaded the
	// records: gone once every worker is past its bound, and once what
	// they wrote through another cluster has reached this one.
	select {
	case <-ctx.Done():
		return fmt.Errorf("interrupted before the second pass (run the same forget again: the users are in the ledger): %w", ctx.Err())
	case <-time.After(wait):
	}
	if err := e.secondPass(ctx, second); err != nil {
		return fmt.Errorf("%w (the users are in the ledger: run the same forget again)", err)
	}
	e.done()
	return nil
}

// secondPass deletes the rows up to before once more, after the rows
// written through every cluster have reached this one, and waits for the
// deletions to reach them all.
func (e *eraser) secondPass(ctx context.Context, before time.Time) error {
	if err := e.replicated(ctx, e.r.Replication.Table, "the rows written before the bound, before the second pass"); err != nil {
		return err
	}
	if err := e.pass(ctx, before); err != nil {
		return err
	}
	return e.replicated(ctx, e.r.Replication.Table, "the deletions")
}

// done fills the receipt's last words and logs the audit lines.
func (e *eraser) done() {
	e.replicationSummary()
	e.audit()
}

// record counts each user's rows before first and records the erasure of
// the users found. A user with no row is most often a typo, and gets no
// record unless AllowEmpty, or erased before (a run again).
func (e *eraser) record(ctx context.Context, first time.Time) error {
	r := e.r
	for _, u := range r.Users {
		rep, err := retention.DeleteUserRows(ctx, e.rows, retention.UserRows{Tenant: r.Tenant, User: u, Before: first, DryRun: true, Tracers: r.Tracers, Pseudonyms: r.Pseudonyms})
		if err != nil {
			return err
		}
		ur := UserReceipt{User: u, Bytes: rep.Bytes, RowsPerPass: []int64{rep.Rows}}
		_, erasedBefore := e.erased.UpTo(r.Tenant, u)
		if rep.Rows == 0 && !r.AllowEmpty && !erasedBefore {
			e.rc.NotFound++
			ur.RowsPerPass = []int64{0}
		} else if !r.DryRun {
			rec := erasure.Erasure{Tenant: r.Tenant, User: u, UpTo: e.rc.ErasedUpTo, RecordedAt: r.Now, RequestedBy: r.RequestedBy,
				Expires: recordExpires(r.Now, e.rc.ErasedUpTo, e.keep, r.LongestTTL)}
			if rec.Expires.IsZero() {
				// Kept forever: what a later forget that retires it may
				// not cut, whatever its own settings.
				rec.AtLeastUntil = recordExpires(r.Now, e.rc.ErasedUpTo, max(r.Backups, 0), r.LongestTTL)
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
	return nil
}

// pass deletes the rows of every recorded user.
func (e *eraser) pass(ctx context.Context, before time.Time) error {
	for i := range e.rc.Users {
		ur := &e.rc.Users[i]
		if ur.Record == nil {
			continue
		}
		rep, err := retention.DeleteUserRows(ctx, e.rows, retention.UserRows{Tenant: e.r.Tenant, User: ur.User, Before: before, Tracers: e.r.Tracers, Pseudonyms: e.r.Pseudonyms})
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
		e.log.Info("forget", "requested_by", e.r.RequestedBy, "operator", e.r.Operator, "user", e.r.Pseudonyms.Ref(e.r.Tenant, u.User),
			"erased_up_to", e.rc.ErasedUpTo, "rows_per_pass", u.RowsPerPass, "recorded", u.Record != nil, "dry_run", e.r.DryRun,
			"table", e.rc.Table, "ledger", e.rc.Ledger, "tenants_version", e.tenantsVersion())
	}
}

// tenantsVersion says, for the audit log, which tenants file set the
// records' life and how it compared with the workers'.
func (e *eraser) tenantsVersion() string {
	c := e.r.TenantsVersion
	switch {
	case c == nil:
		return "not checked"
	case c.Workers == nil:
		return c.Version + " (" + c.Outcome + ")"
	case c.Overridden:
		return c.Version + " (" + c.Outcome + " from the workers' " + c.Workers.Version + ", overridden)"
	}
	return c.Version + " (" + c.Outcome + " the workers' " + c.Workers.Version + ")"
}
