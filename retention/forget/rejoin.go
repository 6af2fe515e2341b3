package forget

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/rowkey"
)

// RejoinRequest says which offboarded tenant comes back.
type RejoinRequest struct {
	Tenant                string
	RequestedBy, Operator string
	// Now is when the rejoin is recorded.
	Now          time.Time
	MaxClockSkew time.Duration
	// EndOffsets and TopicID read the mark, as for Request: every event
	// appended to the input topic before the rejoin stays erased.
	EndOffsets func(context.Context) (topic string, ends []int64, err error)
	TopicID    func(ctx context.Context, topic string) (string, error)
	// Refresh and WriteTimeout make the workers' bound, within which every
	// worker writes the tenant's events again.
	Refresh, WriteTimeout time.Duration
	// EndAfter is the wait between recording the rejoin and ending the
	// offboarding in the table; zero waits the longer of the workers'
	// bound and their reread's timeout, with 5 s to spare.
	EndAfter time.Duration
	// Facts, Backups and LongestTTL give the rejoin's record its life, as
	// a user's erasure gets its own.
	Facts       retention.Facts
	Backups     time.Duration
	LongestTTL  time.Duration
	Replication Replication
}

// RejoinReceipt is what a rejoin did.
type RejoinReceipt struct {
	Tenant      string           `json:"tenant"`
	RequestedBy string           `json:"requested_by"`
	LeftAt      time.Time        `json:"left_at"`
	Record      *erasure.Erasure `json:"ledger_record"`
	// Ended counts the offboardings the rejoin ended in the table;
	// Finished says the rejoin was an earlier run's, which stopped before.
	Ended    int  `json:"ended_offboardings"`
	Finished bool `json:"finished_earlier_run"`
	// WrittenAgainWithin is the workers' bound: each writes the tenant's
	// events again within it.
	WrittenAgainWithin string             `json:"written_again_within"`
	Ledger             string             `json:"ledger_table"`
	Replication        ReplicationReceipt `json:"replication"`
}

// ErrNotOffboarded is Rejoin's error for a tenant with no offboarding in
// force.
var ErrNotOffboarded = errors.New("the tenant has no offboarding in force: nothing to rejoin")

// Rejoin brings an offboarded tenant back: it reads the input topic's end
// offsets, records the rejoin (erasing what the tenant had before it: its
// events up to when it left and the skew they may carry, and every event
// appended before now), recorded after every record of the tenant, which
// every worker takes at its next refresh since it was recorded last. It
// then waits until every worker holds it and no reread that began before
// it can still be reading, and ends the offboarding in the table. Run
// again after it stopped part-way, it finishes: the rejoin is in force,
// and the offboardings it ends are still there.
func Rejoin(ctx context.Context, ledger *erasure.Store, r RejoinRequest, log *slog.Logger) (rc RejoinReceipt, err error) {
	rc = RejoinReceipt{Tenant: r.Tenant, RequestedBy: r.RequestedBy, Ledger: ledger.Table(), WrittenAgainWithin: duration.Format(erasure.Bound(r.Refresh, r.WriteTimeout))}
	if err := rowkey.ValidateID("tenant", r.Tenant); err != nil {
		return rc, err
	}
	e := &eraser{r: &Request{Replication: r.Replication, EndOffsets: r.EndOffsets, TopicID: r.TopicID}, log: log, store: ledger}
	defer func() { rc.Replication = e.rc.Replication }()
	if err := checkClock(ctx, ledger, r.Now, log); err != nil {
		return rc, err
	}
	if err := e.probeReplication(ctx); err != nil {
		return rc, err
	}
	recs, err := ledger.TenantRecords(ctx, r.Tenant, r.Now)
	if err != nil {
		return rc, err
	}
	var left, last *erasure.Erasure
	for i := range recs {
		if recs[i].Whole() {
			left = &recs[i]
		}
	}
	if len(recs) > 0 {
		last = &recs[len(recs)-1]
	}
	switch {
	case left == nil:
		return rc, fmt.Errorf("tenant %s: %w", r.Tenant, ErrNotOffboarded)
	case last.Whole():
		rec, err := rejoinRecord(ctx, e, r, *left)
		if err != nil {
			return rc, err
		}
		if err := ledger.Put(ctx, rec); err != nil {
			return rc, err
		}
		last = &rec
	default:
		rc.Finished = true // an earlier run recorded it, and stopped before the end
	}
	rc.LeftAt, rc.Record = left.RecordedAt, last
	if err := e.replicated(ctx, ledger.Table(), "the rejoin"); err != nil {
		return rc, fmt.Errorf("%w (the rejoin is recorded: run it again to end the offboarding in the table)", err)
	}
	wait := r.EndAfter
	if wait == 0 {
		wait = max(erasure.Bound(r.Refresh, r.WriteTimeout), erasure.RereadTimeout(r.Refresh)+5*time.Second)
	}
	log.Info("rejoin recorded; waiting until every worker holds it before ending the offboarding in the table", "tenant", r.Tenant, "wait", wait)
	select {
	case <-ctx.Done():
		return rc, fmt.Errorf("interrupted before the offboarding was ended in the table (the rejoin is recorded and in force: run it again): %w", ctx.Err())
	case <-time.After(wait):
	}
	if rc.Ended, err = ledger.EndOffboardings(ctx, r.Tenant, last.RecordedAt, time.Now()); err != nil {
		return rc, err
	}
	log.Info("rejoin", "tenant", r.Tenant, "requested_by", r.RequestedBy, "operator", r.Operator, "left_at", left.RecordedAt, "erased_up_to", last.UpTo,
		"finished_earlier_run", rc.Finished, "ended_offboardings", rc.Ended, "ledger", ledger.Table())
	return rc, nil
}

// rejoinRecord is the rejoin of the tenant that left as left says: its
// mark read now, recorded after left (a host whose clock lies behind the
// offboarding's must not record before it, or the offboarding would win).
func rejoinRecord(ctx context.Context, e *eraser, r RejoinRequest, left erasure.Erasure) (erasure.Erasure, error) {
	var mark *erasure.Mark
	if r.EndOffsets != nil {
		var err error
		if mark, err = e.endOffsets(ctx); err != nil {
			return erasure.Erasure{}, fmt.Errorf("read the input topic's end offsets, which keep erased what was appended while the tenant was away (nothing recorded): %w", err)
		}
	}
	upTo := left.RecordedAt.Add(r.MaxClockSkew)
	at := later(r.Now, left.RecordedAt.Add(time.Millisecond))
	keep := retention.LedgerRecordLife(r.Facts, r.Backups, r.LongestTTL)
	rec := erasure.Erasure{Tenant: r.Tenant, Offboard: true, UpTo: upTo, Below: mark, RecordedAt: at, RequestedBy: r.RequestedBy,
		Expires: recordExpires(at, upTo, keep, r.LongestTTL)}
	if rec.Expires.IsZero() {
		rec.AtLeastUntil = recordExpires(at, upTo, max(r.Backups, 0), r.LongestTTL)
	}
	return rec, nil
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// WriteText writes the rejoin's receipt in words.
func (rc RejoinReceipt) WriteText(w io.Writer) {
	fmt.Fprintf(w, "rejoined tenant %s, requested by %s; it left at %s\n", rc.Tenant, rc.RequestedBy, rc.LeftAt.Format(time.RFC3339Nano))
	if r := rc.Record; r != nil {
		exp := "never"
		if !r.Expires.IsZero() {
			exp = r.Expires.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "still erased: its events at or before %s", r.UpTo.Format(time.RFC3339Nano))
		if r.Below != nil {
			fmt.Fprintf(w, ", and every event appended to %s before now (offsets below %v)", r.Below.Topic, r.Below.Ends)
		}
		fmt.Fprintf(w, "; ledger record in %s expires %s\n", rc.Ledger, exp)
	}
	if rc.Finished {
		fmt.Fprintln(w, "the rejoin was recorded by an earlier run, which stopped before it ended the offboarding: this run ended it")
	}
	fmt.Fprintf(w, "every worker writes its events again within %s of the rejoin; %d offboarding(s) ended in the table. The tenants file may list it again (a worker refuses the edit until its ledger holds the rejoin)\n",
		rc.WrittenAgainWithin, rc.Ended)
}
