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
	// Ended counts the offboardings the rejoin ended in the table.
	Ended int `json:"ended_offboardings"`
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
// appended before now), and ends the offboarding in the table.
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
	prior, err := ledger.Offboarding(ctx, r.Tenant, r.Now)
	if err != nil {
		return rc, err
	}
	if prior == nil {
		return rc, fmt.Errorf("tenant %s: %w", r.Tenant, ErrNotOffboarded)
	}
	rc.LeftAt = prior.RecordedAt
	var mark *erasure.Mark
	if r.EndOffsets != nil {
		if mark, err = e.endOffsets(ctx); err != nil {
			return rc, fmt.Errorf("read the input topic's end offsets, which keep erased what was appended while the tenant was away (nothing recorded): %w", err)
		}
	}
	upTo := prior.RecordedAt.Add(r.MaxClockSkew)
	keep := retention.LedgerRecordLife(r.Facts, r.Backups, r.LongestTTL)
	rec := erasure.Erasure{Tenant: r.Tenant, Offboard: true, UpTo: upTo, Below: mark, RecordedAt: r.Now, RequestedBy: r.RequestedBy,
		Expires: recordExpires(r.Now, upTo, keep, r.LongestTTL)}
	if rec.Expires.IsZero() {
		rec.AtLeastUntil = recordExpires(r.Now, upTo, max(r.Backups, 0), r.LongestTTL)
	}
	if rc.Ended, err = ledger.Rejoin(ctx, rec, r.Now); err != nil {
		return rc, err
	}
	rc.Record = &rec
	if err := e.replicated(ctx, ledger.Table(), "the rejoin"); err != nil {
		return rc, fmt.Errorf("%w (the rejoin is recorded)", err)
	}
	log.Info("rejoin", "tenant", r.Tenant, "requested_by", r.RequestedBy, "operator", r.Operator, "left_at", prior.RecordedAt, "erased_up_to", upTo, "ledger", ledger.Table())
	return rc, nil
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
	fmt.Fprintf(w, "every worker writes its events again within %s; list the tenant in the tenants file again once that has passed (a worker refuses the edit until its ledger holds the rejoin)\n",
		rc.WrittenAgainWithin)
}
